package attacher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// Queue names, as external-attacher's, so that the workqueue metrics keep
// their labels across the swap.
const (
	VAQueueName = "csi-attacher-va"
	PVQueueName = "csi-attacher-pv"
)

// vaByNodeIndex indexes VolumeAttachments by spec.nodeName, so that a change
// of a node's health finds the attachments whose next sync it changes.
const vaByNodeIndex = "csi-fence-attacher/by-node"

// ControllerConfig configures NewController.
type ControllerConfig struct {
	// DriverName: only VolumeAttachments whose spec.attacher is this driver
	// are handled.
	DriverName string
	Handler    Handler

	VAInformer storageinformers.VolumeAttachmentInformer
	PVInformer coreinformers.PersistentVolumeInformer
	// NodeInformer, CSINodeInformer and FencingRequestInformer are the
	// caches the CSI handler reads; nil for the trivial handler. A change of
	// a node's health (Ready, quarantine or out-of-service taint) or of its
	// FencingRequest requeues the node's VolumeAttachments at once, so that
	// a detach waiting in backoff is fenced, and a publish refused for
	// quarantine is retried, without waiting for the backoff to expire.
	NodeInformer           coreinformers.NodeInformer
	CSINodeInformer        storageinformers.CSINodeInformer
	FencingRequestInformer cache.SharedIndexInformer

	// VARateLimiter and PVRateLimiter give each queue its per-item
	// exponential backoff (--retry-interval-start, --retry-interval-max).
	VARateLimiter, PVRateLimiter workqueue.TypedRateLimiter[string]
	// ReconcileSync is the period of Handler.ReconcileVA; 0 disables it.
	ReconcileSync time.Duration
}

// Controller watches the VolumeAttachments of one driver and the PVs they
// use, and hands each to its Handler. It knows nothing of CSI.
type Controller struct {
	driverName    string
	handler       Handler
	reconcileSync time.Duration

	vaQueue Queue
	pvQueue Queue

	vaLister  storagelisters.VolumeAttachmentLister
	vaIndexer cache.Indexer
	pvLister  corelisters.PersistentVolumeLister
	synced    []cache.InformerSynced
}

// NewController wires the informers' event handlers to two rate-limited
// queues and gives the queues to the handler.
func NewController(logger klog.Logger, cfg ControllerConfig) (*Controller, error) {
	if cfg.DriverName == "" || cfg.Handler == nil || cfg.VAInformer == nil || cfg.PVInformer == nil ||
		cfg.VARateLimiter == nil || cfg.PVRateLimiter == nil {
		return nil, errors.New("attacher controller: driver name, handler, VolumeAttachment and PV informers and rate limiters are required")
	}
	c := &Controller{
		driverName:    cfg.DriverName,
		handler:       cfg.Handler,
		reconcileSync: cfg.ReconcileSync,
		vaQueue: workqueue.NewTypedRateLimitingQueueWithConfig(cfg.VARateLimiter,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: VAQueueName}),
		pvQueue: workqueue.NewTypedRateLimitingQueueWithConfig(cfg.PVRateLimiter,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: PVQueueName}),
		vaLister:  cfg.VAInformer.Lister(),
		vaIndexer: cfg.VAInformer.Informer().GetIndexer(),
		pvLister:  cfg.PVInformer.Lister(),
	}
	vaInf := cfg.VAInformer.Informer()
	if err := vaInf.AddIndexers(cache.Indexers{vaByNodeIndex: indexVAByNode}); err != nil {
		return nil, fmt.Errorf("indexing VolumeAttachments by node: %w", err)
	}
	if _, err := vaInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.vaAdded,
		UpdateFunc: c.vaUpdated,
		DeleteFunc: c.vaDeleted,
	}); err != nil {
		return nil, err
	}
	if _, err := cfg.PVInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.pvChanged,
		UpdateFunc: func(_, obj any) { c.pvChanged(obj) },
	}); err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{vaInf.HasSynced, cfg.PVInformer.Informer().HasSynced}
	if cfg.NodeInformer != nil {
		inf := cfg.NodeInformer.Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.nodeAddedOrDeleted,
			UpdateFunc: c.nodeUpdated,
			DeleteFunc: c.nodeAddedOrDeleted,
		}); err != nil {
			return nil, err
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	if cfg.CSINodeInformer != nil {
		c.synced = append(c.synced, cfg.CSINodeInformer.Informer().HasSynced)
	}
	if cfg.FencingRequestInformer != nil {
		inf := cfg.FencingRequestInformer
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.fencingRequestAddedOrDeleted,
			UpdateFunc: c.fencingRequestUpdated,
			DeleteFunc: c.fencingRequestAddedOrDeleted,
		}); err != nil {
			return nil, err
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	cfg.Handler.Init(c.vaQueue, c.pvQueue)
	logger.V(4).Info("Created the attacher controller", "driver", cfg.DriverName)
	return c, nil
}

// Run waits for the caches, runs workers goroutines per queue and, when
// enabled, the periodic ReconcileVA, until ctx is done. It returns only when
// every worker has stopped, so that a caller releasing its leader-election
// Lease afterwards never overlaps with a new leader.
func (c *Controller) Run(ctx context.Context, workers int) {
	logger := klog.FromContext(ctx)
	logger.Info("Starting the CSI attacher", "driver", c.driverName, "workers", workers)
	defer logger.Info("Stopped the CSI attacher")

	var wg sync.WaitGroup
	defer wg.Wait()
	// Shutting the queues down releases workers blocked in Get; it must
	// happen before the Wait above.
	defer c.pvQueue.ShutDown()
	defer c.vaQueue.ShutDown()

	if !cache.WaitForNamedCacheSync("csi-attacher", ctx.Done(), c.synced...) {
		return
	}
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.syncVA, 0) })
		wg.Go(func() { wait.UntilWithContext(ctx, c.syncPV, 0) })
	}
	if c.reconcileSync > 0 {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				if err := c.handler.ReconcileVA(ctx); err != nil {
					logger.Error(err, "Failed to reconcile VolumeAttachments with the driver")
				}
			}, c.reconcileSync)
		})
	}
	<-ctx.Done()
}

func indexVAByNode(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{va.Spec.NodeName}, nil
}

func (c *Controller) vaAdded(obj any) {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok {
		c.vaQueue.Add(va.Name)
	}
}

func (c *Controller) vaUpdated(oldObj, newObj any) {
	oldVA, ok1 := oldObj.(*storagev1.VolumeAttachment)
	newVA, ok2 := newObj.(*storagev1.VolumeAttachment)
	if ok1 && ok2 && shouldEnqueueVAChange(oldVA, newVA) {
		c.vaQueue.Add(newVA.Name)
	}
}

// vaDeleted gives the PV a chance to release its finalizer.
func (c *Controller) vaDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || pvName(va) == "" {
		return
	}
	c.pvQueue.Add(pvName(va))
	// A publish of the same volume to another node may be waiting for this
	// attachment to go (the single-node guard): retry it now rather than
	// after its backoff, which would add seconds to every failover.
	others, err := c.vaLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range others {
		if o.Name != va.Name && pvName(o) == pvName(va) && o.DeletionTimestamp == nil && !o.Status.Attached {
			c.vaQueue.Add(o.Name)
		}
	}
}

// pvChanged queues PVs being deleted that still carry our finalizer.
func (c *Controller) pvChanged(obj any) {
	pv, ok := obj.(*v1.PersistentVolume)
	if ok && pv.DeletionTimestamp != nil && slices.Contains(pv.Finalizers, contract.AttacherFinalizer(c.driverName)) {
		c.pvQueue.Add(pv.Name)
	}
}

// shouldEnqueueVAChange drops updates that change nothing but the attach or
// detach error: those are the handler's own writes after a failure, and
// queueing them at once would bypass the failing item's backoff. A periodic
// resync (same resourceVersion) is let through.
func shouldEnqueueVAChange(oldVA, newVA *storagev1.VolumeAttachment) bool {
	if oldVA.ResourceVersion == newVA.ResourceVersion {
		return true
	}
	o, n := oldVA.DeepCopy(), newVA.DeepCopy()
	for _, va := range []*storagev1.VolumeAttachment{o, n} {
		va.ResourceVersion = ""
		va.ManagedFields = nil
		va.Status.AttachError = nil
		va.Status.DetachError = nil
	}
	return !equality.Semantic.DeepEqual(o, n)
}

// nodeHealth is what DecideFence and PublishRefusal read from a Node.
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

func (c *Controller) nodeAddedOrDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*v1.Node); ok {
		c.enqueueVAsOnNode(n.Name)
	}
}

// nodeUpdated ignores the heartbeats: only a change of health matters.
func (c *Controller) nodeUpdated(oldObj, newObj any) {
	o, ok1 := oldObj.(*v1.Node)
	n, ok2 := newObj.(*v1.Node)
	if ok1 && ok2 && healthOf(o) != healthOf(n) {
		c.enqueueVAsOnNode(n.Name)
	}
}

func (c *Controller) fencingRequestAddedOrDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if fr, err := fencingv1alpha1.FromUnstructured(obj); err == nil {
		c.enqueueVAsOnNode(fr.Name)
	}
}

// fencingRequestUpdated requeues the node's VAs when what the handler reads
// from the request changed: whether it is active, and which of this driver's
// volumes are quarantined there.
func (c *Controller) fencingRequestUpdated(oldObj, newObj any) {
	o, err1 := fencingv1alpha1.FromUnstructured(oldObj)
	n, err2 := fencingv1alpha1.FromUnstructured(newObj)
	if err1 != nil || err2 != nil {
		return
	}
	if fencingRequestActive(o) != fencingRequestActive(n) || !slices.Equal(c.quarantinedHandles(o), c.quarantinedHandles(n)) {
		c.enqueueVAsOnNode(n.Name)
	}
}

func (c *Controller) quarantinedHandles(fr *fencingv1alpha1.FencingRequest) []string {
	var out []string
	for _, v := range fr.Status.Volumes {
		if v.Driver == c.driverName && v.FencedTime != nil && v.CleanedTime == nil {
			out = append(out, v.VolumeHandle)
		}
	}
	slices.Sort(out)
	return out
}

func (c *Controller) enqueueVAsOnNode(nodeName string) {
	objs, err := c.vaIndexer.ByIndex(vaByNodeIndex, nodeName)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Attacher == c.driverName {
			c.vaQueue.Add(va.Name)
		}
	}
}

func (c *Controller) syncVA(ctx context.Context) {
	key, quit := c.vaQueue.Get()
	if quit {
		return
	}
	defer c.vaQueue.Done(key)
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "VolumeAttachment", key)
	ctx = klog.NewContext(ctx, logger)
	va, err := c.vaLister.Get(key)
	if apierrors.IsNotFound(err) {
		logger.V(3).Info("VolumeAttachment was deleted")
		c.vaQueue.Forget(key)
		return
	}
	if err != nil {
		logger.Error(err, "Failed to get the VolumeAttachment, will retry with backoff")
		c.vaQueue.AddRateLimited(key)
		return
	}
	if va.Spec.Attacher != c.driverName {
		logger.V(4).Info("Skipping the VolumeAttachment of another attacher", "attacher", va.Spec.Attacher)
		c.vaQueue.Forget(key)
		return
	}
	c.handler.SyncNewOrUpdatedVolumeAttachment(ctx, va.DeepCopy())
}

func (c *Controller) syncPV(ctx context.Context) {
	key, quit := c.pvQueue.Get()
	if quit {
		return
	}
	defer c.pvQueue.Done(key)
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "PersistentVolume", key)
	ctx = klog.NewContext(ctx, logger)
	pv, err := c.pvLister.Get(key)
	if apierrors.IsNotFound(err) {
		c.pvQueue.Forget(key)
		return
	}
	if err != nil {
		logger.Error(err, "Failed to get the PersistentVolume, will retry with backoff")
		c.pvQueue.AddRateLimited(key)
		return
	}
	c.handler.SyncNewOrUpdatedPersistentVolume(ctx, pv.DeepCopy())
}
