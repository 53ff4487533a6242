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

package failover

import (
	"context"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
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
	"k8s.io/utils/clock"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fencemode"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// Options configure the controller.
type Options struct {
	DriverName string
	// CanFence: the driver advertises UNPUBLISH_FENCE. Without it, the
	// storage backend fences with a plain unpublish when the driver's
	// CSIDriver declares that one revokes access
	// (contract.UnpublishRevokesAccessAnnotation, read live by each fence:
	// fenceMode).
	CanFence bool
	// NonGracefulFailover is the feature gate that enables the failover:
	// the SafeDetach path, the event-driven out-of-service path and fencing.
	// Without it only the release of a node that is back runs.
	NonGracefulFailover bool
	// Timeout bounds every CSI call.
	Timeout time.Duration
	// MaxFencedNodes and MaxFencedNodePercent are the storm guard (0: no
	// limit of that kind); StormGuardNamespace holds its admission Lease.
	MaxFencedNodes       int
	MaxFencedNodePercent int
	StormGuardNamespace  string
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
	// FailoverOptIn: only pods (or namespaces) labelled
	// contract.FailoverLabel=enabled fail over by SafeDetach.
	FailoverOptIn bool
	// Election is how this controller runs for ownership of node-level
	// state; no Identity: it owns it alone (a single controller).
	Election ElectionConfig
	// Backends are the fencing backends in the admin's order
	// (fencingv1alpha1.BackendStorage, BackendPower); empty: storage only.
	Backends []string
	// Power is the power backend (nil: none, e.g. no FenceAgentConfig CRD).
	Power PowerFencer
	// Machine is the machine backend (nil: none, e.g. no Cluster API).
	Machine MachineFencer
	// Clock times the kubelets' heartbeats (nil: the real clock; tests).
	Clock clock.PassiveClock
	// Heartbeats is the watch of the kubelets' Leases that decides whether
	// a node is down, started before this replica leads
	// (nodehealth.Heartbeats). Nil: New makes one, which ObserveHeartbeats
	// or Run starts.
	Heartbeats *nodehealth.Heartbeats
}

// Controller is the failover controller of one driver.
type Controller struct {
	opts     Options
	client   kubernetes.Interface
	frClient *fencingv1alpha1.Client
	// records writes the fence record through frClient; the workers
	// fencing one node at the same time share its writes.
	records  *fencerecord.Recorder
	csi      csiclient.Attacher
	recorder record.EventRecorder
	// declaration reads, live, whether the driver's CSIDriver declares
	// that its unpublish revokes access (fenceMode).
	declaration *fencemode.Reader

	nodes    corelisters.NodeLister
	pvcs     corelisters.PersistentVolumeClaimLister
	pvs      corelisters.PersistentVolumeLister
	drivers  storagelisters.CSIDriverLister
	csinodes storagelisters.CSINodeLister
	ns       corelisters.NamespaceLister
	frs      fencingv1alpha1.Lister
	frCache  cache.GenericLister // for listing every request
	synced   []cache.InformerSynced
	factory  informers.SharedInformerFactory
	dfactory dynamicinformer.DynamicSharedInformerFactory

	queue workqueue.TypedRateLimitingInterface[string]
	pgc   *podgc.GC
	power PowerFencer
	// machine: the machine backend (machinefence.go), nil without one.
	machine MachineFencer
	guard   *stormGuard
	// owner says whether this controller writes node-level state now;
	// election runs for it (nil: always the owner).
	owner    Owner
	election *leaseOwner
	// liveReadValidity: see defaultLiveReadValidity.
	liveReadValidity time.Duration
	// registry: what the other drivers can do.
	registry   *registry
	regFactory informers.SharedInformerFactory
	// heartbeats watches the kubelets' Leases, so that health sees every
	// renewal on its own clock (pkg/nodehealth).
	heartbeats *nodehealth.Heartbeats
	health     *nodehealth.Observer
	// eligible remembers when each pod was first seen eligible, for the
	// failover duration metric; shared by the workers.
	eligible eligibleSince
	// notices: what was said of pods that will not fail over.
	notices notices
	// taints: when each NoExecute taint of each node was first seen, for
	// the evictions Kubernetes lost (evictions.go).
	taints *taintsSeen
}

// eligibleSince is when each pod (by UID) was first seen eligible for
// failover. Workers of different nodes write it concurrently.
type eligibleSince struct {
	mu    sync.Mutex
	since map[types.UID]time.Time
}

func (e *eligibleSince) seen(p *v1.Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.since == nil {
		e.since = map[types.UID]time.Time{}
	}
	if _, ok := e.since[p.UID]; !ok {
		e.since[p.UID] = time.Now()
	}
}

// deleted observes the failover duration of a pod force-deleted.
func (e *eligibleSince) deleted(p *v1.Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t, ok := e.since[p.UID]; ok {
		failoverDuration.Observe(time.Since(t).Seconds())
		delete(e.since, p.UID)
	}
}

// forget drops pods that no longer exist (deleted by anyone), so that the
// map does not grow with every pod that was once eligible.
func (e *eligibleSince) forget(p *v1.Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.since, p.UID)
}

// byNode indexes pods and VolumeAttachments by the node they are on.
const byNode = "spec.nodeName"

// New returns a Controller on the informers of f (shared with the attacher,
// which may start them first) and dyn (FencingRequests). Its client writes.
func New(opts Options, client kubernetes.Interface, f informers.SharedInformerFactory, dyn dynamicinformer.DynamicSharedInformerFactory, frClient *fencingv1alpha1.Client, csi csiclient.Attacher, recorder record.EventRecorder) (*Controller, error) {
	podsByNode := cache.Indexers{byNode: func(o interface{}) ([]string, error) {
		if p, ok := o.(*v1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}
	vasByNode := cache.Indexers{byNode: func(o interface{}) ([]string, error) {
		if va, ok := o.(*storagev1.VolumeAttachment); ok {
			return []string{va.Spec.NodeName}, nil
		}
		return nil, nil
	}}
	if err := addIndexers(f.Core().V1().Pods().Informer(), podsByNode); err != nil {
		return nil, err
	}
	if err := addIndexers(f.Storage().V1().VolumeAttachments().Informer(), vasByNode); err != nil {
		return nil, err
	}
	if len(opts.Backends) == 0 {
		opts.Backends = []string{fencingv1alpha1.BackendStorage}
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	// Registered before any handler can set a metric: a lazy metric set
	// while it is being registered is a data race.
	RegisterMetrics()
	initDriverMetrics(opts.DriverName)
	c := &Controller{
		power:            opts.Power,
		machine:          opts.Machine,
		liveReadValidity: defaultLiveReadValidity,
		opts:             opts, client: client, frClient: frClient, records: fencerecord.NewRecorder(frClient), csi: csi, recorder: recorder,
		declaration: fencemode.NewReader(client.StorageV1(), opts.DriverName, recorder),
		nodes:       f.Core().V1().Nodes().Lister(),
		pvcs:        f.Core().V1().PersistentVolumeClaims().Lister(), pvs: f.Core().V1().PersistentVolumes().Lister(),
		drivers:  f.Storage().V1().CSIDrivers().Lister(),
		csinodes: f.Storage().V1().CSINodes().Lister(),
		ns:       f.Core().V1().Namespaces().Lister(),
		factory:  f, dfactory: dyn,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryIntervalStart, opts.RetryIntervalMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csi-fence-failover"}),
		guard:      &stormGuard{client: client, namespace: opts.StormGuardNamespace},
		owner:      AlwaysOwner{},
		registry:   newRegistry(client, opts.StormGuardNamespace, opts.Clock),
		taints:     newTaintsSeen(opts.Clock),
		regFactory: newRegistryInformers(client, opts.StormGuardNamespace, opts.Resync),
	}
	c.heartbeats = opts.Heartbeats
	if c.heartbeats == nil {
		var err error
		if c.heartbeats, err = nodehealth.NewHeartbeats(client, opts.Resync, opts.Clock); err != nil {
			return nil, err
		}
	}
	c.health = c.heartbeats.Observer
	c.synced = append(c.synced, c.heartbeats.HasSynced)
	c.pgc = &podgc.GC{Client: client, Recorder: recorder, Health: c.health}
	if opts.Election.Identity != "" {
		c.election = &leaseOwner{}
		c.owner = c.election
	}
	leases := c.regFactory.Coordination().V1().Leases()
	c.registry.leases = leases.Lister().Leases(opts.StormGuardNamespace)
	// A driver registering (or changing what it can) may make pods on any
	// node able to fail over.
	if _, err := leases.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o interface{}) {
			c.registry.observe(o)
			c.enqueueAll()
		},
		UpdateFunc: func(_, o interface{}) {
			c.registry.observe(o)
			c.enqueueAll()
		},
	}); err != nil {
		return nil, err
	}
	c.synced = append(c.synced, leases.Informer().HasSynced)
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(o interface{}) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*v1.Pod); ok {
				c.eligible.forget(p)
				c.notices.forget(p.UID)
			}
		},
	}); err != nil {
		return nil, err
	}
	frInformer := dyn.ForResource(fencingv1alpha1.Resource)
	c.frCache = frInformer.Lister()
	c.frs = fencingv1alpha1.NewLister(c.frCache)
	byNode := func(node string) { c.queue.Add(node) }
	handlers := []struct {
		inf    cache.SharedIndexInformer
		key    func(obj interface{}) string
		update func(old, new interface{}) bool // nil: every update matters
	}{
		{f.Core().V1().Nodes().Informer(), func(o interface{}) string { return objName(o) }, nil},
		{f.Core().V1().Pods().Informer(), func(o interface{}) string {
			if p, ok := o.(*v1.Pod); ok {
				return p.Spec.NodeName
			}
			return ""
		}, nil},
		{f.Storage().V1().VolumeAttachments().Informer(), func(o interface{}) string {
			if va, ok := o.(*storagev1.VolumeAttachment); ok {
				return va.Spec.NodeName
			}
			return ""
		}, nil},
		{frInformer.Informer(), func(o interface{}) string { return objName(o) }, recordChangeMatters},
	}
	for _, h := range handlers {
		key, update := h.key, h.update
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(o interface{}) { enqueue(key(o), byNode) },
			UpdateFunc: func(old, o interface{}) {
				if update == nil || update(old, o) {
					enqueue(key(o), byNode)
				}
			},
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
	for _, inf := range []cache.SharedIndexInformer{f.Core().V1().Namespaces().Informer(), f.Core().V1().PersistentVolumeClaims().Informer(), f.Core().V1().PersistentVolumes().Informer(), f.Storage().V1().CSIDrivers().Informer(), f.Storage().V1().CSINodes().Informer()} {
		c.synced = append(c.synced, inf.HasSynced)
	}
	return c, nil
}

// recordChangeMatters says whether an update of a FencingRequest is news for
// the node's sync: its spec or deletion changed (an admin), or an entry was
// added, removed, confirmed fenced or cleaned (any driver, the node agent). A
// new fence error, phase or condition is not: those are this controller's
// own writes (or another driver's failures), and reacting to them would turn
// a driver that keeps refusing, with a message that varies, into a retry
// loop that bypasses the per-node backoff.
func recordChangeMatters(oldObj, newObj interface{}) bool {
	old, err1 := fencingv1alpha1.FromUnstructured(oldObj)
	cur, err2 := fencingv1alpha1.FromUnstructured(newObj)
	if err1 != nil || err2 != nil {
		return true
	}
	if old.Spec != cur.Spec || !old.DeletionTimestamp.Equal(cur.DeletionTimestamp) ||
		!slices.Equal(old.Finalizers, cur.Finalizers) || len(old.Status.Volumes) != len(cur.Status.Volumes) {
		return true
	}
	for i, v := range cur.Status.Volumes {
		o := old.Status.Volumes[i]
		if o.Driver != v.Driver || o.VolumeHandle != v.VolumeHandle || !o.FencedTime.Equal(v.FencedTime) ||
			!o.CleanedTime.Equal(v.CleanedTime) || !o.StartedTime.Equal(v.StartedTime) {
			return true
		}
	}
	return false
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

// addIndexers adds indexers to a shared informer unless another user of it
// added the same already.
func addIndexers(inf cache.SharedIndexInformer, idx cache.Indexers) error {
	for name := range idx {
		if _, ok := inf.GetIndexer().GetIndexers()[name]; ok {
			return nil
		}
	}
	return inf.AddIndexers(idx)
}

// Run runs workers until ctx is done, then waits for them to return and
// only then ends its run for the node-fencing Lease (released if held): a
// sync in flight when the process is told to stop finishes before another
// controller can own node-level state, and the next owner need not wait for
// the Lease to expire. Run returns once the Lease is released.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	if !c.startInformers(ctx) {
		return
	}
	logger.Info("Starting failover controller", "driver", c.opts.DriverName, "nonGracefulFailover", c.opts.NonGracefulFailover, "canFence", c.opts.CanFence,
		"fenceMode", c.cachedFenceMode())
	// Tell the owner of node-level state, whichever driver's it is, what
	// this driver can do. Without it (no RBAC) another driver's owner
	// fails over no pod with a volume of this driver: safe, and said here.
	c.registerDriver(ctx)
	go wait.UntilWithContext(ctx, c.registerDriver, registrationRenewal)
	var election sync.WaitGroup
	electionCtx, endElection := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		endElection()
		election.Wait()
	}()
	if c.election != nil {
		election.Go(func() { c.election.runElection(electionCtx, c.opts.Election, c.enqueueAll) })
	}
	var running sync.WaitGroup
	for i := 0; i < workers; i++ {
		running.Go(func() { wait.UntilWithContext(ctx, c.worker, 0) })
	}
	// A periodic pass catches what no event announces (time passing).
	go wait.UntilWithContext(ctx, c.resync, c.opts.Resync)
	// The pods that would not fail over are counted now and then: time
	// passing changes that too (a registration going stale).
	go wait.UntilWithContext(ctx, c.updateProtection, protectionPeriod)
	<-ctx.Done()
	c.queue.ShutDown()
	running.Wait()
}

// registerDriver tells the owner of node-level state, whichever driver's it
// is, what this driver can do (registry.go); Run renews it. A driver whose
// owner declared that its unpublish revokes access can fence: its mode
// comes from the CSIDriver cache (the fences themselves read it live), and
// a declaration with a value other than "true" is said here, once per
// change, in the log and in an Event on the CSIDriver.
func (c *Controller) registerDriver(ctx context.Context) {
	d, err := c.drivers.Get(c.opts.DriverName)
	if err != nil {
		d = nil
	}
	mode := c.declaration.Cached(ctx, d, c.opts.CanFence)
	if err := c.registry.register(ctx, registration{driver: c.opts.DriverName, identity: c.opts.Election.Identity, canFence: mode.Fences(), mode: mode,
		limits: guardLimits{maxNodes: c.opts.MaxFencedNodes, maxPercent: c.opts.MaxFencedNodePercent},
		config: protection.ConfigAnnotations(c.opts.NonGracefulFailover, c.opts.FailoverOptIn, c.opts.Backends, c.opts.Timeout)}); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot register the driver's capabilities: another driver's sidecar owning node fencing will not fail over pods with volumes of this driver",
			"lease", contract.RegistrationLeaseName(c.opts.DriverName), "namespace", c.opts.StormGuardNamespace)
	}
}

// ObserveHeartbeats starts timing the kubelets' heartbeat Leases, until ctx
// is done. A node is down only once its Lease has stayed unchanged for a
// lease duration as this process saw it (pkg/nodehealth): a replica that
// started watching only when it took over would wait a whole lease
// duration before it could fail over any node, however long that node has
// been silent. So every replica calls it at start, standby or not, and Run
// finds the clock already running. It does not block.
func (c *Controller) ObserveHeartbeats(ctx context.Context) {
	c.heartbeats.Start(ctx.Done())
}

// startInformers starts the informers and waits for their caches.
func (c *Controller) startInformers(ctx context.Context) bool {
	c.factory.Start(ctx.Done())
	c.dfactory.Start(ctx.Done())
	c.regFactory.Start(ctx.Done())
	c.heartbeats.Start(ctx.Done())
	return cache.WaitForNamedCacheSync("csi-fence-failover", ctx.Done(), c.synced...)
}

// resync queues every node and every node with a record again, except those
// waiting out their backoff after a failed sync: they come back when it
// ends, and a periodic pass must not turn a failing node into a fixed-rate
// retry.
func (c *Controller) resync(context.Context) {
	c.enqueueAll()
}

// enqueueAll queues every node and every node with a record (see resync).
func (c *Controller) enqueueAll() {
	add := func(node string) {
		if c.queue.NumRequeues(node) == 0 {
			c.queue.Add(node)
		}
	}
	nodes, _ := c.nodes.List(labels.Everything())
	quarantined := 0
	for _, n := range nodes {
		add(n.Name)
		if nodestate.Taint(n, contract.QuarantineTaintKey) != nil {
			quarantined++
		}
	}
	fencedNodes.Set(float64(quarantined))
	frs, _ := c.frCache.List(labels.Everything())
	for _, o := range frs {
		add(objName(o))
	}
}

func (c *Controller) pvHandle(name string) (string, string) {
	pv, err := c.pvs.Get(name)
	if err != nil || pv.Spec.CSI == nil {
		return "", ""
	}
	return pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
}

func (c *Controller) vasOn(node string) ([]*storagev1.VolumeAttachment, error) {
	return onNode[*storagev1.VolumeAttachment](c.factory.Storage().V1().VolumeAttachments().Informer(), node)
}
