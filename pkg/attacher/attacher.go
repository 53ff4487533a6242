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

// Package attacher is what csi-fence-attacher adds to external-attacher.
//
// external-attacher's own controller runs unmodified (module
// github.com/kubernetes-csi/external-attacher/v4, pkg/controller): its
// informers and queues, its CSI handler with the finalizers, secrets, node
// IDs, CSI migration through csi-translation-lib and ListVolumes
// reconciliation, its trivial handler. The fence is added at the two seams it
// offers:
//
//   - Attacher implements its attacher.Attacher. Detach decides whether the
//     unpublish must fence (DecideFence), records the fence write-ahead and
//     sends ControllerUnpublishVolume with fence=true; Attach refuses to
//     publish where the volume may be quarantined (S2) or while a single-node
//     volume is still attached elsewhere (S1). An error from either keeps
//     external-attacher's finalizer and backoff, so nothing is detached
//     before its fence is recorded. The fence itself runs in a pool of its
//     own (fencePool), never in one of external-attacher's workers, so that
//     a burst of fences does not starve the attaches (external-attacher
//     issue #761).
//   - Handler decorates its controller.Handler: it gives Attacher the
//     VolumeAttachment being synced (through the context), has it record
//     the node ID an attach's sync is about to replace before that sync
//     runs (RecordPreviousNodeID), and requeues a node's VolumeAttachments
//     when the node's health or FencingRequest changes, so that a detach
//     waiting in backoff is fenced at once, or when its kubelet stops
//     using a volume, which a detach may wait for.
package attacher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	upstream "github.com/kubernetes-csi/external-attacher/v4/pkg/attacher"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fencemode"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/liveread"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// Config configures NewAttacher.
type Config struct {
	DriverName string
	// CanFence: the driver advertises UNPUBLISH_FENCE. Without it the fence
	// field is never sent.
	CanFence bool
	// FencesOnOutOfService: the driver's CSIDriver declares
	// (contract.FencesOnOutOfServiceAnnotation) that its plain unpublish
	// from a node with the out-of-service taint is a fence (ceph-csi's
	// --enable-fencing). Such a detach is recorded as a fence.
	FencesOnOutOfService bool
	// Declaration reads, live, whether the driver's CSIDriver declares
	// that a successful plain unpublish revokes the node's access
	// (contract.UnpublishRevokesAccessAnnotation). For such a driver
	// without UNPUBLISH_FENCE, a detach that must be fenced is fenced with
	// that plain unpublish, recorded as a fence. Nil: never declared (the
	// sidecar may not read CSIDrivers).
	Declaration *fencemode.Reader

	// CSI publishes and plainly unpublishes: external-attacher's own
	// attacher, so that those requests are byte for byte its requests.
	CSI upstream.Attacher
	// FenceCSI sends the fenced unpublish (csiclient.Client), which
	// external-attacher's attacher cannot express.
	FenceCSI csiclient.Attacher

	// NodeIDs maps the driver's node IDs to Nodes (NewNodeIDs).
	NodeIDs *NodeIDs
	// PVs and VAs serve the single-node check of Attach.
	PVs corelisters.PersistentVolumeLister
	VAs storagelisters.VolumeAttachmentLister
	// VolumeAttachments writes and removes the record of a previous node
	// ID (contract.PreviousNodeIDAnnotation), with the verb
	// external-attacher patches VolumeAttachments with.
	VolumeAttachments storagev1client.VolumeAttachmentInterface

	// Nodes and Client (live reads of Nodes) are nil when the sidecar may
	// not read Nodes: nothing can then be told graceful or not, so nothing
	// is fenced nor refused, exactly as external-attacher.
	Nodes  corelisters.NodeLister
	Client kubernetes.Interface
	// FencingRequests (the cache) and FenceRecord (live reads, and the
	// writes of the write-ahead record) are nil when the FencingRequest API
	// is not served or not granted: a fence is then never sent, since
	// nothing could record it nor lift the quarantine it starts (S8).
	FencingRequests fencingv1alpha1.Lister
	FenceRecord     fencerecord.Client

	Recorder record.EventRecorder

	// FenceWorkers is the number of fences sent at once (0:
	// DefaultFenceWorkers); Timeout bounds each fence, record writes and
	// call, as --timeout bounds external-attacher's Detach.
	FenceWorkers int
	Timeout      time.Duration
}

// Attacher is external-attacher's attacher.Attacher with the fence.
type Attacher struct {
	Config
	finalizer string
	// recorder writes the record of every fence of this Attacher, which
	// external-attacher's workers share: the fences of one failed node's
	// attachments share their record writes (fencerecord.Recorder).
	recorder *fencerecord.Recorder
	// fences runs the fences; nil when nothing is ever fenced (no record).
	fences *fencePool
	// nodeReads and recordReads share the live reads of a node's Node and
	// FencingRequest among the workers that need them at the same time
	// (a burst of detaches from a failed node), each read begun after its
	// callers asked; the results are shared and never modified.
	nodeReads   liveread.Group[*v1.Node]
	recordReads liveread.Group[*fencingv1alpha1.FencingRequest]
}

var _ upstream.Attacher = &Attacher{}

// NewAttacher returns the fencing Attacher, or an error naming what cfg
// lacks. It registers the fence metrics.
func NewAttacher(cfg Config) (*Attacher, error) {
	switch {
	case cfg.DriverName == "" || cfg.CSI == nil || cfg.FenceCSI == nil || cfg.Recorder == nil:
		return nil, errors.New("fencing attacher: driver name, CSI clients and event recorder are required")
	case cfg.NodeIDs == nil || cfg.PVs == nil || cfg.VAs == nil || cfg.VolumeAttachments == nil:
		return nil, errors.New("fencing attacher: node IDs, PV and VolumeAttachment listers and the VolumeAttachment client are required")
	case (cfg.Nodes == nil) != (cfg.Client == nil):
		return nil, errors.New("fencing attacher: the Node lister and the client for live reads go together")
	case (cfg.FencingRequests == nil) != (cfg.FenceRecord == nil):
		return nil, errors.New("fencing attacher: the FencingRequest lister and record go together")
	}
	RegisterMetrics()
	initMetrics(cfg.DriverName)
	a := &Attacher{Config: cfg, finalizer: contract.AttacherFinalizer(cfg.DriverName)}
	if cfg.FenceRecord != nil {
		a.recorder = fencerecord.NewRecorder(cfg.FenceRecord)
		a.fences = newFencePool(cfg.FenceWorkers, cfg.Timeout, a.fenceIfStillNeeded)
	}
	return a, nil
}

// Attach implements attacher.Attacher: it publishes unless that would break
// S1 or S2, which is refused as a final error (detached=true: nothing was
// sent to the driver).
func (a *Attacher) Attach(ctx context.Context, volumeID string, readOnly bool, nodeID string, caps *csi.VolumeCapability,
	attributes, secrets map[string]string) (map[string]string, bool, error) {
	if err := a.publishRefusal(ctx, volumeID, nodeID); err != nil {
		klog.FromContext(ctx).V(2).Info("Publish refused", "volume", volumeID, "nodeID", nodeID, "reason", err.Error())
		return nil, true, err
	}
	if err := a.unpublishPreviousNodeID(ctx, volumeID, nodeID, secrets); err != nil {
		return nil, false, err
	}
	return a.CSI.Attach(ctx, volumeID, readOnly, nodeID, caps, attributes, secrets)
}

// RecordPreviousNodeID is the write-ahead of unpublishPreviousNodeID:
// Handler calls it before external-attacher syncs the attach of va, and
// does not run that sync when it fails. external-attacher writes the ID of
// the node's CSINode on the VolumeAttachment (contract.NodeIDAnnotation)
// right before each publish, replacing the one before, which is the only
// name of the ID the volume was last published, or being published, to.
// When the two differ (the node plugin registered again under another ID:
// an initiator- or NQN-derived ID, a VM re-created under the same name), the
// old one is first recorded in an annotation of this project
// (contract.PreviousNodeIDAnnotation), which only the unpublish from it
// removes: a crash anywhere between external-attacher's write and that
// unpublish leaves the ID named, for the next sync to unpublish and for a
// detach to take the volume away from (S1).
//
// A VolumeAttachment that records a previous ID already keeps it: the IDs
// external-attacher wrote over it since were not published, since a publish
// waits for the record's removal. The write is conditional on va's
// resourceVersion: va comes from the cache, and a record decided on an
// older VolumeAttachment could name the wrong ID. An attached
// VolumeAttachment is recorded too: external-attacher publishes it again
// when its ListVolumes reconciliation finds it missing. It returns the
// VolumeAttachment to sync: va, or va as written.
func (a *Attacher) RecordPreviousNodeID(ctx context.Context, va *storagev1.VolumeAttachment) (*storagev1.VolumeAttachment, error) {
	previous := va.Annotations[contract.NodeIDAnnotation]
	if va.Spec.Attacher != a.DriverName || va.DeletionTimestamp != nil || previous == "" || va.Annotations[contract.PreviousNodeIDAnnotation] != "" {
		return va, nil
	}
	current, ok := a.NodeIDs.NodeID(va.Spec.NodeName)
	if !ok || current == previous {
		// Without a CSINode entry external-attacher publishes nothing.
		return va, nil
	}
	klog.FromContext(ctx).Info("The node's CSINode names another node ID than the VolumeAttachment: recording the previous one before it is replaced",
		"node", va.Spec.NodeName, "previousNodeID", previous, "nodeID", current)
	return a.writePreviousNodeID(ctx, va, previous)
}

// writePreviousNodeID records previous on va, unless va changed since it
// was read.
func (a *Attacher) writePreviousNodeID(ctx context.Context, va *storagev1.VolumeAttachment, previous string) (*storagev1.VolumeAttachment, error) {
	meta := map[string]any{"annotations": map[string]string{contract.PreviousNodeIDAnnotation: previous}}
	if va.ResourceVersion != "" {
		meta["resourceVersion"] = va.ResourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return va, err
	}
	written, err := a.VolumeAttachments.Patch(ctx, va.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return va, fmt.Errorf("recording the previous node ID %q of VolumeAttachment %s: %w", previous, va.Name, err)
	}
	return written, nil
}

// forgetPreviousNodeID removes the record of previous from the
// VolumeAttachment once the volume is unpublished from it, and only if it
// still names previous (the cache va was read from may be behind).
func (a *Attacher) forgetPreviousNodeID(ctx context.Context, vaName, previous string) error {
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(contract.PreviousNodeIDAnnotation, "~", "~0"), "/", "~1")
	patch, err := json.Marshal([]map[string]string{{"op": "test", "path": path, "value": previous}, {"op": "remove", "path": path}})
	if err != nil {
		return err
	}
	_, err = a.VolumeAttachments.Patch(ctx, vaName, types.JSONPatchType, patch, metav1.PatchOptions{})
	return err
}

// unpublishPreviousNodeID unpublishes the volume from the node ID an earlier
// publish of the same VolumeAttachment went to, when external-attacher is
// about to publish it under another one (see RecordPreviousNodeID): the
// volume may still be published under the old ID (a publish that failed or
// timed out, one the driver reported gone, then retried), which neither the
// detach nor a fence of the new one would ever take away (S1). The old ID is
// unpublished first, plainly: the attachment is being attached, not used,
// and an unpublish only takes access away. Its record is removed only then,
// and the publish goes ahead only once it is: a failure at any step leaves
// the record for the retry.
//
// The old ID is the one recorded (contract.PreviousNodeIDAnnotation), else
// the one on the VolumeAttachment as synced, before external-attacher's
// write: Handler did not record it (the CSINode changed between its read
// and external-attacher's, which read the same cache a moment apart; or
// the Attacher was called without Handler), and it is recorded now, on a
// live read, before anything is sent. (A crash between external-attacher's
// write and this one, in that race alone, still loses it.)
//
// If another node registers the old ID now, unpublishing it could cut that
// node off: the publish is refused, and an Event says why, for an admin to
// unpublish it and remove the record.
func (a *Attacher) unpublishPreviousNodeID(ctx context.Context, volumeID, nodeID string, secrets map[string]string) error {
	va := volumeAttachmentFrom(ctx) // as synced: before external-attacher's write
	if va == nil {
		return nil
	}
	previous, recorded := va.Annotations[contract.PreviousNodeIDAnnotation], true
	if previous == "" {
		previous, recorded = va.Annotations[contract.NodeIDAnnotation], false
	}
	if previous == "" || previous == nodeID {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("volume", volumeID, "node", va.Spec.NodeName, "previousNodeID", previous, "nodeID", nodeID)
	if !recorded {
		if err := a.recordPreviousNodeIDLate(ctx, va.Name, previous); err != nil {
			return err
		}
	}
	if other, ok := a.NodeIDs.NodeName(previous); ok && other != va.Spec.NodeName {
		a.event(va, v1.EventTypeWarning, EventReasonNodeIDChanged,
			"Volume %s may still be published to node %s as node ID %q, which node %s registers now: not unpublished from it (that could cut %s off), and not published as %q until an admin unpublishes it and removes the annotation %s",
			volumeID, va.Spec.NodeName, previous, other, other, nodeID, contract.PreviousNodeIDAnnotation)
		return fmt.Errorf("volume %s may still be published as node ID %q, which node %s registers now: refusing to publish it as %q", volumeID, previous, other, nodeID)
	}
	logger.Info("Publishing under a new node ID: unpublishing the previous one first")
	a.event(va, v1.EventTypeWarning, EventReasonNodeIDChanged,
		"Volume %s is published to node %s as node ID %q now, which its CSINode names instead of %q: unpublished from %q first",
		volumeID, va.Spec.NodeName, nodeID, previous, previous)
	if err := a.CSI.Detach(ctx, volumeID, previous, secrets); err != nil {
		return fmt.Errorf("unpublishing volume %s from its previous node ID %q: %w", volumeID, previous, err)
	}
	if err := a.forgetPreviousNodeID(ctx, va.Name, previous); err != nil {
		return fmt.Errorf("volume %s is unpublished from its previous node ID %q, but the record of that ID could not be removed (the retry unpublishes it again): %w",
			volumeID, previous, err)
	}
	return nil
}

// recordPreviousNodeIDLate records previous, the node ID external-attacher
// has just written over, on a live read of the VolumeAttachment: the cache
// may not show external-attacher's write yet, nor a record of another ID,
// which must not be overwritten (the sync is then retried). The read is a
// list by name: external-attacher's role, which the sidecar's extends,
// lists VolumeAttachments but does not get them.
func (a *Attacher) recordPreviousNodeIDLate(ctx context.Context, vaName, previous string) error {
	list, err := a.VolumeAttachments.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", vaName).String()})
	if err != nil {
		return fmt.Errorf("reading VolumeAttachment %s to record its previous node ID %q: %w", vaName, previous, err)
	}
	var live *storagev1.VolumeAttachment
	for i := range list.Items {
		if list.Items[i].Name == vaName {
			live = &list.Items[i]
		}
	}
	if live == nil {
		return fmt.Errorf("VolumeAttachment %s is gone: its previous node ID %q is not recorded", vaName, previous)
	}
	if other := live.Annotations[contract.PreviousNodeIDAnnotation]; other != "" && other != previous {
		return fmt.Errorf("VolumeAttachment %s records the previous node ID %q, which the cache does not show yet: retrying", vaName, other)
	}
	_, err = a.writePreviousNodeID(ctx, live, previous)
	return err
}

// publishRefusal decides QuarantineRefusal and SecondNodeRefusal on the
// caches and then, when they refuse nothing, QuarantineRefusal again on a
// live read of the node's FencingRequest: an intent to fence is recorded
// right before its fence is sent (S8), by this attacher's fence pool or by
// the failover controller, and a publish decided on a cache that has not
// seen it yet would cross the fence (S2). That is one GET, by name, per
// publish that goes ahead: nothing cheaper sees another process's intent
// of a moment ago (the node's quarantine taint comes through a cache too,
// and this process's own fence pool knows only its own fences).
func (a *Attacher) publishRefusal(ctx context.Context, volumeID, nodeID string) error {
	va := volumeAttachmentFrom(ctx)
	nodeName, err := a.nodeName(nodeID, va)
	if err != nil {
		return err
	}
	var node *v1.Node
	if a.Nodes != nil {
		if node, err = a.cachedNode(nodeName); err != nil {
			return err
		}
	}
	fr, err := a.cachedFencingRequest(nodeName)
	if err != nil {
		return err
	}
	if err := QuarantineRefusal(a.DriverName, volumeID, nodeName, node, fr); err != nil {
		return err
	}
	if va != nil {
		if err := a.secondNodeRefusal(va); err != nil {
			return err
		}
	}
	if fr, err = a.liveFencingRequest(ctx, nodeName); err != nil {
		return err
	}
	return QuarantineRefusal(a.DriverName, volumeID, nodeName, node, fr)
}

// secondNodeRefusal is SecondNodeRefusal of va on the caches.
func (a *Attacher) secondNodeRefusal(va *storagev1.VolumeAttachment) error {
	modes, err := a.accessModes(va)
	if err != nil {
		return err
	}
	vas, err := a.VAs.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	return SecondNodeRefusal(a.DriverName, a.finalizer, va, modes, vas)
}

// accessModes returns the access modes of the volume va attaches.
func (a *Attacher) accessModes(va *storagev1.VolumeAttachment) ([]v1.PersistentVolumeAccessMode, error) {
	if spec := va.Spec.Source.InlineVolumeSpec; spec != nil {
		return spec.AccessModes, nil
	}
	pv, err := a.PVs.Get(pvName(va))
	if err != nil {
		return nil, fmt.Errorf("reading PersistentVolume %q: %w", pvName(va), err)
	}
	return pv.Spec.AccessModes, nil
}

// Detach implements attacher.Attacher: a graceful detach is a plain
// unpublish; a non-graceful one is fenced when the driver can fence and the
// fence can be recorded. An error keeps the VolumeAttachment's finalizer, so
// the volume does not move until the fence is recorded done.
//
// Every unpublish, plain or fenced, goes to the node ID the volume was
// published to (publishedNodeID), which is not always the one
// external-attacher passes, and first to the previous one the
// VolumeAttachment still records, if any (previousNodeID): the volume may
// be published under both. A fenced detach fences both: the publication
// under the previous ID is the failed node's as much as the other, and a
// plain unpublish does not promise that the node can no longer write.
func (a *Attacher) Detach(ctx context.Context, volumeID, nodeID string, secrets map[string]string) error {
	logger := klog.FromContext(ctx)
	va := volumeAttachmentFrom(ctx)
	nodeID = a.publishedNodeID(logger, va, volumeID, nodeID)
	previous := a.previousNodeID(logger, va, volumeID, nodeID)
	unpublish := func() error { return a.unpublish(ctx, volumeID, previous, nodeID, secrets) }
	if a.Nodes == nil {
		return unpublish()
	}
	nodeName, err := a.nodeName(nodeID, va)
	if err != nil {
		return err
	}
	mode, reason, fr, err := a.decide(ctx, va, nodeName, volumeID)
	if err != nil {
		return err
	}
	fence := mode.Fences()
	switch {
	case reason == "":
		return unpublish()
	case a.recordedFence(fence, reason):
		if fencerecord.IsFenced(fr, a.DriverName, volumeID) {
			// The node can no longer access the volume: a fence of it was
			// confirmed and recorded (by the failover, or by an earlier
			// detach whose finalizer removal failed), and the node agent
			// has not cleaned it since.
			logger.V(2).Info("Volume already fenced from the node: detached without a call to the driver",
				"volume", volumeID, "node", nodeName, "reason", reason)
			return nil
		}
		return a.submitFence(logger, va, volumeID, previous, nodeID, nodeName, reason, secrets, fr)
	case reason == FenceReasonVolumeInUse:
		// A plain unpublish would pull the volume from under the
		// kubelet's mount: the detach waits, with external-attacher's
		// backoff and finalizer, until the kubelet unmounts it (Handler
		// requeues it then) or the node fails (it is fenced then).
		why := "the driver cannot fence it"
		if fence {
			why = "its fence could not be recorded (no FencingRequest API)"
		}
		return fmt.Errorf("volume %s is still in use on node %s (status.volumesInUse) and %s: the detach waits until the kubelet unmounts it",
			volumeID, nodeName, why)
	case !fence:
		logger.V(2).Info("Non-graceful detach, but the driver does not advertise UNPUBLISH_FENCE and its CSIDriver does not declare that its unpublish revokes access: unpublishing without fence",
			"volume", volumeID, "node", nodeName, "reason", reason, "annotation", contract.UnpublishRevokesAccessAnnotation)
		return unpublish()
	default:
		// A fence that cannot be recorded would quarantine the volume with
		// nothing to lift it (S8): detach as external-attacher does.
		unfencedDetaches.WithLabelValues(a.DriverName, reason).Inc()
		logger.Info("Non-graceful detach, but the FencingRequest record is unavailable: unpublishing without fence",
			"volume", volumeID, "node", nodeName, "reason", reason)
		a.event(va, v1.EventTypeWarning, EventReasonFenceFailed,
			"Volume %s detached from node %s (%s) without a fence: the FencingRequest record is unavailable", volumeID, nodeName, reason)
		return unpublish()
	}
}

// recordedFence says whether a non-graceful detach (reason, not "") is a
// fence recorded write-ahead: the fencing unpublish of a driver that can
// fence (fence: decide's mode fences, with fence=true or, for a driver
// whose CSIDriver declares that its unpublish revokes access, plainly), or
// the plain unpublish of one that fences by itself on the out-of-service
// taint (read live by decide), which is the fence, so that the volume is
// not published there again until the node agent cleaned it (S2, S8).
// Neither is possible without the FencingRequest record.
func (a *Attacher) recordedFence(fence bool, reason string) bool {
	if a.FenceRecord == nil || reason == "" {
		return false
	}
	return fence || (reason == FenceReasonOutOfService && a.FencesOnOutOfService)
}

// aheadOutcome is what detachAhead did.
type aheadOutcome int

const (
	// aheadNone: nothing; external-attacher's sync is to detach.
	aheadNone aheadOutcome = iota
	// aheadFenceQueued: the fence was handed to the fence pool, whose end
	// requeues the VolumeAttachment.
	aheadFenceQueued
	// aheadDetached: the fence was recorded and the finalizer is gone.
	aheadDetached
)

// detachAhead takes, before external-attacher's sync, the two steps of a
// fenced detach that need nothing of that sync: handing the fence to the
// pool, and, once the fence is recorded, removing the finalizer. Through the
// sync, each costs one more VolumeAttachment write than the step itself: a
// Detach that hands its fence over returns ErrFencePending, which the sync
// saves as the detachError, and a Detach that finds the fence recorded
// returns nil, after which the sync removes the finalizer and then patches
// the status of a VolumeAttachment the removal deleted. Taken here, a fenced
// detach writes its VolumeAttachment once, like the finalizer removal of a
// plain one; the fence itself is in the FencingRequest, which says what is
// under way. A fence that fails still goes through the sync, which saves
// its error and backs off.
//
// It acts only on what Detach would decide the same way from the same live
// reads (decide, recordedFence), and only where nothing else is to be done
// first: the VolumeAttachment of a CSI PersistentVolume of this driver
// without publish secrets (the sync reads them), published under the node
// ID its node's CSINode names, with no previous node ID to unpublish and no
// other finalizer. Anything else, an error included, is left to the sync
// (aheadNone). A cached Node and FencingRequest that say the detach is
// graceful leave it to the sync too, at no live read.
func (a *Attacher) detachAhead(ctx context.Context, va *storagev1.VolumeAttachment) aheadOutcome {
	if a.Nodes == nil || a.fences == nil || va.DeletionTimestamp == nil ||
		len(va.Finalizers) != 1 || va.Finalizers[0] != a.finalizer {
		return aheadNone
	}
	volumeID, nodeID, ok := a.plainDetach(va)
	if !ok {
		return aheadNone
	}
	logger := klog.FromContext(ctx)
	nodeName := va.Spec.NodeName
	node, err := a.cachedNode(nodeName)
	if err != nil {
		return aheadNone
	}
	cachedFR, err := a.cachedFencingRequest(nodeName)
	if err != nil {
		return aheadNone
	}
	if _, reason := DecideFence(a.CanFence, node, cachedFR, a.DriverName, volumeID, false); reason == "" {
		return aheadNone
	}
	mode, reason, fr, err := a.decide(ctx, va, nodeName, volumeID)
	if err != nil || !a.recordedFence(mode.Fences(), reason) {
		return aheadNone
	}
	if !fencerecord.IsFenced(fr, a.DriverName, volumeID) {
		if !a.fences.submitNew(a.fenceJob(logger, va, volumeID, "", nodeID, nodeName, reason, nil, fr)) {
			return aheadNone
		}
		logger.V(4).Info("Fence handed to the fence pool before the detach's sync", "volume", volumeID, "reason", reason)
		return aheadFenceQueued
	}
	if err := a.removeFinalizer(ctx, va); err != nil {
		logger.V(4).Info("Cannot remove the finalizer of a fenced detach: the sync will", "err", err)
		return aheadNone
	}
	a.fences.forget(fenceKey{volumeID: volumeID, nodeID: nodeID})
	logger.V(2).Info("Volume already fenced from the node: detached without a call to the driver",
		"volume", volumeID, "node", nodeName, "reason", reason)
	return aheadDetached
}

// plainDetach returns the volume handle and node ID external-attacher's
// sync would pass Detach for va, and whether detachAhead may act on it (see
// there): a CSI PV of this driver without publish secrets, published under
// the ID the node's CSINode names (or under the only one there is), with no
// previous node ID recorded.
func (a *Attacher) plainDetach(va *storagev1.VolumeAttachment) (volumeID, nodeID string, ok bool) {
	if va.Spec.Source.InlineVolumeSpec != nil || pvName(va) == "" {
		return "", "", false
	}
	pv, err := a.PVs.Get(pvName(va))
	if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != a.DriverName || pv.Spec.CSI.ControllerPublishSecretRef != nil {
		return "", "", false
	}
	published := va.Annotations[contract.NodeIDAnnotation]
	registered, known := a.NodeIDs.NodeID(va.Spec.NodeName)
	switch {
	case published == "" && !known:
		return "", "", false
	case published == "":
		nodeID = registered
	case known && registered != published:
		return "", "", false // Detach says so, with an Event
	default:
		nodeID = published
	}
	if previous := va.Annotations[contract.PreviousNodeIDAnnotation]; previous != "" && previous != nodeID {
		return "", "", false
	}
	return pv.Spec.CSI.VolumeHandle, nodeID, true
}

// removeFinalizer removes external-attacher's finalizer, va's only one, as
// its sync does once a detach is over: the VolumeAttachment, deleted, goes.
// The patch tests that the finalizers are still what va says.
func (a *Attacher) removeFinalizer(ctx context.Context, va *storagev1.VolumeAttachment) error {
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": va.Finalizers},
		{"op": "remove", "path": "/metadata/finalizers"},
	})
	if err != nil {
		return err
	}
	_, err = a.VolumeAttachments.Patch(ctx, va.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// unpublish unpublishes the volume plainly from previous (unless "") and
// then from nodeID.
func (a *Attacher) unpublish(ctx context.Context, volumeID, previous, nodeID string, secrets map[string]string) error {
	return csiclient.EachNodeID(previous, nodeID, func(nodeID string) error {
		return a.CSI.Detach(ctx, volumeID, nodeID, secrets)
	})
}

// submitFence hands the fence over: one of external-attacher's workers must
// not wait for it (#761). The pool requeues the VolumeAttachment when it is
// over; the next Detach then finds it recorded fenced.
func (a *Attacher) submitFence(logger klog.Logger, va *storagev1.VolumeAttachment, volumeID, previous, nodeID, nodeName, reason string, secrets map[string]string, fr *fencingv1alpha1.FencingRequest) error {
	return a.fences.submit(a.fenceJob(logger, va, volumeID, previous, nodeID, nodeName, reason, secrets, fr))
}

// fenceJob is the fence pool's job for the fence of volumeID from nodeID
// (and from previous, if not ""), with the fence the record confirms now.
func (a *Attacher) fenceJob(logger klog.Logger, va *storagev1.VolumeAttachment, volumeID, previous, nodeID, nodeName, reason string, secrets map[string]string, fr *fencingv1alpha1.FencingRequest) *fenceJob {
	j := &fenceJob{
		key: fenceKey{volumeID: volumeID, nodeID: nodeID}, previousNodeID: previous, va: va, nodeName: nodeName, reason: reason, secrets: secrets,
		logger: klog.LoggerWithValues(logger, "volume", volumeID, "node", nodeName),
	}
	if e := fencerecord.Find(fr, a.DriverName, volumeID); e != nil && e.FencedTime != nil {
		t := e.FencedTime.Time
		j.fencedTime = &t
	}
	return j
}

// RunFences sends the fences Detach hands over until ctx is done, and
// returns when the fences under way have returned. It must run while the
// controller runs: without it, fenced detaches stay pending.
func (a *Attacher) RunFences(ctx context.Context) {
	if a.fences != nil {
		a.fences.run(ctx)
	}
}

// Fencing reports whether the fence of the VolumeAttachment is queued or
// running: its detach can only wait for it.
func (a *Attacher) Fencing(vaName string) bool {
	return a.fences != nil && a.fences.fencing(vaName)
}

// OnFenceDone sets what is told the name of the VolumeAttachment whose
// fence is over, failed or done (Handler.Requeue), so that its detach is
// retried at once rather than after external-attacher's backoff.
func (a *Attacher) OnFenceDone(fn func(vaName string)) {
	if a.fences != nil {
		a.fences.setRequeue(fn)
	}
}

// decide is DecideFence on a live read of the Node and the cached
// FencingRequest and, when they say the detach is not graceful, on a live
// read of the FencingRequest too: its cache decides only whether to look
// (S4: a Ready node is fenced only on an explicit request read live). The
// Node is read live at every detach, a plain one too: a plain unpublish
// depends on the kubelet no longer using the volume (volumesInUse), which a
// cache behind the kubelet would get wrong. When the kubelet reports the
// volume in use, the node's pods are listed live (wantedOnNode).
//
// It returns how the detach is fenced (fencemode.None: not fenced; always
// None for a graceful one) and why it is not graceful. A driver without
// UNPUBLISH_FENCE has its CSIDriver read live, once the detach is found
// not graceful, for the declaration that its unpublish revokes access: a
// plain unpublish recorded as a fence lets the volume move (the next
// Detach lets the attachment go), which a cached declaration its owner
// withdrew must not. A read that fails and may pass is an error: nothing
// is sent, and external-attacher retries with its backoff.
func (a *Attacher) decide(ctx context.Context, va *storagev1.VolumeAttachment, nodeName, volumeID string) (fencemode.Mode, string, *fencingv1alpha1.FencingRequest, error) {
	node, err := a.liveNode(ctx, nodeName)
	if err != nil {
		return fencemode.None, "", nil, err
	}
	fr, err := a.cachedFencingRequest(nodeName)
	if err != nil {
		return fencemode.None, "", nil, err
	}
	if _, reason := DecideFence(true, node, fr, a.DriverName, volumeID, false); reason == "" {
		return fencemode.None, "", fr, nil
	}
	if fr, err = a.liveFencingRequest(ctx, nodeName); err != nil {
		return fencemode.None, "", nil, err
	}
	_, reason := DecideFence(true, node, fr, a.DriverName, volumeID, false)
	if reason == FenceReasonVolumeInUse && a.wantedOnNode(ctx, va, nodeName) {
		_, reason = DecideFence(true, node, fr, a.DriverName, volumeID, true)
	}
	if reason == "" {
		return fencemode.None, "", fr, nil
	}
	mode, err := a.Declaration.Mode(ctx, a.CanFence)
	if err != nil {
		return fencemode.None, "", nil, err
	}
	return mode, reason, fr, nil
}

// wantedOnNode reports whether a pod on the node that is not terminating
// uses the PersistentVolume va attaches, on a live list of the node's pods
// in the claim's namespace (DecideFence). It answers false whenever it
// cannot tell: an inline volume, a PV without a claim, a list that fails
// (e.g. a role without pods list, as before this rule): the volume is then
// fenced as before.
func (a *Attacher) wantedOnNode(ctx context.Context, va *storagev1.VolumeAttachment, nodeName string) bool {
	if va == nil || pvName(va) == "" {
		return false
	}
	logger := klog.FromContext(ctx)
	pv, err := a.PVs.Get(pvName(va))
	if err != nil || pv.Spec.ClaimRef == nil {
		return false
	}
	claim := pv.Spec.ClaimRef
	pods, err := a.Client.CoreV1().Pods(claim.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String()})
	if err != nil {
		logger.V(2).Info("Cannot list the node's pods: a volume it reports in use is fenced", "node", nodeName, "err", err)
		return false
	}
	if p := podgc.WantsClaim(pods.Items, nodeName, claim.Namespace, claim.Name); p != nil {
		logger.V(2).Info("The volume the node reports in use is wanted by a pod on the node", "node", nodeName, "pod", klog.KObj(p))
		return true
	}
	return false
}

// fenceIfStillNeeded decides again, on live reads, right before the fence:
// the job may have waited in the fence pool's queue while the node became
// Ready again or the fence was recorded by someone else (S4: a Ready node
// is fenced only on an explicit request read live, in the function that
// acts). It sends what the decision says: the fenced unpublish, or the
// plain one of a driver that fences by itself on the out-of-service taint.
// When no fence is needed any more it sends nothing and returns nil: the
// requeued Detach then decides on its own, and detaches plainly or without
// a call.
func (a *Attacher) fenceIfStillNeeded(ctx context.Context, j *fenceJob) error {
	mode, reason, fr, err := a.decide(ctx, j.va, j.nodeName, j.key.volumeID)
	switch {
	case err != nil:
		return err
	case fencerecord.IsFenced(fr, a.DriverName, j.key.volumeID):
	case mode.SendsFenceField():
		return a.fence(ctx, j, reason, "", func(ctx context.Context) error {
			return j.eachNodeID(func(nodeID string) error {
				return a.FenceCSI.Detach(ctx, j.key.volumeID, nodeID, j.secrets, true)
			})
		})
	case mode.Fences():
		// The driver's owner declared that its unpublish revokes access:
		// the stock request, byte for byte external-attacher's, is the
		// fence (the field must never reach a driver that does not
		// advertise it).
		return a.fence(ctx, j, reason, fmt.Sprintf(" by an unpublish, which its CSIDriver declares revokes access (%s)", contract.UnpublishRevokesAccessAnnotation),
			func(ctx context.Context) error {
				return j.eachNodeID(func(nodeID string) error {
					return a.CSI.Detach(ctx, j.key.volumeID, nodeID, j.secrets)
				})
			})
	case reason == FenceReasonOutOfService && a.FencesOnOutOfService:
		return a.fence(ctx, j, reason, "", func(ctx context.Context) error {
			return j.eachNodeID(func(nodeID string) error {
				return a.CSI.Detach(ctx, j.key.volumeID, nodeID, j.secrets)
			})
		})
	}
	klog.FromContext(ctx).V(2).Info("The fence is no longer needed: not sent", "reason", reason)
	return nil
}

// fence sends the unpublish that fences (send), write-ahead: the recorder
// records the intent before the call and the outcome after it, and only a
// recorded success returns nil. It runs in a fence worker. The record names
// the node ID on the VolumeAttachment, not a previous one send fences too:
// the node agent cleans only a volume fenced from the ID its node plugin
// registers, and that one is what external-attacher wrote last. An
// unpublish that fails or outlasts --timeout (the pool's deadline) is no
// fence: its error is recorded, counted and said, and the detach retried.
// how, when not "", says how the volume was fenced, in the Event.
func (a *Attacher) fence(ctx context.Context, j *fenceJob, reason, how string, send func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	va, volumeID, nodeID, nodeName := j.va, j.key.volumeID, j.key.nodeID, j.nodeName
	vol := fencingv1alpha1.FencedVolume{Driver: a.DriverName, VolumeHandle: volumeID, NodeID: nodeID}
	if va != nil {
		vol.PersistentVolumeName = pvName(va)
	}
	errs, err := a.recorder.Fence(ctx, nodeName, reason, []fencingv1alpha1.FencedVolume{vol},
		func(ctx context.Context, _ fencingv1alpha1.FencedVolume) error {
			return send(ctx)
		})
	if err != nil {
		return fmt.Errorf("volume %s is not fenced from node %s: %w", volumeID, nodeName, err)
	}
	if fenceErr := errs[0]; fenceErr != nil {
		fencedUnpublishErrors.WithLabelValues(a.DriverName, reason).Inc()
		if refused(fenceErr) {
			err = fmt.Errorf("the driver refused to fence volume %s from node %s (%s), the volume stays attached there: %w", volumeID, nodeName, reason, fenceErr)
		} else {
			err = fmt.Errorf("fencing volume %s from node %s (%s) failed, will retry: %w", volumeID, nodeName, reason, fenceErr)
		}
		a.event(va, v1.EventTypeWarning, EventReasonFenceFailed, "%s", err.Error())
		return err
	}
	fencedUnpublishes.WithLabelValues(a.DriverName, reason).Inc()
	forcedDetaches.WithLabelValues(a.DriverName, reason).Inc()
	logger.V(2).Info("Fenced unpublish: the node can no longer access the volume",
		"volume", volumeID, "node", nodeName, "nodeID", nodeID, "previousNodeID", j.previousNodeID, "reason", reason)
	a.event(va, v1.EventTypeNormal, EventReasonFencedUnpublish,
		"Volume %s was fenced from node %s (%s)%s: the node can no longer access it until it is cleaned up", volumeID, nodeName, reason, how)
	return nil
}

// publishedNodeID returns the node ID the volume of va was published to:
// the one external-attacher wrote on the VolumeAttachment
// (contract.NodeIDAnnotation) right before it last published it.
// external-attacher's Detach passes the ID of the node's CSINode instead,
// falling back to the annotation only when the CSINode is gone. The two
// differ when the node plugin registered again under another ID (an ID
// derived from an initiator or NQN, a VM re-created under the same name):
// an unpublish of the new ID leaves the publication in place, and a fence
// of it, which the driver may well confirm, fences nothing. nodeID, what
// external-attacher passed, is the answer when va is unknown or carries no
// ID (nothing was published under another one).
func (a *Attacher) publishedNodeID(logger klog.Logger, va *storagev1.VolumeAttachment, volumeID, nodeID string) string {
	if va == nil {
		return nodeID
	}
	published := va.Annotations[contract.NodeIDAnnotation]
	if published == "" || published == nodeID {
		return nodeID
	}
	logger.Info("The node's CSINode names another node ID than the one the volume was published to: unpublishing the published one",
		"volume", volumeID, "node", va.Spec.NodeName, "publishedNodeID", published, "csiNodeID", nodeID)
	a.event(va, v1.EventTypeWarning, EventReasonNodeIDChanged,
		"Volume %s was published to node %s as node ID %q, which its CSINode now names %q: the volume is unpublished from %q",
		volumeID, va.Spec.NodeName, published, nodeID, published)
	return published
}

// previousNodeID returns the node ID va still records as the previous one
// (contract.PreviousNodeIDAnnotation, see RecordPreviousNodeID), unless it
// is published, which the detach goes to anyway: the volume may still be
// published under it (its unpublish failed, or the process crashed before
// it), out of reach of an unpublish or a fence of any other ID (S1). ""
// when there is none.
func (a *Attacher) previousNodeID(logger klog.Logger, va *storagev1.VolumeAttachment, volumeID, published string) string {
	if va == nil {
		return ""
	}
	previous := va.Annotations[contract.PreviousNodeIDAnnotation]
	if previous == "" || previous == published {
		return ""
	}
	logger.Info("The volume may still be published under the previous node ID the VolumeAttachment records: unpublishing it from there too",
		"volume", volumeID, "node", va.Spec.NodeName, "previousNodeID", previous, "nodeID", published)
	a.event(va, v1.EventTypeWarning, EventReasonNodeIDChanged,
		"Volume %s may still be published to node %s as its previous node ID %q too: the volume is unpublished from %q and %q",
		volumeID, va.Spec.NodeName, previous, previous, published)
	return previous
}

// nodeName returns the Node of the driver's node ID: the VolumeAttachment's
// node when it is known (the node ID may be one its CSINode no longer
// names, or one another CSINode names now), else the one CSINode that
// registers the ID.
func (a *Attacher) nodeName(nodeID string, va *storagev1.VolumeAttachment) (string, error) {
	if va != nil {
		return va.Spec.NodeName, nil
	}
	if name, ok := a.NodeIDs.NodeName(nodeID); ok {
		return name, nil
	}
	return "", fmt.Errorf("no CSINode of driver %s has node ID %q", a.DriverName, nodeID)
}

// cachedNode returns the Node from the cache, nil when it does not exist.
func (a *Attacher) cachedNode(name string) (*v1.Node, error) {
	n, err := a.Nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Node %q: %w", name, err)
	}
	return n, nil
}

// liveNode reads the Node live (a read shared with the workers asking at
// the same time, begun after this call), nil when it does not exist.
func (a *Attacher) liveNode(ctx context.Context, name string) (*v1.Node, error) {
	n, err := a.nodeReads.Do(ctx, name, func(ctx context.Context) (*v1.Node, error) {
		return a.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Node %q: %w", name, err)
	}
	return n, nil
}

// cachedFencingRequest returns the node's FencingRequest from the cache, nil
// when it has none or the API is not available.
func (a *Attacher) cachedFencingRequest(nodeName string) (*fencingv1alpha1.FencingRequest, error) {
	if a.FencingRequests == nil {
		return nil, nil
	}
	fr, err := a.FencingRequests.Get(nodeName)
	if err != nil {
		return nil, fmt.Errorf("reading the FencingRequest of node %q: %w", nodeName, err)
	}
	return fr, nil
}

// liveFencingRequest reads the node's FencingRequest live (shared as
// liveNode's read is), nil when it has none or the API is not available.
func (a *Attacher) liveFencingRequest(ctx context.Context, nodeName string) (*fencingv1alpha1.FencingRequest, error) {
	if a.FenceRecord == nil {
		return nil, nil
	}
	fr, err := a.recordReads.Do(ctx, nodeName, func(ctx context.Context) (*fencingv1alpha1.FencingRequest, error) {
		return a.FenceRecord.Get(ctx, nodeName)
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the FencingRequest of node %q: %w", nodeName, err)
	}
	return fr, nil
}

// event records an Event on va; without one (an Attacher not called through
// Handler) the log line of the caller is all there is.
func (a *Attacher) event(va *storagev1.VolumeAttachment, eventType, reason, format string, args ...any) {
	if va != nil {
		a.Recorder.Eventf(va, eventType, reason, format, args...)
	}
}

func pvName(va *storagev1.VolumeAttachment) string {
	if va.Spec.Source.PersistentVolumeName == nil {
		return ""
	}
	return *va.Spec.Source.PersistentVolumeName
}
