package attacher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
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

// Capabilities are the controller capabilities of the driver the CSI
// handler uses, probed once at start.
type Capabilities struct {
	// PublishReadOnly: PUBLISH_READONLY; without it readonly is always false.
	PublishReadOnly bool
	// SingleNodeMultiWriter: SINGLE_NODE_MULTI_WRITER; selects the
	// SINGLE_NODE_SINGLE_WRITER / SINGLE_NODE_MULTI_WRITER access modes.
	SingleNodeMultiWriter bool
	// Fence: UNPUBLISH_FENCE (fence.ControllerCanFence); without it the fence
	// field is never sent.
	Fence bool
}

// CSIHandlerConfig configures NewCSIHandler.
type CSIHandlerConfig struct {
	DriverName string
	// Timeout bounds every CSI call (--timeout).
	Timeout time.Duration
	// DefaultFSType is used for a mount volume whose PV has no fsType.
	DefaultFSType string
	Capabilities  Capabilities

	Client   kubernetes.Interface
	Attacher csiclient.Attacher
	// Lister enables ReconcileVA; nil when the driver lacks LIST_VOLUMES or
	// LIST_VOLUMES_PUBLISHED_NODES.
	Lister csiclient.Lister

	PVLister      corelisters.PersistentVolumeLister
	NodeLister    corelisters.NodeLister
	CSINodeLister storagelisters.CSINodeLister
	VALister      storagelisters.VolumeAttachmentLister
	// FencingRequests and FenceRecord are nil when the FencingRequest CRD is
	// not installed: quarantine is then read from the node taint only and
	// fences are not recorded. The workers' fences share FenceRecord, so
	// that those of one node share their record writes.
	FencingRequests FencingRequestLister
	FenceRecord     *fencerecord.Recorder

	Recorder record.EventRecorder
}

// CSIHandler is the Handler for drivers with PUBLISH_UNPUBLISH_VOLUME.
type CSIHandler struct {
	CSIHandlerConfig
	finalizer string

	vaQueue, pvQueue Queue

	// forceSync holds the VAs ReconcileVA found out of step with the
	// driver: their next sync attaches or detaches even though the status
	// or the finalizer says it is done.
	forceSyncMu sync.Mutex
	forceSync   map[string]bool

	// done remembers the attaches and detaches this handler completed
	// recently, so that a sync that works from a cache which has not caught
	// up with our own writes yet does not publish or unpublish (and fence)
	// a second time (external-attacher#587).
	done *recentlyDone

	// inFlight holds the VAs a worker is syncing right now: ReconcileVA
	// leaves them to that sync, whose result its ListVolumes may already
	// show while the VA status does not yet.
	inFlightMu sync.Mutex
	inFlight   map[string]bool
}

var _ Handler = &CSIHandler{}

// NewCSIHandler returns the CSI handler, or an error naming what is missing
// from cfg. It registers the attacher's metrics.
func NewCSIHandler(cfg CSIHandlerConfig) (*CSIHandler, error) {
	switch {
	case cfg.DriverName == "":
		return nil, errors.New("CSI handler: empty driver name")
	case cfg.Timeout <= 0:
		return nil, fmt.Errorf("CSI handler: timeout must be positive, got %v", cfg.Timeout)
	case cfg.Client == nil || cfg.Attacher == nil || cfg.Recorder == nil:
		return nil, errors.New("CSI handler: client, attacher and recorder are required")
	case cfg.PVLister == nil || cfg.NodeLister == nil || cfg.CSINodeLister == nil || cfg.VALister == nil:
		return nil, errors.New("CSI handler: PV, Node, CSINode and VolumeAttachment listers are required")
	}
	RegisterMetrics()
	return &CSIHandler{
		CSIHandlerConfig: cfg,
		finalizer:        contract.AttacherFinalizer(cfg.DriverName),
		forceSync:        map[string]bool{},
		done:             newRecentlyDone(recentlyDoneTTL, time.Now),
		inFlight:         map[string]bool{},
	}, nil
}

// Init implements Handler.
func (h *CSIHandler) Init(vaQueue, pvQueue Queue) { h.vaQueue, h.pvQueue = vaQueue, pvQueue }

// SyncNewOrUpdatedVolumeAttachment implements Handler: success forgets the
// VA, any error requeues it with backoff after saving it in the VA status.
func (h *CSIHandler) SyncNewOrUpdatedVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment) {
	logger := klog.FromContext(ctx)
	h.setInFlight(va.Name, true)
	defer h.setInFlight(va.Name, false)
	var err error
	if va.DeletionTimestamp == nil {
		err = h.syncAttach(ctx, va)
	} else {
		err = h.syncDetach(ctx, va)
	}
	if err != nil {
		logger.V(2).Info("Failed to sync VolumeAttachment, will retry with backoff", "err", err)
		h.vaQueue.AddRateLimited(va.Name)
		return
	}
	h.vaQueue.Forget(va.Name)
}

func (h *CSIHandler) setInFlight(name string, on bool) {
	h.inFlightMu.Lock()
	defer h.inFlightMu.Unlock()
	if on {
		h.inFlight[name] = true
	} else {
		delete(h.inFlight, name)
	}
}

func (h *CSIHandler) isInFlight(name string) bool {
	h.inFlightMu.Lock()
	defer h.inFlightMu.Unlock()
	return h.inFlight[name]
}

func (h *CSIHandler) setForceSync(name string) {
	h.forceSyncMu.Lock()
	defer h.forceSyncMu.Unlock()
	h.forceSync[name] = true
}

func (h *CSIHandler) consumeForceSync(name string) bool {
	h.forceSyncMu.Lock()
	defer h.forceSyncMu.Unlock()
	f := h.forceSync[name]
	delete(h.forceSync, name)
	return f
}

func (h *CSIHandler) syncAttach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	logger := klog.FromContext(ctx)
	if !h.consumeForceSync(va.Name) && (va.Status.Attached || h.done.has(va, opAttach)) {
		logger.V(4).Info("VolumeAttachment is already attached")
		return nil
	}
	logger.V(2).Info("Attaching", "node", va.Spec.NodeName)
	metadata, err := h.csiAttach(ctx, va)
	if err != nil {
		if serr := saveAttachError(ctx, h.Client, va, err); serr != nil {
			logger.Error(serr, "Failed to save the attach error in the VolumeAttachment status")
		}
		return fmt.Errorf("attach failed: %w", err)
	}
	if err := markAsAttached(ctx, h.Client, va, metadata); err != nil {
		return fmt.Errorf("marking as attached: %w", err)
	}
	h.done.add(va, opAttach)
	logger.V(2).Info("Attached", "node", va.Spec.NodeName)
	return nil
}

// csiAttach checks everything it can before it adds the VA finalizer (which
// would block the VA's deletion on later errors), then publishes.
func (h *CSIHandler) csiAttach(ctx context.Context, va *storagev1.VolumeAttachment) (map[string]string, error) {
	pv, spec, err := h.volumeSource(va)
	if err != nil {
		return nil, err
	}
	if pv != nil {
		if pv.DeletionTimestamp != nil {
			return nil, fmt.Errorf("PersistentVolume %q is being deleted: refusing to attach it", pv.Name)
		}
		if err := addFinalizer(ctx, h.Client.CoreV1().PersistentVolumes(), pv.Name, pv.Finalizers, h.finalizer); err != nil {
			return nil, fmt.Errorf("adding finalizer to PersistentVolume %q: %w", pv.Name, err)
		}
	}
	capability, err := volumeCapability(spec, h.DefaultFSType, h.Capabilities.SingleNodeMultiWriter)
	if err != nil {
		return nil, fmt.Errorf("volume capability of %s: %w", describeSource(va), err)
	}
	secrets, err := h.secrets(ctx, spec.CSI.ControllerPublishSecretRef)
	if err != nil {
		return nil, err
	}
	nodeID, err := h.nodeID(va.Spec.NodeName, nil)
	if err != nil {
		return nil, err
	}
	if err := h.checkPublish(va, spec); err != nil {
		return nil, err
	}
	patch, err := addVAFinalizerAndNodeIDPatch(va, h.finalizer, nodeID)
	if err != nil {
		return nil, err
	}
	if patch != nil {
		if _, err := h.Client.StorageV1().VolumeAttachments().Patch(ctx, va.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return nil, fmt.Errorf("saving finalizer and node ID on the VolumeAttachment: %w", err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	return h.Attacher.Attach(cctx, csiclient.AttachRequest{
		VolumeID:      spec.CSI.VolumeHandle,
		NodeID:        nodeID,
		ReadOnly:      readOnly(spec, h.Capabilities.PublishReadOnly),
		Capability:    capability,
		VolumeContext: spec.CSI.VolumeAttributes,
		Secrets:       secrets,
	})
}

// checkPublish gathers what PublishRefusal needs from the caches.
func (h *CSIHandler) checkPublish(va *storagev1.VolumeAttachment, spec *v1.PersistentVolumeSpec) error {
	node, err := h.node(va.Spec.NodeName)
	if err != nil {
		return err
	}
	fr, err := h.fencingRequest(va.Spec.NodeName)
	if err != nil {
		return err
	}
	vas, err := h.VALister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	return PublishRefusal(h.DriverName, h.finalizer, va, spec, node, fr, vas)
}

func (h *CSIHandler) syncDetach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	logger := klog.FromContext(ctx)
	if !h.consumeForceSync(va.Name) && (!slices.Contains(va.Finalizers, h.finalizer) || h.done.has(va, opDetach)) {
		logger.V(4).Info("VolumeAttachment is already detached")
		return nil
	}
	logger.V(2).Info("Detaching", "node", va.Spec.NodeName)
	if err := h.csiDetach(ctx, va); err != nil {
		if serr := saveDetachError(ctx, h.Client, va, err); serr != nil {
			logger.Error(serr, "Failed to save the detach error in the VolumeAttachment status")
		}
		return fmt.Errorf("detach failed: %w", err)
	}
	logger.V(2).Info("Detached", "node", va.Spec.NodeName)
	return nil
}

// csiDetach unpublishes the volume, with a fence when the detach is not
// graceful and the driver can fence, then lets the VA's deletion finish.
func (h *CSIHandler) csiDetach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	logger := klog.FromContext(ctx)
	_, spec, err := h.volumeSource(va)
	if err != nil {
		return err
	}
	handle := spec.CSI.VolumeHandle
	secrets, err := h.secrets(ctx, spec.CSI.ControllerPublishSecretRef)
	if err != nil {
		return err
	}
	nodeID, err := h.nodeID(va.Spec.NodeName, va)
	if err != nil {
		return err
	}
	node, err := h.node(va.Spec.NodeName)
	if err != nil {
		return err
	}
	fr, err := h.fencingRequest(va.Spec.NodeName)
	if err != nil {
		return err
	}
	fence, reason := DecideFence(h.Capabilities.Fence, node, fr, h.DriverName, handle)
	if reason != "" && !fence {
		logger.V(2).Info("Non-graceful detach, but the driver does not advertise UNPUBLISH_FENCE: unpublishing without fence",
			"volume", handle, "node", va.Spec.NodeName, "reason", reason)
	}
	if fence && h.FenceRecord == nil {
		// A fence that cannot be recorded would quarantine the volume
		// with nothing to lift it (S8): detach as external-attacher does.
		fence = false
		unfencedDetaches.WithLabelValues(h.DriverName, reason).Inc()
		logger.Info("Non-graceful detach, but the FencingRequest record is unavailable: unpublishing without fence",
			"volume", handle, "node", va.Spec.NodeName, "reason", reason)
		h.Recorder.Eventf(va, v1.EventTypeWarning, EventReasonFenceFailed,
			"Volume %s detached from node %s (%s) without a fence: the FencingRequest record is unavailable", handle, va.Spec.NodeName, reason)
	}

	if fence {
		target := fencedVolume{va: va, handle: handle, nodeID: nodeID, reason: reason}
		errs, err := h.FenceRecord.Fence(ctx, va.Spec.NodeName, reason, []fencingv1alpha1.FencedVolume{target.record(h.DriverName)},
			func(ctx context.Context, _ fencingv1alpha1.FencedVolume) error {
				cctx, cancel := context.WithTimeout(ctx, h.Timeout)
				defer cancel()
				return h.Attacher.Detach(cctx, handle, nodeID, secrets, true)
			})
		if err != nil {
			return fmt.Errorf("volume %s is not fenced from node %s: %w", handle, va.Spec.NodeName, err)
		}
		if err := h.afterFence(ctx, target, errs[0]); err != nil {
			return err
		}
	} else {
		cctx, cancel := context.WithTimeout(ctx, h.Timeout)
		err = h.Attacher.Detach(cctx, handle, nodeID, secrets, false)
		cancel()
		if err != nil {
			return err
		}
	}

	if err := markAsDetached(ctx, h.Client, va, h.finalizer); err != nil {
		return fmt.Errorf("marking as detached: %w", err)
	}
	h.done.add(va, opDetach)
	if fence {
		forcedDetaches.WithLabelValues(h.DriverName, reason).Inc()
	}
	return nil
}

// fencedVolume is the subject of one fenced unpublish.
type fencedVolume struct {
	va     *storagev1.VolumeAttachment
	handle string
	nodeID string
	reason string
}

func (f fencedVolume) record(driver string) fencingv1alpha1.FencedVolume {
	return fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: f.handle, PersistentVolumeName: pvName(f.va), NodeID: f.nodeID}
}

// afterFence makes a fenced unpublish visible: its result goes to the
// metrics and an Event on the VA. The FenceRecord recorded the intent
// before the call and the outcome after it, so a fence that returns nil here
// is recorded before the caller removes the VA finalizer. A fence that failed
// is returned as the detach error with the driver's reason; its entry stays
// in the record (the driver may have applied it).
func (h *CSIHandler) afterFence(ctx context.Context, f fencedVolume, fenceErr error) error {
	logger := klog.FromContext(ctx)
	node := f.va.Spec.NodeName
	if fenceErr != nil {
		fencedUnpublishErrors.WithLabelValues(h.DriverName, f.reason).Inc()
		var err error
		if refused(fenceErr) {
			err = fmt.Errorf("the driver refused to fence volume %s from node %s (%s), the volume stays attached there: %w", f.handle, node, f.reason, fenceErr)
		} else {
			err = fmt.Errorf("fencing volume %s from node %s (%s) failed, will retry: %w", f.handle, node, f.reason, fenceErr)
		}
		h.Recorder.Event(f.va, v1.EventTypeWarning, EventReasonFenceFailed, err.Error())
		return err
	}
	fencedUnpublishes.WithLabelValues(h.DriverName, f.reason).Inc()
	logger.V(2).Info("Fenced unpublish: the node can no longer access the volume",
		"VolumeAttachment", f.va.Name, "volume", f.handle, "node", node, "nodeID", f.nodeID, "reason", f.reason)
	h.Recorder.Eventf(f.va, v1.EventTypeNormal, EventReasonFencedUnpublish,
		"Volume %s was fenced from node %s (%s): the node can no longer access it until it is cleaned up", f.handle, node, f.reason)
	return nil
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

// volumeSource returns the CSI volume va attaches: the PV (nil for an inline
// volume) and its spec, with a clear error for anything malformed.
func (h *CSIHandler) volumeSource(va *storagev1.VolumeAttachment) (*v1.PersistentVolume, *v1.PersistentVolumeSpec, error) {
	src := va.Spec.Source
	var pv *v1.PersistentVolume
	var spec *v1.PersistentVolumeSpec
	switch {
	case src.PersistentVolumeName != nil && src.InlineVolumeSpec != nil:
		return nil, nil, fmt.Errorf("VolumeAttachment %q has both a PersistentVolume and an inline volume source", va.Name)
	case src.PersistentVolumeName != nil:
		var err error
		pv, err = h.PVLister.Get(*src.PersistentVolumeName)
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("PersistentVolume %q of VolumeAttachment %q not found", *src.PersistentVolumeName, va.Name)
		}
		if err != nil {
			return nil, nil, err
		}
		spec = &pv.Spec
	case src.InlineVolumeSpec != nil:
		spec = src.InlineVolumeSpec
	default:
		return nil, nil, fmt.Errorf("VolumeAttachment %q has no volume source", va.Name)
	}
	switch {
	case spec.CSI == nil:
		return nil, nil, fmt.Errorf("%s is not a CSI volume", describeSource(va))
	case spec.CSI.Driver != h.DriverName:
		return nil, nil, fmt.Errorf("%s belongs to CSI driver %q, not %q", describeSource(va), spec.CSI.Driver, h.DriverName)
	case spec.CSI.VolumeHandle == "":
		return nil, nil, fmt.Errorf("%s has an empty volume handle", describeSource(va))
	}
	return pv, spec, nil
}

func describeSource(va *storagev1.VolumeAttachment) string {
	if n := pvName(va); n != "" {
		return fmt.Sprintf("PersistentVolume %q", n)
	}
	return fmt.Sprintf("the inline volume of VolumeAttachment %q", va.Name)
}

// nodeID returns the driver's ID of the node from its CSINode. When va is
// given (detach, reconcile) and the CSINode or its driver entry is gone (a
// deleted or dead node), it falls back to the annotation saved on va at
// attach time, so that such a node can still be detached and fenced.
func (h *CSIHandler) nodeID(nodeName string, va *storagev1.VolumeAttachment) (string, error) {
	csiNode, err := h.CSINodeLister.Get(nodeName)
	switch {
	case err == nil:
		if id, ok := nodeIDFromCSINode(csiNode, h.DriverName); ok {
			return id, nil
		}
		err = fmt.Errorf("CSINode %q has no node ID for driver %q", nodeName, h.DriverName)
	case apierrors.IsNotFound(err):
		err = fmt.Errorf("CSINode %q not found", nodeName)
	}
	if va != nil {
		if id := va.Annotations[contract.NodeIDAnnotation]; id != "" {
			return id, nil
		}
		err = fmt.Errorf("%w, and VolumeAttachment %q has no %s annotation", err, va.Name, contract.NodeIDAnnotation)
	}
	return "", err
}

// node returns the Node, or nil when it does not exist.
func (h *CSIHandler) node(name string) (*v1.Node, error) {
	n, err := h.NodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Node %q: %w", name, err)
	}
	return n, nil
}

// fencingRequest returns the node's FencingRequest, or nil.
func (h *CSIHandler) fencingRequest(nodeName string) (*fencingv1alpha1.FencingRequest, error) {
	if h.FencingRequests == nil {
		return nil, nil
	}
	fr, err := h.FencingRequests.Get(nodeName)
	if err != nil {
		return nil, fmt.Errorf("reading the FencingRequest of node %q: %w", nodeName, err)
	}
	return fr, nil
}

func (h *CSIHandler) secrets(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	return csiclient.PublishSecrets(ctx, h.Client, ref)
}

// SyncNewOrUpdatedPersistentVolume implements Handler: the PV finalizer is
// released once the PV is being deleted and no VolumeAttachment references
// it any more.
func (h *CSIHandler) SyncNewOrUpdatedPersistentVolume(ctx context.Context, pv *v1.PersistentVolume) {
	logger := klog.FromContext(ctx)
	if pv.DeletionTimestamp == nil || !slices.Contains(pv.Finalizers, h.finalizer) {
		h.pvQueue.Forget(pv.Name)
		return
	}
	vas, err := h.VALister.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Failed to list VolumeAttachments")
		h.pvQueue.AddRateLimited(pv.Name)
		return
	}
	for _, va := range vas {
		if pvName(va) == pv.Name {
			logger.V(4).Info("PersistentVolume is still used", "VolumeAttachment", va.Name)
			h.pvQueue.Forget(pv.Name)
			return
		}
	}
	if err := removeFinalizer(ctx, h.Client.CoreV1().PersistentVolumes(), pv.Name, pv.Finalizers, h.finalizer); err != nil {
		logger.Error(err, "Failed to remove the PersistentVolume finalizer, will retry with backoff")
		h.pvQueue.AddRateLimited(pv.Name)
		return
	}
	logger.V(2).Info("Removed the PersistentVolume finalizer")
	h.pvQueue.Forget(pv.Name)
}

// ReconcileVA implements Handler. A VolumeAttachment whose attached status
// disagrees with the nodes the driver reports the volume published to is
// synced again, forced. It never re-attaches a volume to a node where it is
// quarantined: there the driver reports it unpublished because it was
// fenced (with the VA in place, DESIGN.md section 5 step 4), and publishing
// it again would undo the fence.
func (h *CSIHandler) ReconcileVA(ctx context.Context) error {
	if h.Lister == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	logger.V(4).Info("Reconciling VolumeAttachments with the driver's published volumes")
	vas, err := h.VALister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, h.Timeout)
	published, err := h.Lister.ListVolumes(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("ListVolumes: %w", err)
	}
	for _, va := range vas {
		if va.Spec.Attacher != h.DriverName {
			continue
		}
		vaLogger := klog.LoggerWithValues(logger, "VolumeAttachment", va.Name)
		_, spec, err := h.volumeSource(va)
		if err != nil {
			vaLogger.V(4).Info("Skipping VolumeAttachment", "err", err)
			continue
		}
		nodeID, err := h.nodeID(va.Spec.NodeName, va)
		if err != nil {
			vaLogger.V(4).Info("Skipping VolumeAttachment", "err", err)
			continue
		}
		handle := spec.CSI.VolumeHandle
		found := slices.Contains(published[handle], nodeID)
		if found == va.Status.Attached {
			continue
		}
		if h.isInFlight(va.Name) || (found && h.done.has(va, opAttach)) || (!found && h.done.has(va, opDetach)) {
			// A worker is on it, or the driver agrees with what this
			// handler just did and the cache has not caught up with our
			// status write yet.
			continue
		}
		if va.DeletionTimestamp == nil && h.quarantined(va.Spec.NodeName, handle) {
			vaLogger.V(4).Info("Volume is quarantined on the node, leaving the attachment alone", "volume", handle, "node", va.Spec.NodeName)
			continue
		}
		vaLogger.Info("VolumeAttachment status and the driver disagree, syncing it again",
			"volume", handle, "attachedStatus", va.Status.Attached, "publishedInDriver", found)
		h.setForceSync(va.Name)
		h.vaQueue.Add(va.Name)
	}
	return nil
}

// quarantined says whether the volume must not be published to the node
// (S2). When the record cannot be read the answer is yes: doing nothing is
// safe, publishing is not.
func (h *CSIHandler) quarantined(nodeName, handle string) bool {
	node, err := h.node(nodeName)
	if err != nil || (node != nil && hasTaint(node, contract.QuarantineTaintKey)) {
		return true
	}
	fr, err := h.fencingRequest(nodeName)
	return err != nil || fencerecord.MayBeQuarantined(fr, h.DriverName, handle)
}
