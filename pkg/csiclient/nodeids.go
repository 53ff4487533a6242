/*
Copyright 2026 The fence-attacher Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

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
