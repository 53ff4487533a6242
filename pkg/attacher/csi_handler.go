package attacher

import (
	"context"

	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// FencingRequestLister reads FencingRequests, usually from an informer.
// It returns (nil, nil) when the node has none.
type FencingRequestLister interface {
	Get(nodeName string) (*fencingv1alpha1.FencingRequest, error)
}

// CSIHandlerOptions configures the CSI handler.
type CSIHandlerOptions struct {
	DriverName string
	// Timeout bounds every CSI call.
	Timeout time.Duration
	// DefaultFSType is used when a PV has no fsType.
	DefaultFSType string
	// SupportsPublishReadOnly: the driver has PUBLISH_READONLY.
	SupportsPublishReadOnly bool
	// SupportsSingleNodeMultiWriter: the driver has SINGLE_NODE_MULTI_WRITER.
	SupportsSingleNodeMultiWriter bool
	// CanFence: the driver has UNPUBLISH_FENCE.
	CanFence bool
}

// CSIHandler is the Handler for drivers with PUBLISH_UNPUBLISH_VOLUME.
type CSIHandler struct {
	opts      CSIHandlerOptions
	finalizer string

	client        kubernetes.Interface
	attacher      csiclient.Attacher
	lister        csiclient.Lister // nil: no ListVolumes reconciliation
	pvLister      corelisters.PersistentVolumeLister
	nodeLister    corelisters.NodeLister
	csiNodeLister storagelisters.CSINodeLister
	vaLister      storagelisters.VolumeAttachmentLister
	frLister      FencingRequestLister // nil: the FencingRequest CRD is not installed
	frClient      fencerecord.Client   // nil: the FencingRequest CRD is not installed
	recorder      record.EventRecorder

	vaQueue, pvQueue Queue

	forceSyncMu sync.Mutex
	forceSync   map[string]bool
}

// NewCSIHandler returns the CSI handler. lister may be nil (no reconcile),
// frLister and frClient may be nil (no FencingRequest CRD).
func NewCSIHandler(
	opts CSIHandlerOptions,
	client kubernetes.Interface,
	attacher csiclient.Attacher,
	lister csiclient.Lister,
	pvLister corelisters.PersistentVolumeLister,
	nodeLister corelisters.NodeLister,
	csiNodeLister storagelisters.CSINodeLister,
	vaLister storagelisters.VolumeAttachmentLister,
	frLister FencingRequestLister,
	frClient fencerecord.Client,
	recorder record.EventRecorder,
) *CSIHandler {
	return &CSIHandler{
		opts:          opts,
		finalizer:     contract.AttacherFinalizer(opts.DriverName),
		client:        client,
		attacher:      attacher,
		lister:        lister,
		pvLister:      pvLister,
		nodeLister:    nodeLister,
		csiNodeLister: csiNodeLister,
		vaLister:      vaLister,
		frLister:      frLister,
		frClient:      frClient,
		recorder:      recorder,
		forceSync:     map[string]bool{},
	}
}

// Init implements Handler.
func (h *CSIHandler) Init(vaQueue, pvQueue Queue) { h.vaQueue, h.pvQueue = vaQueue, pvQueue }

// SyncNewOrUpdatedVolumeAttachment implements Handler.
func (h *CSIHandler) SyncNewOrUpdatedVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "VolumeAttachment", va.Name)
	ctx = klog.NewContext(ctx, logger)
	var err error
	if va.DeletionTimestamp != nil {
		err = h.syncDetach(ctx, va)
	} else {
		err = h.syncAttach(ctx, va)
	}
	if err != nil {
		logger.Error(err, "Failed to sync VolumeAttachment, will retry")
		h.vaQueue.AddRateLimited(va.Name)
		return
	}
	h.vaQueue.Forget(va.Name)
}

func (h *CSIHandler) takeForceSync(name string) bool {
	h.forceSyncMu.Lock()
	defer h.forceSyncMu.Unlock()
	f := h.forceSync[name]
	delete(h.forceSync, name)
	return f
}

func (h *CSIHandler) setForceSync(name string) {
	h.forceSyncMu.Lock()
	defer h.forceSyncMu.Unlock()
	h.forceSync[name] = true
}

// syncAttach publishes the volume unless the VA says it is attached already
// (or the reconciler found the driver disagrees).
func (h *CSIHandler) syncAttach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	logger := klog.FromContext(ctx)
	if va.Status.Attached && !h.takeForceSync(va.Name) {
		logger.V(4).Info("VolumeAttachment is already attached")
		return nil
	}
	metadata, err := h.csiAttach(ctx, va)
	if err != nil {
		if serr := saveAttachError(ctx, h.client, va, err); serr != nil {
			logger.Error(serr, "Failed to save attach error")
		}
		return err
	}
	if _, err := markAsAttached(ctx, h.client, va, metadata); err != nil {
		return fmt.Errorf("marking as attached: %w", err)
	}
	logger.V(2).Info("Attached volume", "node", va.Spec.NodeName)
	return nil
}

func (h *CSIHandler) csiAttach(ctx context.Context, va *storagev1.VolumeAttachment) (map[string]string, error) {
	pv, err := h.pvOf(va)
	if err != nil {
		return nil, err
	}
	if pv.DeletionTimestamp != nil {
		return nil, fmt.Errorf("PersistentVolume %s is being deleted", pv.Name)
	}
	if err := addFinalizer(ctx, h.client.CoreV1().PersistentVolumes(), pv.Name, pv.Finalizers, h.finalizer); err != nil {
		return nil, fmt.Errorf("adding finalizer to PersistentVolume %s: %w", pv.Name, err)
	}
	nodeID, err := h.nodeID(va.Spec.NodeName, nil)
	if err != nil {
		return nil, err
	}
	if err := h.checkPublishIsSafe(va, pv); err != nil {
		return nil, err
	}
	capability, err := volumeCapability(pv, h.opts.DefaultFSType, h.opts.SupportsSingleNodeMultiWriter)
	if err != nil {
		return nil, err
	}
	secrets, err := h.secrets(ctx, pv.Spec.CSI.ControllerPublishSecretRef)
	if err != nil {
		return nil, err
	}
	if err := h.addVAFinalizerAndNodeID(ctx, va, nodeID); err != nil {
		return nil, err
	}
	readOnly := h.opts.SupportsPublishReadOnly && (pv.Spec.CSI.ReadOnly || onlyReadOnlyMany(pv))
	cctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
	defer cancel()
	return h.attacher.Attach(cctx, csiclient.AttachRequest{
		VolumeID:      pv.Spec.CSI.VolumeHandle,
		NodeID:        nodeID,
		ReadOnly:      readOnly,
		Capability:    capability,
		VolumeContext: pv.Spec.CSI.VolumeAttributes,
		Secrets:       secrets,
	})
}

func onlyReadOnlyMany(pv *v1.PersistentVolume) bool {
	return len(pv.Spec.AccessModes) == 1 && pv.Spec.AccessModes[0] == v1.ReadOnlyMany
}

// checkPublishIsSafe refuses a publish that would break a safety invariant:
// S2, a volume quarantined on the node (fenced, not cleaned up) or a node
// under quarantine; S1, a single-node volume still published to another
// node, i.e. whose VA there still carries our finalizer.
func (h *CSIHandler) checkPublishIsSafe(va *storagev1.VolumeAttachment, pv *v1.PersistentVolume) error {
	node := va.Spec.NodeName
	if n, err := h.nodeLister.Get(node); err == nil && hasTaint(n, contract.QuarantineTaintKey) {
		return fmt.Errorf("node %s is quarantined (%s): volumes fenced there must be cleaned up before anything is published to it", node, contract.QuarantineTaintKey)
	}
	if h.frLister != nil {
		fr, err := h.frLister.Get(node)
		if err != nil {
			return fmt.Errorf("reading FencingRequest of node %s: %w", node, err)
		}
		if fencerecord.IsQuarantined(fr, h.opts.DriverName, pv.Spec.CSI.VolumeHandle) {
			return fmt.Errorf("volume %s is quarantined on node %s (fenced, not yet cleaned up): refusing to publish it there", pv.Spec.CSI.VolumeHandle, node)
		}
	}
	if !isSingleNode(pv) {
		return nil
	}
	vas, err := h.vaLister.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, other := range vas {
		if other.Name == va.Name || other.Spec.Attacher != h.opts.DriverName || other.Spec.NodeName == node {
			continue
		}
		if other.Spec.Source.PersistentVolumeName == nil || *other.Spec.Source.PersistentVolumeName != pv.Name {
			continue
		}
		if hasString(other.Finalizers, h.finalizer) {
			return fmt.Errorf("volume %s is single-node and still published to node %s (VolumeAttachment %s): it must be unpublished or fenced there first", pv.Spec.CSI.VolumeHandle, other.Spec.NodeName, other.Name)
		}
	}
	return nil
}

func (h *CSIHandler) addVAFinalizerAndNodeID(ctx context.Context, va *storagev1.VolumeAttachment, nodeID string) error {
	if hasString(va.Finalizers, h.finalizer) && va.Annotations[contract.NodeIDAnnotation] == nodeID {
		return nil
	}
	if err := addFinalizer(ctx, h.client.StorageV1().VolumeAttachments(), va.Name, va.Finalizers, h.finalizer); err != nil {
		return fmt.Errorf("adding finalizer: %w", err)
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, contract.NodeIDAnnotation, nodeID))
	if _, err := h.client.StorageV1().VolumeAttachments().Patch(ctx, va.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("saving node ID annotation: %w", err)
	}
	return nil
}

// syncDetach unpublishes a VA that is being deleted, with a fence when the
// detach is not a graceful one, then lets the deletion finish.
func (h *CSIHandler) syncDetach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	logger := klog.FromContext(ctx)
	forced := h.takeForceSync(va.Name)
	if !hasString(va.Finalizers, h.finalizer) && !forced {
		logger.V(4).Info("VolumeAttachment already detached")
		return nil
	}
	if err := h.csiDetach(ctx, va); err != nil {
		if serr := saveDetachError(ctx, h.client, va, err); serr != nil {
			logger.Error(serr, "Failed to save detach error")
		}
		return err
	}
	if err := markAsDetached(ctx, h.client, va, h.finalizer); err != nil {
		return fmt.Errorf("marking as detached: %w", err)
	}
	logger.V(2).Info("Detached volume", "node", va.Spec.NodeName)
	return nil
}

func (h *CSIHandler) csiDetach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	logger := klog.FromContext(ctx)
	pv, err := h.pvOf(va)
	if err != nil {
		return err
	}
	node, err := h.nodeLister.Get(va.Spec.NodeName)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err != nil {
		node = nil
	}
	nodeID, err := h.nodeID(va.Spec.NodeName, va)
	if err != nil {
		return err
	}
	hasFR := false
	if h.frLister != nil {
		fr, err := h.frLister.Get(va.Spec.NodeName)
		if err != nil {
			return fmt.Errorf("reading FencingRequest of node %s: %w", va.Spec.NodeName, err)
		}
		hasFR = fr != nil && fr.Status.Phase != fencingv1alpha1.PhaseComplete
	}
	fence, reason := DecideFence(h.opts.CanFence, node, hasFR)
	secrets, err := h.secrets(ctx, pv.Spec.CSI.ControllerPublishSecretRef)
	if err != nil {
		return err
	}
	handle := pv.Spec.CSI.VolumeHandle
	cctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
	defer cancel()
	err = h.attacher.Detach(cctx, handle, nodeID, secrets, fence)
	if !fence {
		return err
	}

	record := fencingv1alpha1.FencedVolume{Driver: h.opts.DriverName, VolumeHandle: handle, PersistentVolumeName: pv.Name, NodeID: nodeID}
	if err != nil {
		fencedUnpublishErrors.WithLabelValues(h.opts.DriverName, reason).Inc()
		h.recorder.Eventf(va, v1.EventTypeWarning, eventReasonFenceFailed,
			"Fencing volume %s from node %s (%s) failed; the volume stays attached there until the driver confirms the fence: %v", handle, va.Spec.NodeName, reason, err)
		if h.frClient != nil {
			if rerr := fencerecord.RecordFenceError(ctx, h.frClient, va.Spec.NodeName, reason, record, err.Error()); rerr != nil {
				logger.Error(rerr, "Failed to record the fence error", "node", va.Spec.NodeName)
			}
		}
		return fmt.Errorf("fence of volume %s from node %s (%s) refused or failed: %w", handle, va.Spec.NodeName, reason, err)
	}
	// The record is written before the finalizer goes, so a crash in between
	// leaves a VA whose retry fences again (idempotent) and records again.
	if h.frClient != nil {
		if err := fencerecord.RecordFenced(ctx, h.frClient, va.Spec.NodeName, reason, record); err != nil {
			return fmt.Errorf("volume %s was fenced from node %s but the record could not be saved: %w", handle, va.Spec.NodeName, err)
		}
	}
	fencedUnpublishes.WithLabelValues(h.opts.DriverName, reason).Inc()
	forcedDetaches.WithLabelValues(h.opts.DriverName, reason).Inc()
	logger.V(2).Info("Fenced volume from node", "volume", handle, "node", va.Spec.NodeName, "reason", reason)
	h.recorder.Eventf(va, v1.EventTypeNormal, eventReasonFencedUnpublish,
		"Volume %s fenced from node %s (%s): the node can no longer access it", handle, va.Spec.NodeName, reason)
	return nil
}

// pvOf returns the CSI PV of this driver that va attaches.
func (h *CSIHandler) pvOf(va *storagev1.VolumeAttachment) (*v1.PersistentVolume, error) {
	if va.Spec.Source.PersistentVolumeName == nil {
		return nil, fmt.Errorf("VolumeAttachment %s has no PersistentVolume source; inline volumes are not supported", va.Name)
	}
	name := *va.Spec.Source.PersistentVolumeName
	pv, err := h.pvLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("PersistentVolume %s of VolumeAttachment %s not found", name, va.Name)
	}
	if err != nil {
		return nil, err
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != h.opts.DriverName {
		return nil, fmt.Errorf("PersistentVolume %s is not a CSI volume of driver %s", name, h.opts.DriverName)
	}
	return pv, nil
}

// nodeID returns the driver's ID of the node from its CSINode. When the
// CSINode or its entry is gone (a deleted or dead node) it falls back to the
// annotation saved on va at attach time, so such a node can still be detached.
func (h *CSIHandler) nodeID(nodeName string, va *storagev1.VolumeAttachment) (string, error) {
	csiNode, err := h.csiNodeLister.Get(nodeName)
	if err == nil {
		for _, d := range csiNode.Spec.Drivers {
			if d.Name == h.opts.DriverName && d.NodeID != "" {
				return d.NodeID, nil
			}
		}
		err = fmt.Errorf("CSINode %s has no entry for driver %s", nodeName, h.opts.DriverName)
	} else if apierrors.IsNotFound(err) {
		err = fmt.Errorf("CSINode %s not found", nodeName)
	}
	if va != nil {
		if id := va.Annotations[contract.NodeIDAnnotation]; id != "" {
			return id, nil
		}
	}
	return "", err
}

// secrets reads the referenced Secret directly from the API, not from a cache,
// so that no Secret is ever watched.
func (h *CSIHandler) secrets(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	s, err := h.client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("loading secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// SyncNewOrUpdatedPersistentVolume implements Handler: the PV finalizer is
// released once the PV is being deleted and no VA references it.
func (h *CSIHandler) SyncNewOrUpdatedPersistentVolume(ctx context.Context, pv *v1.PersistentVolume) {
	logger := klog.FromContext(ctx)
	if pv.DeletionTimestamp == nil || !hasString(pv.Finalizers, h.finalizer) {
		h.pvQueue.Forget(pv.Name)
		return
	}
	vas, err := h.vaLister.List(labels.Everything())
	if err != nil {
		h.pvQueue.AddRateLimited(pv.Name)
		return
	}
	for _, va := range vas {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv.Name {
			logger.V(4).Info("PersistentVolume still in use", "PersistentVolume", pv.Name, "VolumeAttachment", va.Name)
			h.pvQueue.Forget(pv.Name)
			return
		}
	}
	if err := removeFinalizer(ctx, h.client.CoreV1().PersistentVolumes(), pv.Name, pv.Finalizers, h.finalizer); err != nil {
		logger.Error(err, "Failed to remove PersistentVolume finalizer", "PersistentVolume", pv.Name)
		h.pvQueue.AddRateLimited(pv.Name)
		return
	}
	logger.V(2).Info("Removed PersistentVolume finalizer", "PersistentVolume", pv.Name)
	h.pvQueue.Forget(pv.Name)
}

// ReconcileVA implements Handler: a VA whose attached state disagrees with
// the driver's published nodes is synced again, forced. It never re-attaches
// a volume to a node where it is quarantined: that would undo a fence.
func (h *CSIHandler) ReconcileVA(ctx context.Context) error {
	if h.lister == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	cctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
	defer cancel()
	published, err := h.lister.ListVolumes(cctx)
	if err != nil {
		return fmt.Errorf("ListVolumes: %w", err)
	}
	vas, err := h.vaLister.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, va := range vas {
		if va.Spec.Attacher != h.opts.DriverName || va.DeletionTimestamp != nil {
			continue
		}
		pv, err := h.pvOf(va)
		if err != nil {
			continue
		}
		nodeID, err := h.nodeID(va.Spec.NodeName, va)
		if err != nil {
			continue
		}
		handle := pv.Spec.CSI.VolumeHandle
		attached := hasString(published[handle], nodeID)
		if attached == va.Status.Attached {
			continue
		}
		if va.Status.Attached && !attached && h.quarantined(va.Spec.NodeName, handle) {
			logger.V(4).Info("Volume is fenced on the node, not re-attaching", "VolumeAttachment", va.Name, "volume", handle)
			continue
		}
		logger.V(2).Info("Attachment differs from the driver's, syncing", "VolumeAttachment", va.Name, "attachedInDriver", attached)
		h.setForceSync(va.Name)
		h.vaQueue.Add(va.Name)
	}
	return nil
}

func (h *CSIHandler) quarantined(node, handle string) bool {
	if n, err := h.nodeLister.Get(node); err == nil && hasTaint(n, contract.QuarantineTaintKey) {
		return true
	}
	if h.frLister == nil {
		return false
	}
	fr, err := h.frLister.Get(node)
	return err != nil || fencerecord.IsQuarantined(fr, h.opts.DriverName, handle)
}
