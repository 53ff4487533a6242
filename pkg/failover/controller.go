package failover

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
)

// Options configure the controller.
type Options struct {
	DriverName string
	// CanFence: the driver advertises UNPUBLISH_FENCE.
	CanFence bool
	// SafeDetach enables the failover (feature gate NonGracefulFailover):
	// the SafeDetach path, the event-driven out-of-service path and fencing.
	// Without it only the release of a node that is back runs.
	SafeDetach bool
	// Timeout bounds every CSI call.
	Timeout time.Duration
	// MaxFencedNodes and MaxFencedNodePercent are the storm guard (0: no
	// limit of that kind).
	MaxFencedNodes       int
	MaxFencedNodePercent int
	// RetryIntervalStart and RetryIntervalMax bound the per-node backoff.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// Resync is how often every node is synced again.
	Resync time.Duration
	// FencingRequiredAfter: a node NotReady this long gets
	// FencingRequired=True even before a pod qualifies (0: only when a pod
	// qualifies). Either way fencing itself starts only for a qualifying pod
	// or an explicit FencingRequest.
	FencingRequiredAfter time.Duration
	// FencingTaints adds the Node Fencing KEP's optional taints
	// node.kubernetes.io/fencingtriaged:PreferNoSchedule and
	// node.kubernetes.io/fencingrequired:NoSchedule with the conditions.
	FencingTaints bool
}

// Controller is the failover controller of one driver.
type Controller struct {
	opts     Options
	client   kubernetes.Interface
	frClient *fencingv1alpha1.Client
	csi      csiclient.Attacher
	recorder record.EventRecorder

	nodes    corelisters.NodeLister
	pods     corelisters.PodLister
	pvcs     corelisters.PersistentVolumeClaimLister
	pvs      corelisters.PersistentVolumeLister
	vas      storagelisters.VolumeAttachmentLister
	drivers  storagelisters.CSIDriverLister
	frs      fencingv1alpha1.Lister
	frCache  cache.GenericLister // for listing every request
	synced   []cache.InformerSynced
	factory  informers.SharedInformerFactory
	dfactory dynamicinformer.DynamicSharedInformerFactory

	queue workqueue.TypedRateLimitingInterface[string]
	// eligibleSince remembers when each pod was first seen eligible, for
	// the failover duration metric.
	eligibleSince map[string]time.Time
}

// New returns a Controller on its own informers.
func New(opts Options, client kubernetes.Interface, dyn dynamicinformer.DynamicSharedInformerFactory, frClient *fencingv1alpha1.Client, csi csiclient.Attacher, recorder record.EventRecorder) (*Controller, error) {
	f := informers.NewSharedInformerFactory(client, opts.Resync)
	c := &Controller{
		opts: opts, client: client, frClient: frClient, csi: csi, recorder: recorder,
		nodes: f.Core().V1().Nodes().Lister(), pods: f.Core().V1().Pods().Lister(),
		pvcs: f.Core().V1().PersistentVolumeClaims().Lister(), pvs: f.Core().V1().PersistentVolumes().Lister(),
		vas: f.Storage().V1().VolumeAttachments().Lister(), drivers: f.Storage().V1().CSIDrivers().Lister(),
		factory: f, dfactory: dyn,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryIntervalStart, opts.RetryIntervalMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csi-fence-failover"}),
		eligibleSince: map[string]time.Time{},
	}
	frInformer := dyn.ForResource(fencingv1alpha1.Resource)
	c.frCache = frInformer.Lister()
	c.frs = fencingv1alpha1.NewLister(c.frCache)
	byNode := func(node string) { c.queue.Add(node) }
	handlers := []struct {
		inf cache.SharedIndexInformer
		key func(obj interface{}) string
	}{
		{f.Core().V1().Nodes().Informer(), func(o interface{}) string { return objName(o) }},
		{f.Core().V1().Pods().Informer(), func(o interface{}) string {
			if p, ok := o.(*v1.Pod); ok {
				return p.Spec.NodeName
			}
			return ""
		}},
		{f.Storage().V1().VolumeAttachments().Informer(), func(o interface{}) string {
			if va, ok := o.(*storagev1.VolumeAttachment); ok {
				return va.Spec.NodeName
			}
			return ""
		}},
		{frInformer.Informer(), func(o interface{}) string { return objName(o) }},
	}
	for _, h := range handlers {
		key := h.key
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o interface{}) { enqueue(key(o), byNode) },
			UpdateFunc: func(_, o interface{}) { enqueue(key(o), byNode) },
			DeleteFunc: func(o interface{}) {
				if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				enqueue(key(o), byNode)
			},
		}); err != nil {
			return nil, err
		}
		c.synced = append(c.synced, h.inf.HasSynced)
	}
	for _, inf := range []cache.SharedIndexInformer{f.Core().V1().PersistentVolumeClaims().Informer(), f.Core().V1().PersistentVolumes().Informer(), f.Storage().V1().CSIDrivers().Informer()} {
		c.synced = append(c.synced, inf.HasSynced)
	}
	return c, nil
}

func enqueue(node string, add func(string)) {
	if node != "" {
		add(node)
	}
}

func objName(o interface{}) string {
	if m, ok := o.(interface{ GetName() string }); ok {
		return m.GetName()
	}
	return ""
}

// Run runs workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	c.factory.Start(ctx.Done())
	c.dfactory.Start(ctx.Done())
	if !cache.WaitForNamedCacheSync("csi-fence-failover", ctx.Done(), c.synced...) {
		return
	}
	logger.Info("Starting failover controller", "driver", c.opts.DriverName, "safeDetach", c.opts.SafeDetach, "canFence", c.opts.CanFence)
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, c.worker, 0)
	}
	// A periodic pass catches what no event announces (time passing).
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		nodes, _ := c.nodes.List(labels.Everything())
		quarantined := 0
		for _, n := range nodes {
			c.queue.Add(n.Name)
			if Taint(n, contract.QuarantineTaintKey) != nil {
				quarantined++
			}
		}
		fencedNodes.Set(float64(quarantined))
		frs, _ := c.frCache.List(labels.Everything())
		for _, o := range frs {
			c.queue.Add(objName(o))
		}
	}, c.opts.Resync)
	<-ctx.Done()
}

func (c *Controller) worker(ctx context.Context) {
	for {
		node, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.sync(klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "node", node)), node)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Failover sync failed, will retry", "node", node, "err", err)
			c.queue.AddRateLimited(node)
		} else {
			c.queue.Forget(node)
		}
		c.queue.Done(node)
	}
}

// sync is one pass over one node: see the package doc for the order.
func (c *Controller) sync(ctx context.Context, nodeName string) error {
	logger := klog.FromContext(ctx)
	fr, err := c.frs.Get(nodeName)
	if err != nil {
		return err
	}
	node, err := c.nodes.Get(nodeName)
	if apierrors.IsNotFound(err) {
		// A deleted Node leaves nothing to clean: drop its record.
		if fr != nil {
			logger.V(2).Info("Node deleted, removing its FencingRequest")
			if err := c.frClient.Delete(ctx, nodeName); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	manual := fr != nil && fr.Spec.Origin != fencingv1alpha1.OriginAutomatic && fr.Status.Phase != fencingv1alpha1.PhaseComplete
	ready := NodeReady(node)
	if manual && ready {
		// Fencing a Ready node needs the request to exist now, not just in
		// a cache that may lag its deletion (S4).
		live, err := c.frClient.Get(ctx, nodeName)
		if apierrors.IsNotFound(err) {
			fr, manual = nil, false
		} else if err != nil {
			return err
		}
		if live != nil && (live.Spec.Origin == fencingv1alpha1.OriginAutomatic || live.Status.Phase == fencingv1alpha1.PhaseComplete) {
			manual = false
		}
	}

	if ready && !manual {
		return c.release(ctx, node, fr)
	}
	// Everything below changes what happens to pods: behind the
	// NonGracefulFailover gate, so that with the gate off the sidecar acts
	// as external-attacher does (releasing a node is always allowed).
	if !c.opts.SafeDetach {
		return nil
	}
	pods, err := c.podsOn(nodeName)
	if err != nil {
		return err
	}
	// Out-of-service (KEP-2268), or every attachment fenced: force-delete
	// the Terminating pods that do not tolerate the taint.
	if !ready {
		if t := Taint(node, contract.OutOfServiceTaintKey); t != nil {
			for _, p := range pods {
				if p.DeletionTimestamp != nil && !Tolerates(p, *t) {
					c.forceDelete(ctx, p, node, ReasonOutOfService)
				}
			}
		} else if conditionTrue(node, contract.ConditionFencingComplete) {
			for _, p := range pods {
				if p.DeletionTimestamp != nil {
					c.forceDelete(ctx, p, node, ReasonFencingComplete)
				}
			}
		}
	}
	if !ready && IsControlPlane(node) {
		return nil
	}
	if !ready {
		// The Node Fencing KEP's timeline: triaged as soon as the node is
		// seen NotReady, required once it stays so.
		if err := c.triage(ctx, node); err != nil {
			return err
		}
	}
	// SafeDetach: which Terminating pods may fail over?
	var eligible []*v1.Pod
	vols := map[*v1.Pod][]PodVolume{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && !manual {
			continue
		}
		e := SafeDetachEligible(p, c.resolve(p.Namespace), c.safeDetach, c.opts.DriverName, c.opts.CanFence)
		if !e.SafeDetach {
			logger.V(4).Info("Pod not eligible for SafeDetach failover", "pod", klog.KObj(p), "why", e.Reason)
			continue
		}
		if p.DeletionTimestamp != nil {
			eligible = append(eligible, p)
		}
		vols[p] = e.Volumes
		key := p.Namespace + "/" + p.Name + "/" + string(p.UID)
		if _, ok := c.eligibleSince[key]; !ok {
			c.eligibleSince[key] = time.Now()
		}
	}
	if len(eligible) == 0 && !manual {
		return nil
	}
	// Storm guard (S5): never start fencing beyond the limit.
	already := Taint(node, contract.QuarantineTaintKey) != nil
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	quarantined := 0
	for _, n := range all {
		if Taint(n, contract.QuarantineTaintKey) != nil {
			quarantined++
		}
	}
	if ok, why := StormGuard(quarantined, len(all), c.opts.MaxFencedNodes, c.opts.MaxFencedNodePercent, already); !ok {
		c.recorder.Eventf(node, v1.EventTypeWarning, "FencingDeferred", "Not fencing node %s: %s", nodeName, why)
		logger.V(2).Info("Storm guard: not fencing", "why", why)
		return fmt.Errorf("storm guard: %s", why)
	}
	// 1. Quarantine first.
	if err := c.quarantine(ctx, node); err != nil {
		return err
	}
	// 2. Fence every attachment of our driver on the node.
	fr, fenceErr := c.fenceNode(ctx, node, fr)
	if fr == nil {
		if fenceErr != nil {
			return fenceErr
		}
	}
	// 3. Force-delete each eligible pod whose every volume is fenced.
	released := false
	for _, p := range eligible {
		if !AllFenced(fr, vols[p]) {
			logger.V(2).Info("Pod waits for its volumes to be fenced", "pod", klog.KObj(p))
			continue
		}
		if c.forceDelete(ctx, p, node, ReasonSafeDetach) {
			key := p.Namespace + "/" + p.Name + "/" + string(p.UID)
			if t, ok := c.eligibleSince[key]; ok {
				failoverDuration.Observe(time.Since(t).Seconds())
				delete(c.eligibleSince, key)
			}
			released = true
		}
	}
	// 4. Let the attach/detach controller detach the fenced volumes now.
	if released || fenceErr == nil {
		if err := c.releaseVolumesInUse(ctx, node, fr); err != nil {
			return err
		}
	}
	return fenceErr
}

func conditionTrue(n *v1.Node, t string) bool {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == t {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func (c *Controller) podsOn(node string) ([]*v1.Pod, error) {
	all, err := c.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*v1.Pod
	for _, p := range all {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out, nil
}

func (c *Controller) safeDetach(driver string) bool {
	d, err := c.drivers.Get(driver)
	return err == nil && d.Annotations[contract.SafeDetachAnnotation] == contract.SafeDetachTrue
}

func (c *Controller) resolve(namespace string) func(string) (*PodVolume, error) {
	return func(claim string) (*PodVolume, error) {
		pvc, err := c.pvcs.PersistentVolumeClaims(namespace).Get(claim)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: %w", namespace, claim, err)
		}
		if pvc.Spec.VolumeName == "" {
			return nil, fmt.Errorf("claim %s/%s is not bound", namespace, claim)
		}
		pv, err := c.pvs.Get(pvc.Spec.VolumeName)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", pvc.Spec.VolumeName, err)
		}
		if pv.Spec.CSI == nil {
			return nil, fmt.Errorf("volume %s is not a CSI volume", pv.Name)
		}
		rwx := false
		for _, m := range pv.Spec.AccessModes {
			if m == v1.ReadWriteMany {
				rwx = true
			}
		}
		return &PodVolume{Driver: pv.Spec.CSI.Driver, VolumeHandle: pv.Spec.CSI.VolumeHandle, PVName: pv.Name, RWX: rwx}, nil
	}
}

func (c *Controller) pvHandle(name string) (string, string) {
	pv, err := c.pvs.Get(name)
	if err != nil || pv.Spec.CSI == nil {
		return "", ""
	}
	return pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
}
