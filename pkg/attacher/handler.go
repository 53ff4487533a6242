package attacher

import (
	"context"
	"fmt"
	"slices"

	"github.com/kubernetes-csi/external-attacher/v4/pkg/controller"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// vaByNodeIndex indexes VolumeAttachments by spec.nodeName, so that a change
// of a node's health finds the attachments whose next sync it changes.
const vaByNodeIndex = "csi-fence-attacher/va-by-node"

// Handler decorates external-attacher's CSI handler (controller.NewCSIHandler)
// with what the fence needs of the controller and external-attacher does
// not do:
//
//   - each sync's context carries the VolumeAttachment being synced, from
//     which Attacher takes the Node of a deleted node's attachment, the PV of
//     its single-node check and the object its Events are about;
//   - a change of a node's health (Ready, quarantine or out-of-service
//     taint) or of its FencingRequest requeues the node's VolumeAttachments
//     at once, so that a detach in backoff is fenced, and a publish refused
//     for quarantine retried, without waiting for the backoff to expire;
//   - the deletion of a VolumeAttachment requeues the other attachments of
//     its PV, whose publish the single-node check may have refused;
//   - a VolumeAttachment whose fence is under way in Attacher's fence pool
//     is not synced: its detach could only say so again, with a write of
//     its detachError and live reads each time its backoff expires, which
//     a burst of fences would multiply. The end of the fence requeues it
//     (FencesFrom).
//
// The backoff stays external-attacher's: the inner handler still Forgets or
// AddRateLimits every item it syncs; Handler only Adds.
type Handler struct {
	controller.Handler
	driverName string
	vas        cache.Indexer
	vaQueue    workqueue.TypedRateLimitingInterface[string]
	// fencing reports a fence under way (Attacher.Fencing); nil: none.
	fencing func(vaName string) bool
}

var _ controller.Handler = &Handler{}

// NewHandler wraps inner. vaInformer must be the informer the controller
// watches VolumeAttachments with; it must not have started yet (an index is
// added to it).
func NewHandler(inner controller.Handler, driverName string, vaInformer cache.SharedIndexInformer) (*Handler, error) {
	if err := vaInformer.AddIndexers(cache.Indexers{vaByNodeIndex: indexVAByNode}); err != nil {
		return nil, fmt.Errorf("indexing VolumeAttachments by node: %w", err)
	}
	h := &Handler{Handler: inner, driverName: driverName, vas: vaInformer.GetIndexer()}
	if _, err := vaInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: h.vaDeleted}); err != nil {
		return nil, err
	}
	return h, nil
}

// Init implements controller.Handler.
func (h *Handler) Init(vaQueue, pvQueue workqueue.TypedRateLimitingInterface[string]) {
	h.vaQueue = vaQueue
	h.Handler.Init(vaQueue, pvQueue)
}

// FencesFrom connects the handler to a's fence pool: the VolumeAttachment
// of a fence that is over is synced at once, and none is synced while its
// fence is under way. Call it before the controller runs.
func (h *Handler) FencesFrom(a *Attacher) {
	h.fencing = a.Fencing
	a.OnFenceDone(h.Requeue)
}

// SyncNewOrUpdatedVolumeAttachment implements controller.Handler.
func (h *Handler) SyncNewOrUpdatedVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment) {
	if va.DeletionTimestamp != nil && h.fencing != nil && h.fencing(va.Name) {
		// Left out of the queue (no Forget, no backoff): the end of the
		// fence adds it again.
		klog.FromContext(ctx).V(4).Info("Fence under way: the detach waits for it", "VolumeAttachment", va.Name)
		return
	}
	h.Handler.SyncNewOrUpdatedVolumeAttachment(withVolumeAttachment(ctx, va), va)
}

// Requeue syncs the VolumeAttachment again at once, e.g. when its fence is
// over (Attacher.OnFenceDone). A VolumeAttachment in backoff is synced now;
// its backoff stays as external-attacher left it.
func (h *Handler) Requeue(vaName string) {
	if h.vaQueue != nil {
		h.vaQueue.Add(vaName)
	}
}

// WatchNodes requeues a node's VolumeAttachments when its health changes.
func (h *Handler) WatchNodes(nodeInformer cache.SharedIndexInformer) error {
	_, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    h.nodeAddedOrDeleted,
		UpdateFunc: h.nodeUpdated,
		DeleteFunc: h.nodeAddedOrDeleted,
	})
	return err
}

// WatchFencingRequests requeues a node's VolumeAttachments when what
// Attacher reads from its FencingRequest changes.
func (h *Handler) WatchFencingRequests(frInformer cache.SharedIndexInformer) error {
	_, err := frInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    h.fencingRequestAddedOrDeleted,
		UpdateFunc: h.fencingRequestUpdated,
		DeleteFunc: h.fencingRequestAddedOrDeleted,
	})
	return err
}

func indexVAByNode(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{va.Spec.NodeName}, nil
}

// vaDeleted requeues the other attachments of the PV that wait to be
// published: the single-node check may have refused them while this one
// was there, and their backoff would add seconds to every failover.
func (h *Handler) vaDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || pvName(va) == "" {
		return
	}
	for _, o := range h.vas.List() {
		other, ok := o.(*storagev1.VolumeAttachment)
		if ok && other.Name != va.Name && other.Spec.Attacher == h.driverName && pvName(other) == pvName(va) &&
			other.DeletionTimestamp == nil && !other.Status.Attached {
			h.vaQueue.Add(other.Name)
		}
	}
}

// nodeHealth is what DecideFence and QuarantineRefusal read from a Node.
type nodeHealth struct {
	ready, quarantined, outOfService bool
}

func healthOf(n *v1.Node) nodeHealth {
	return nodeHealth{
		ready:        isReady(n),
		quarantined:  hasTaint(n, contract.QuarantineTaintKey),
		outOfService: hasTaint(n, contract.OutOfServiceTaintKey),
	}
}

func (h *Handler) nodeAddedOrDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*v1.Node); ok {
		h.enqueueVAsOnNode(n.Name)
	}
}

// nodeUpdated ignores the heartbeats: only a change of health matters.
func (h *Handler) nodeUpdated(oldObj, newObj any) {
	o, ok1 := oldObj.(*v1.Node)
	n, ok2 := newObj.(*v1.Node)
	if ok1 && ok2 && healthOf(o) != healthOf(n) {
		h.enqueueVAsOnNode(n.Name)
	}
}

func (h *Handler) fencingRequestAddedOrDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if fr, err := fencingv1alpha1.FromUnstructured(obj); err == nil {
		h.enqueueVAsOnNode(fr.Name)
	}
}

// fencingRequestUpdated requeues the node's VolumeAttachments when what
// DecideFence reads from the request changed: whether it is an active manual
// one, and which of this driver's volumes may be quarantined there.
func (h *Handler) fencingRequestUpdated(oldObj, newObj any) {
	o, err1 := fencingv1alpha1.FromUnstructured(oldObj)
	n, err2 := fencingv1alpha1.FromUnstructured(newObj)
	if err1 != nil || err2 != nil {
		return
	}
	if o.ManualActive() != n.ManualActive() || !slices.Equal(h.quarantinedHandles(o), h.quarantinedHandles(n)) {
		h.enqueueVAsOnNode(n.Name)
	}
}

func (h *Handler) quarantinedHandles(fr *fencingv1alpha1.FencingRequest) []string {
	var out []string
	for _, v := range fr.Status.Volumes {
		if v.Driver == h.driverName && v.CleanedTime == nil {
			out = append(out, v.VolumeHandle)
		}
	}
	slices.Sort(out)
	return out
}

func (h *Handler) enqueueVAsOnNode(nodeName string) {
	objs, err := h.vas.ByIndex(vaByNodeIndex, nodeName)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Attacher == h.driverName {
			h.vaQueue.Add(va.Name)
		}
	}
}

type vaKey struct{}

// withVolumeAttachment returns ctx carrying va: external-attacher's handler
// passes its context on to the Attacher's calls it makes for va.
func withVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment) context.Context {
	return context.WithValue(ctx, vaKey{}, va)
}

// volumeAttachmentFrom returns the VolumeAttachment ctx carries, or nil.
func volumeAttachmentFrom(ctx context.Context) *storagev1.VolumeAttachment {
	va, _ := ctx.Value(vaKey{}).(*storagev1.VolumeAttachment)
	return va
}
