package attacher

import (
	v1 "k8s.io/api/core/v1"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// Reasons for a fenced detach; they label metrics and events.
const (
	FenceReasonNodeDeleted     = "node-deleted"
	FenceReasonFencingRequest  = "fencing-request"
	FenceReasonOutOfService    = "out-of-service"
	FenceReasonQuarantined     = "quarantined"
	FenceReasonNodeNotReady    = "node-not-ready"
	fenceReasonNone            = ""
	eventReasonFencedUnpublish = "FencedUnpublish"
	eventReasonFenceFailed     = "FenceFailed"
)

// DecideFence says whether a detach from node must fence the volume, and why.
// A detach is graceful, and must not quarantine the volume, only when the node
// exists, is Ready, carries neither the quarantine nor the out-of-service
// taint, and has no FencingRequest. node is nil when the Node object is gone.
// Without the UNPUBLISH_FENCE capability the answer is always no: the field
// must never be sent to a driver that does not know it.
func DecideFence(canFence bool, node *v1.Node, hasFencingRequest bool) (bool, string) {
	if !canFence {
		return false, fenceReasonNone
	}
	if node == nil {
		return true, FenceReasonNodeDeleted
	}
	if hasFencingRequest {
		return true, FenceReasonFencingRequest
	}
	if hasTaint(node, contract.OutOfServiceTaintKey) {
		return true, FenceReasonOutOfService
	}
	if hasTaint(node, contract.QuarantineTaintKey) {
		return true, FenceReasonQuarantined
	}
	if !isReady(node) {
		return true, FenceReasonNodeNotReady
	}
	return false, fenceReasonNone
}

func hasTaint(node *v1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func isReady(node *v1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
