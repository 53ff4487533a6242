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

package attacher

import (
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

// Reasons for a fenced (non-graceful) detach. They label the metrics and
// appear in logs, Events and the FencingRequest record.
const (
	FenceReasonNodeDeleted    = "node-deleted"
	FenceReasonOutOfService   = "out-of-service"
	FenceReasonQuarantined    = "quarantined"
	FenceReasonNodeNotReady   = "node-not-ready"
	FenceReasonFencingRequest = "fencing-request"
	FenceReasonVolumeInUse    = "volume-in-use"
)

// Event reasons on the VolumeAttachment.
const (
	EventReasonFencedUnpublish = "FencedUnpublish"
	EventReasonFenceFailed     = "FenceFailed"
	EventReasonNodeIDChanged   = "NodeIDChanged"
)

// DecideFence says whether the detach of a volume (driver, handle) from a
// node is non-graceful, and why. node is nil when the Node object is gone; fr is the
// node's FencingRequest, nil when it has none.
//
// A detach is graceful only from a node that exists, is Ready, does not
// carry the out-of-service taint, has no active manual FencingRequest (an
// automatic one is the failover's record of a node it found NotReady; a
// Complete one is history) and on which the record holds no uncleaned entry
// of the volume. The quarantine taint alone does not make a detach from a
// Ready node a fence (S4): it says the failover found the node down once,
// and the record says which volumes it meant to fence (a node back before
// any was, whose pods ended there, is released, not fenced). Anything else
// means the kubelet may not have unmounted the volume, or someone decided the
// node must be cut off, so the volume must be fenced before it can move.
//
// The reason names the first fact that makes the detach non-graceful, from
// the most explicit to the inferred: the node is gone; an admin declared it
// out of service; this system quarantined it; it is not Ready. A
// FencingRequest is named only when nothing about the node itself explains
// the fence, i.e. for a Ready node fenced on an admin's explicit request
// (S4). The caller decides on live reads of node and fr when it acts.
//
// Last comes a healthy node whose kubelet still reports the volume in use
// (status.volumesInUse): Kubernetes decided the detach anyway, the attach/
// detach controller forcing it after its timeout (6 min) while the node was
// unhealthy, and the detach comes after the node is Ready again. A plain
// unpublish would pull the volume from under a mount, and the replacement
// may already write it elsewhere (S1). It is fenced: the fence of one
// volume whose detach Kubernetes ordered, on what the kubelet reports, not
// a fence of the node on an inference (S4); the node agent then cleans it
// up. A driver that cannot fence makes the caller wait for the kubelet to
// unmount it.
//
// wantedOnNode says a pod on the node, not terminating, uses the volume
// (read live): the detach is then graceful. The attach/detach controller
// detaches a volume a node reports in use only when it forces the detach
// (node unhealthy past its timeout, or the out-of-service taint), and only
// a volume no pod on the node needs; a kubelet reports a volume in use as
// soon as a pod on it wants it, before its attach. So a pod there that
// uses the volume came after the controller decided, and its kubelet's
// report is what makes the volume look in use: the volume goes back to
// this same node once detached (the kubelet mounts nothing through an
// attachment being deleted), the plain unpublish Kubernetes ordered lets
// no second node at it (S1), and a fence would fence a Ready node's volume
// nothing may have mounted (S4; trial seeds 11032, 13100).
//
// canFence is whether the driver's attachments can be fenced
// (fencemode.Mode.Fences): it advertises UNPUBLISH_FENCE, or its CSIDriver
// declares that its plain unpublish revokes access. Without it the answer
// is never fence, but the reason is still returned so that the caller can
// say that a non-graceful detach went unfenced. Whether the fence carries
// the fence field is the mode's business, not this function's: the field
// is never sent to a driver that does not advertise it.
func DecideFence(canFence bool, node *v1.Node, fr *fencingv1alpha1.FencingRequest, driver, handle string, wantedOnNode bool) (fence bool, reason string) {
	switch {
	case node == nil:
		reason = FenceReasonNodeDeleted
	case hasTaint(node, contract.OutOfServiceTaintKey):
		reason = FenceReasonOutOfService
	case !isReady(node) && hasTaint(node, contract.QuarantineTaintKey):
		reason = FenceReasonQuarantined
	case !isReady(node):
		reason = FenceReasonNodeNotReady
	case fr.ManualActive():
		reason = FenceReasonFencingRequest
	case fencerecord.MayBeQuarantined(fr, driver, handle):
		// Sticky (S8): once a fence of the volume was intended on the node,
		// every unpublish from it is fenced until the node agent cleaned it.
		reason = FenceReasonQuarantined
	case volumeInUse(node, driver, handle) && !wantedOnNode:
		reason = FenceReasonVolumeInUse
	default:
		return false, ""
	}
	return canFence, reason
}

// volumeInUse reports whether the node's kubelet reports the volume in use.
func volumeInUse(node *v1.Node, driver, handle string) bool {
	return slices.Contains(node.Status.VolumesInUse, kubeletlayout.UniqueVolumeName(driver, handle))
}

// QuarantineRefusal says why the volume (driver, handle) must not be
// published to the node now, or returns nil (S2): the node carries the
// quarantine taint, or the record says the volume may be quarantined there
// (a fence of it was intended and the node agent has not cleaned it since).
// node is nil when the Node is gone or cannot be read; fr is the node's
// FencingRequest or nil.
func QuarantineRefusal(driver, handle, nodeName string, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	if node != nil && hasTaint(node, contract.QuarantineTaintKey) {
		return fmt.Errorf("node %s is quarantined (taint %s): nothing is published to it until the volumes fenced there are cleaned up",
			nodeName, contract.QuarantineTaintKey)
	}
	if fencerecord.MayBeQuarantined(fr, driver, handle) {
		return fmt.Errorf("volume %s is quarantined on node %s (fenced, not yet cleaned up per FencingRequest %s): refusing to publish it there",
			handle, nodeName, fr.Name)
	}
	return nil
}

// SecondNodeRefusal guards S1 defensively, beside the attach/detach
// controller's own multi-attach check: a single-node volume (no RWX/ROX
// access mode) is not published to a second node while another
// VolumeAttachment of this driver for the same PV, on another node, still
// carries the attacher's finalizer, i.e. is attached or not yet confirmed
// detached (or fenced). vas is every VolumeAttachment the caller knows.
func SecondNodeRefusal(driver, finalizer string, va *storagev1.VolumeAttachment, modes []v1.PersistentVolumeAccessMode, vas []*storagev1.VolumeAttachment) error {
	pv := pvName(va)
	if pv == "" || !singleNode(modes) {
		return nil
	}
	for _, other := range vas {
		if other.Name == va.Name || other.Spec.Attacher != driver || other.Spec.NodeName == va.Spec.NodeName || pvName(other) != pv {
			continue
		}
		if slices.Contains(other.Finalizers, finalizer) {
			return fmt.Errorf("volume %s is single-node and still attached to node %s (VolumeAttachment %s): it must be detached or fenced there first",
				pv, other.Spec.NodeName, other.Name)
		}
	}
	return nil
}

// singleNode reports whether the volume may be used by one node at a time,
// the way the attach/detach controller decides whether to allow a
// multi-attach: no ReadWriteMany or ReadOnlyMany access mode.
func singleNode(modes []v1.PersistentVolumeAccessMode) bool {
	for _, m := range modes {
		if m == v1.ReadWriteMany || m == v1.ReadOnlyMany {
			return false
		}
	}
	return true
}

// refused tells a driver's answer (FAILED_PRECONDITION: it cannot prove the
// node stopped using the volume, or any other final error) from a transient
// failure (timeout, unavailable, aborted...). Both are retried with backoff;
// the difference is what the detachError tells the user.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.OK, codes.Unknown, codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return false
	}
	return true
}

func hasTaint(node *v1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// isReady reports the node's Ready condition; a node without one is not
// ready (the node lifecycle controller would say Unknown).
func isReady(node *v1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
