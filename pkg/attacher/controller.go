package attacher

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Controller watches the VolumeAttachments of one driver and the PVs they
// use, and hands each to its Handler.
type Controller struct {
	driverName string
	handler    Handler

	vaQueue Queue
	pvQueue Queue

	vaLister storagelisters.VolumeAttachmentLister
	pvLister corelisters.PersistentVolumeLister
	synced   []cache.InformerSynced

	reconcileSync time.Duration // 0: no ListVolumes reconciliation
}

// NewController returns a Controller. vaRateLimiter and pvRateLimiter give
// the per-item backoff of each queue. extraSynced are the informers the
// handler reads (nodes, CSINodes, FencingRequests) that must be synced first.
func NewController(
	logger klog.Logger,
	driverName string,
	handler Handler,
	vaInformer storageinformers.VolumeAttachmentInformer,
	pvInformer coreinformers.PersistentVolumeInformer,
	vaRateLimiter, pvRateLimiter workqueue.TypedRateLimiter[string],
	reconcileSync time.Duration,
	extraSynced ...cache.InformerSynced,
) (*Controller, error) {
	c := &Controller{
		driverName:    driverName,
		handler:       handler,
		vaQueue:       workqueue.NewTypedRateLimitingQueueWithConfig(vaRateLimiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: "csi-attacher-va"}),
		pvQueue:       workqueue.NewTypedRateLimitingQueueWithConfig(pvRateLimiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: "csi-attacher-pv"}),
		vaLister:      vaInformer.Lister(),
		pvLister:      pvInformer.Lister(),
		reconcileSync: reconcileSync,
	}
	if _, err := vaInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.vaAdded,
		UpdateFunc: c.vaUpdated,
		DeleteFunc: c.vaDeleted,
	}); err != nil {
		return nil, err
	}
	if _, err := pvInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.pvAdded,
		UpdateFunc: func(_, obj interface{}) { c.pvAdded(obj) },
	}); err != nil {
		return nil, err
	}
	c.synced = append([]cache.InformerSynced{vaInformer.Informer().HasSynced, pvInformer.Informer().HasSynced}, extraSynced...)
	handler.Init(c.vaQueue, c.pvQueue)
	logger.V(4).Info("Created attacher controller", "driver", driverName)
	return c, nil
}

// Run runs workers per queue until ctx is done, and the ListVolumes
// reconciliation every reconcileSync when enabled.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.vaQueue.ShutDown()
	defer c.pvQueue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting CSI attacher", "driver", c.driverName)
	defer logger.Info("Shutting down CSI attacher")

	if !cache.WaitForNamedCacheSync("csi-attacher", ctx.Done(), c.synced...) {
		return
	}
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, c.syncVA, 0)
		go wait.UntilWithContext(ctx, c.syncPV, 0)
	}
	if c.reconcileSync > 0 {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			if err := c.handler.ReconcileVA(ctx); err != nil {
				logger.Error(err, "Failed to reconcile VolumeAttachments with the driver")
			}
		}, c.reconcileSync)
	}
	<-ctx.Done()
}

func (c *Controller) vaAdded(obj interface{}) {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok {
		c.vaQueue.Add(va.Name)
	}
}

func (c *Controller) vaUpdated(oldObj, newObj interface{}) {
	oldVA, ok1 := oldObj.(*storagev1.VolumeAttachment)
	newVA, ok2 := newObj.(*storagev1.VolumeAttachment)
	if ok1 && ok2 && shouldEnqueueVAChange(oldVA, newVA) {
		c.vaQueue.Add(newVA.Name)
	}
}

// vaDeleted gives the PV a chance to release its finalizer.
func (c *Controller) vaDeleted(obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	va, ok := obj.(*storagev1.VolumeAttachment)
	if ok && va.Spec.Source.PersistentVolumeName != nil {
		c.pvQueue.Add(*va.Spec.Source.PersistentVolumeName)
	}
}

func (c *Controller) pvAdded(obj interface{}) {
	if pv, ok := obj.(*v1.PersistentVolume); ok && pv.DeletionTimestamp != nil {
		c.pvQueue.Add(pv.Name)
	}
}

// shouldEnqueueVAChange drops updates that only change the attach or detach
// error: those are our own status writes, and enqueueing them would bypass
// the backoff of a failing item. A periodic resync (same resourceVersion)
// is let through.
func shouldEnqueueVAChange(oldVA, newVA *storagev1.VolumeAttachment) bool {
	if oldVA.ResourceVersion == newVA.ResourceVersion {
		return true
	}
	o, n := oldVA.DeepCopy(), newVA.DeepCopy()
	o.ResourceVersion, n.ResourceVersion = "", ""
	o.ManagedFields, n.ManagedFields = nil, nil
	o.Status.AttachError, n.Status.AttachError = nil, nil
	o.Status.DetachError, n.Status.DetachError = nil, nil
	return !equality.Semantic.DeepEqual(o, n)
}

func (c *Controller) syncVA(ctx context.Context) {
	key, quit := c.vaQueue.Get()
	if quit {
		return
	}
	defer c.vaQueue.Done(key)
	logger := klog.FromContext(ctx)
	va, err := c.vaLister.Get(key)
	if apierrors.IsNotFound(err) {
		logger.V(4).Info("VolumeAttachment was deleted", "VolumeAttachment", key)
		c.vaQueue.Forget(key)
		return
	}
	if err != nil {
		logger.Error(err, "Failed to get VolumeAttachment", "VolumeAttachment", key)
		c.vaQueue.AddRateLimited(key)
		return
	}
	if va.Spec.Attacher != c.driverName {
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
	pv, err := c.pvLister.Get(key)
	if apierrors.IsNotFound(err) {
		c.pvQueue.Forget(key)
		return
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to get PersistentVolume", "PersistentVolume", key)
		c.pvQueue.AddRateLimited(key)
		return
	}
	c.handler.SyncNewOrUpdatedPersistentVolume(ctx, pv.DeepCopy())
}

// String describes the controller, for logs.
func (c *Controller) String() string { return fmt.Sprintf("attacher(%s)", c.driverName) }
