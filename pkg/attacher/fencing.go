package attacher

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// Reasons for a fenced (non-graceful) detach. They label the metrics and
// appear in logs, Events and the FencingRequest record.
const (
	FenceReasonNodeDeleted    = "node-deleted"
	FenceReasonOutOfService   = "out-of-service"
	FenceReasonQuarantined    = "quarantined"
	FenceReasonNodeNotReady   = "node-not-ready"
	FenceReasonFencingRequest = "fencing-request"
)

// Event reasons on the VolumeAttachment.
const (
	EventReasonFencedUnpublish = "FencedUnpublish"
	EventReasonFenceFailed     = "FenceFailed"
)

// DecideFence says whether the detach of a volume (driver, handle) from a
// node is non-graceful, and why. node is nil when the Node object is gone; fr is the
// node's FencingRequest, nil when it has none.
//
// A detach is graceful only from a node that exists, is Ready, carries
// neither the quarantine nor the out-of-service taint, has no active
// FencingRequest (of any origin; a Complete one is history) and on which the
// record holds no uncleaned entry of the volume. Anything else
// means the kubelet may not have unmounted the volume, or someone decided the
// node must be cut off, so the volume must be fenced before it can move.
//
// The reason names the first fact that makes the detach non-graceful, from
// the most explicit to the inferred: the node is gone; an admin declared it
// out of service; this system quarantined it; it is not Ready. A
// FencingRequest is named only when nothing about the node itself explains
// the fence, i.e. for a Ready node fenced on explicit request (S4); this also
// keeps the reason stable when the record of an earlier fence on the node
// (which creates a FencingRequest) is in place by the time of a retry.
//
// canFence is whether the driver advertises UNPUBLISH_FENCE: without it the
// answer is never fence (the field must not be sent to a driver that does not
// know it), but the reason is still returned so that the caller can say that
// a non-graceful detach went unfenced.
func DecideFence(canFence bool, node *v1.Node, fr *fencingv1alpha1.FencingRequest, driver, handle string) (fence bool, reason string) {
	switch {
	case node == nil:
		reason = FenceReasonNodeDeleted
	case hasTaint(node, contract.OutOfServiceTaintKey):
		reason = FenceReasonOutOfService
	case hasTaint(node, contract.QuarantineTaintKey):
		reason = FenceReasonQuarantined
	case !isReady(node):
		reason = FenceReasonNodeNotReady
	case fencingRequestActive(fr):
		reason = FenceReasonFencingRequest
	case fencerecord.MayBeQuarantined(fr, driver, handle):
		// Sticky (S8): once a fence of the volume was intended on the node,
		// every unpublish from it is fenced until the node agent cleaned it.
		reason = FenceReasonQuarantined
	default:
		return false, ""
	}
	return canFence, reason
}

// fencingRequestActive: the node has a FencingRequest that is not Complete.
func fencingRequestActive(fr *fencingv1alpha1.FencingRequest) bool {
	return fr != nil && fr.Status.Phase != fencingv1alpha1.PhaseComplete
}

// PublishRefusal says why publishing a volume to a node must not happen
// now, or returns nil. It guards two safety invariants of DESIGN.md:
//
//   - S2: no publish to a node on which the volume is quarantined (the
//     record says fenced and not cleaned up), nor to a node carrying the
//     quarantine taint, until the node agent has cleaned up;
//   - S1, defensively: a single-node volume (no RWX/ROX access mode) is not
//     published to a second node while another VolumeAttachment of this
//     driver for the same PV, on another node, still carries our finalizer,
//     i.e. is attached or not yet confirmed detached (or fenced).
//
// node is nil when the Node is gone; fr is the node's FencingRequest or nil;
// vas is every VolumeAttachment the caller knows.
func PublishRefusal(driver, finalizer string, va *storagev1.VolumeAttachment, spec *v1.PersistentVolumeSpec,
	node *v1.Node, fr *fencingv1alpha1.FencingRequest, vas []*storagev1.VolumeAttachment) error {
	nodeName := va.Spec.NodeName
	handle := spec.CSI.VolumeHandle
	if node != nil && hasTaint(node, contract.QuarantineTaintKey) {
		return fmt.Errorf("node %s is quarantined (taint %s): nothing is published to it until the volumes fenced there are cleaned up",
			nodeName, contract.QuarantineTaintKey)
	}
	if fencerecord.MayBeQuarantined(fr, driver, handle) {
		return fmt.Errorf("volume %s is quarantined on node %s (fenced, not yet cleaned up per FencingRequest %s): refusing to publish it there",
			handle, nodeName, fr.Name)
	}
	pv := pvName(va)
	if pv == "" || !singleNode(spec) {
		return nil
	}
	for _, other := range vas {
		if other.Name == va.Name || other.Spec.Attacher != driver || other.Spec.NodeName == nodeName || pvName(other) != pv {
			continue
		}
		for _, f := range other.Finalizers {
			if f == finalizer {
				return fmt.Errorf("volume %s is single-node and still attached to node %s (VolumeAttachment %s): it must be detached or fenced there first",
					handle, other.Spec.NodeName, other.Name)
			}
		}
	}
	return nil
}

// singleNode reports whether the volume may be used by one node at a time,
// the way the attach/detach controller decides whether to allow a
// multi-attach: no ReadWriteMany or ReadOnlyMany access mode.
func singleNode(spec *v1.PersistentVolumeSpec) bool {
	for _, m := range spec.AccessModes {
		if m == v1.ReadWriteMany || m == v1.ReadOnlyMany {
			return false
		}
	}
	return true
}
