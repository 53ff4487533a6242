package csiclient

import "fmt"

// EachNodeID calls unpublish (a plain unpublish or a fence) with every node
// ID a volume may be published under on its node: first previous, an ID
// the node's plugin registered earlier (contract.PreviousNodeIDAnnotation),
// unless it is "" or nodeID, then nodeID. A volume still published under
// the previous ID is out of reach of an unpublish or a fence of the current
// one (S1), so the current one waits for it. It stops at the first error.
func EachNodeID(previous, nodeID string, unpublish func(nodeID string) error) error {
	if previous != "" && previous != nodeID {
		if err := unpublish(previous); err != nil {
			return fmt.Errorf("previous node ID %q: %w", previous, err)
		}
	}
	return unpublish(nodeID)
}
