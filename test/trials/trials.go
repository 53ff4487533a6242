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

// Package trials runs randomized failover trials on the real control plane:
// each trial fails a node under a fault schedule whose random choices come
// from a seed (printed, and enough to replay the trial), follows the failover
// to its end, brings the node back, and then checks the invariants of
// DESIGN.md section 6 from the simulated array, the API and the apiserver's
// audit log.
package trials

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// A Schedule is one kind of fault: how the node fails and what else goes
// wrong during its failover. Its random choices come from the trial's rng.
type Schedule struct {
	Name string
	// Partition: the node is cut off with its workload still writing;
	// otherwise it is powered off.
	Partition bool
	// During runs beside the failover, from the moment the node is seen
	// NotReady; it returns the steps it took, for the trial's log.
	During func(ctx context.Context, t *Trial) ([]string, error)
	// AfterReturn runs once the node was powered on again (its cleanup).
	AfterReturn func(ctx context.Context, t *Trial) ([]string, error)
	// SameNodeOK: the pod may end up running on the failed node again (it
	// came back before its pod was moved).
	SameNodeOK bool
	// Victims is how many nodes fail in the same second, each with a
	// replica of its own (0: one).
	Victims int
	// AttacherArgs: the controller role runs the trial with these flags
	// (restored after).
	AttacherArgs []string
	// MaxQuarantined: the storm guard's limit the trial checks (S5): never
	// more failed nodes quarantined at once (0: no check).
	MaxQuarantined int
	// SecondDriver: each replica also has a volume of a second driver (with
	// a sidecar of its own), which refuses its first fences.
	SecondDriver bool
	// DetachDriver: each replica also has a volume of a driver whose
	// CSIDriver declares that its unpublish revokes access (the mock in
	// --detach=revokes, a sidecar of its own): the product fences it with
	// a plain ControllerUnpublishVolume (fencebydetach.go).
	DetachDriver bool
	// Before runs once the replicas run, before the node fails (a pod of
	// its own on the node, a standby controller).
	Before func(ctx context.Context, t *Trial) ([]string, error)
	// Check returns the broken invariants of the schedule's own, beside
	// the checks of every trial.
	Check func(ctx context.Context, t *Trial) []string
	// Prepare runs first, before the controller is restarted with
	// AttacherArgs: what those flags need in the cluster (Cluster API for
	// the machine backend, started once per run).
	Prepare func(ctx context.Context, t *Trial) ([]string, error)
	// Real, if set, runs the schedule on real nodes too (RunReal), with
	// these hooks in place of the ones above, which drive the processes a
	// KWOK node's product runs; nil: KWOK nodes only.
	Real *RealHooks
	// RealOnly: the schedule has no KWOK form (a real node's process the
	// simulated kubelet does not have).
	RealOnly bool
}

// Schedules are the fault schedules, in the order a fixed run covers them.
var Schedules = []Schedule{
	{Name: "power-off", Real: &RealHooks{}},
	{Name: "partition", Partition: true, Real: &RealHooks{}},
	{Name: "power-off+kill-controller", During: killController, Real: &RealHooks{During: realKillController}},
	{Name: "partition+kill-controller", Partition: true, During: killController, Real: &RealHooks{During: realKillController}},
	{Name: "power-off+return-mid-fence", During: returnMidFence, SameNodeOK: true, Real: &RealHooks{Before: realSlowFence(2*time.Second, 5*time.Second), During: realReturnMidFence}},
	{Name: "partition+leader-loss", Partition: true, During: leaderLoss, Real: &RealHooks{During: realLeaderLoss}},
	{Name: "power-off+driver-faults", During: driverFaults, Real: &RealHooks{During: driverFaults}},
	{Name: "power-off+reboot-during-cleanup", AfterReturn: rebootDuringCleanup, Real: &RealHooks{AfterReturn: realRebootDuringCleanup}},
	{Name: "power-off+apiserver-restart", During: restartAPIServer},
	{Name: "two-nodes", Victims: 2, Real: &RealHooks{}},
	{Name: "two-nodes+storm-guard", Victims: 2, MaxQuarantined: 1, AttacherArgs: []string{"--max-fenced-nodes=1", "--max-fenced-node-percent=0"}},
	{Name: "power-off+two-drivers", SecondDriver: true, Real: &RealHooks{}},
	{Name: "power-off+node-deleted-and-reregistered", During: nodeDeletedAndReregistered, SameNodeOK: true},
	{Name: "power-off+rolling-update", During: rollingUpdate, Real: &RealHooks{Before: realSlowFence(2*time.Second, 4500*time.Millisecond), During: realRollingUpdate}},
	{Name: "power-off+unattached-storage", Before: unattachedStorage, Check: checkUnattached},
	{Name: "partition+skewed-kubelet", Partition: true, During: skewedKubelet, SameNodeOK: true},
	{Name: "power-off+flap-during-slow-fence", During: flapDuringSlowFence},
	{Name: "power-off+cut-off-again-while-quarantined", During: holdCleanup, AfterReturn: cutOffAgainWhileQuarantined, Check: checkCutOffAgain},
	{Name: "power-off+apiserver-restart-at-eviction", During: apiserverRestartAtEviction},
	{Name: "power-off+leader-loss-standby-first", Before: standbyBeforeFailure, During: leaderLossStandbyFirst},
	{Name: "power-off+new-node-id", During: newNodeIDAfterFence, AfterReturn: newNodeIDReturn, Check: checkNewNodeID},
	{Name: "power-off+attacher-fence-beside-unsent-fence", Before: manyVolumePod, During: attacherBesideUnsentFence, AfterReturn: manyVolumePodBack, Check: removeManyVolumePod, SameNodeOK: true},
	{Name: "power-off+stale-registration-across-restart", Before: staleRegistrationBefore, During: staleRegistrationDuring, AfterReturn: staleRegistrationReturn, Check: checkStaleRegistration},
	{Name: "partition+machine-fence-infra-vanishes", Partition: true, SameNodeOK: true, AttacherArgs: machineArgs,
		Prepare: startClusterAPI, Before: machineBefore, During: infraVanishes, Check: checkMachineFence},
	{Name: "partition+machine-fence-infra-moved", Partition: true, SameNodeOK: true, AttacherArgs: machineArgs,
		Prepare: startClusterAPI, Before: machineBefore, During: infraMoved, Check: checkMachineFence},
	{Name: "power-off+detach-fence-kill-after-intent", DetachDriver: true, During: detachKillAfterIntent, Check: checkDetachFence},
	{Name: "power-off+detach-fence-return-mid-unpublish", DetachDriver: true, During: detachReturnMidUnpublish, Check: checkDetachFence, SameNodeOK: true},
	{Name: "power-off+detach-fence-hangs-past-timeout", DetachDriver: true, During: detachHangsPastTimeout, Check: checkDetachFence},
	{Name: "power-off+detach-fence-node-deleted-mid-unpublish", DetachDriver: true, During: detachNodeDeletedMidUnpublish, Check: checkDetachFence, SameNodeOK: true},
	{Name: "power-off+node-plugin-crash-during-cleanup", RealOnly: true, Real: &RealHooks{AfterReturn: realNodePluginCrash}},
}

// secondDriverName is the second driver of the two-drivers schedule; added
// once per run, it stays (and may own node-level state from then on).
const secondDriverName = "trial2.csi-fence.io"

// MockArgs are the flags the mock driver's instances need in a trial: every
// request logged (the fence witness, fenceRPCs).
var MockArgs = []string{"--v=5"}

// ByName returns the schedule called name.
func ByName(name string) (Schedule, bool) {
	i := slices.IndexFunc(Schedules, func(s Schedule) bool { return s.Name == name })
	if i < 0 {
		return Schedule{}, false
	}
	return Schedules[i], true
}

// Trial is one trial in progress.
type Trial struct {
	Seed     int64
	Schedule Schedule
	Rng      *rand.Rand
	Env      *scenario.Env
	Victim   string
	Volume   string

	c *framework.Cluster
	p *framework.Product
	// real is the real nodes' deployment the trial runs on (RunReal; nil
	// on KWOK nodes, which run p); ns is the namespace of the trial's pods.
	real *RealEnv
	ns   string

	victims []*victim
	// procMu serializes what the schedule and the supervisor do to the
	// product's processes.
	procMu     sync.Mutex
	supervised []string // what the supervisor did
	// pods are the nodes the trial's pods were bound to (on real nodes).
	pods podNodes
	// slowLatency is the fence's latency a realSlowFence hook set.
	slowLatency time.Duration
	mu          sync.Mutex
	transitions map[string][]transition // by node
	// quarantined: the failed nodes quarantined now; mostQuarantined: the
	// most at once.
	quarantined     map[string]bool
	mostQuarantined int
	// renewals: when the trial saw each new renewTime of a node's
	// heartbeat Lease (lastRenew: the renewTime it saw last).
	renewals  map[string][]time.Time
	lastRenew map[string]time.Time
	// fencingComplete: when a node was seen with FencingComplete=True;
	// outOfService: with the out-of-service taint.
	fencingComplete map[string][]time.Time
	outOfService    map[string][]time.Time
	// detach is the detach driver's part of the trial (DetachDriver).
	detach *detachRun
	// extra is a schedule's own state (its checks read it); found, the
	// invariants it saw broken while it ran; stall, how long the controller
	// was leaderless (rolling-update).
	extra any
	found []string
	stall time.Duration
	// stop ends the trial's watches.
	stop <-chan struct{}
	// ends undo what a schedule changed in a real deployment (atEnd).
	ends []func(context.Context) error
}

// stateDir is the mock array's state directory (its fault store too).
func (t *Trial) stateDir() string {
	if t.real != nil {
		return t.real.Deployment.StateDir
	}
	return t.p.StateDir
}

// Result is what a trial found.
type Result struct {
	Seed     int64
	Schedule string
	Steps    []string
	// Recovery: node failure -> replacement attached elsewhere (or again).
	Recovery time.Duration
	// Failover: pod eligible (Terminating) -> attached elsewhere.
	Failover time.Duration
	// Stall: the leader terminated -> its Leases held by the standby
	// (rolling-update; 0 otherwise).
	Stall time.Duration
	// Problems are broken invariants and things left behind; Err is a
	// trial that could not run to its end (also a failure).
	Problems []string
	Err      error
}

// Failed says whether the trial broke anything.
func (r Result) Failed() bool { return r.Err != nil || len(r.Problems) > 0 }

// Run runs one trial of s with seed on the cluster and product (which must
// run the mock array as a witness, the default).
func Run(ctx context.Context, c *framework.Cluster, p *framework.Product, log framework.Logger, s Schedule, seed int64) (res Result) {
	t := &Trial{Seed: seed, Schedule: s, Rng: rand.New(rand.NewSource(seed)), c: c, p: p}
	return t.runChecked(ctx, func(res *Result) ([]string, error) { return t.run(ctx, log, res) }, func() error {
		// A clean trial's nodes go, so that a long run does not carry
		// every trial's node plugins and node agents (past about 40
		// trials, its later trials failed on setup timeouts); a failed
		// one's stay for a look.
		if t.Env == nil {
			return nil
		}
		return t.Env.Teardown(ctx, teardownTimeout)
	})
}

// runChecked runs a trial (run) and then the checks every trial gets,
// whichever nodes it runs on; a trial that passed is torn down.
func (t *Trial) runChecked(ctx context.Context, run func(*Result) ([]string, error), teardown func() error) (res Result) {
	res = Result{Seed: t.Seed, Schedule: t.Schedule.Name}
	before, err := t.counts()
	if err != nil {
		res.Err = err
		return res
	}
	started := time.Now()
	res.Steps, res.Err = run(&res)
	t.mu.Lock()
	res.Steps = append(res.Steps, t.supervised...)
	res.Problems = append(res.Problems, t.found...)
	res.Stall = t.stall
	t.mu.Unlock()
	res.Problems = append(res.Problems, t.check(ctx, before, started)...)
	if !res.Failed() {
		if err := teardown(); err != nil {
			res.Steps = append(res.Steps, "teardown (harness, the trial passed): "+err.Error())
		}
	}
	return res
}

// teardownTimeout bounds the wait for a finished trial's pods to go and
// its volumes to be detached.
const teardownTimeout = 90 * time.Second

// victim is a node that fails in a trial, with the replica on it.
type victim struct {
	node, volume string
	// volume2 is the second driver's volume of the replica on real nodes
	// (SecondDriver; on KWOK nodes, the scenario's DriverVolumes).
	volume2 string
	replica int
	pod     string // the replica's pod name
	// On real nodes: uid is the first pod's; down, the node failed and
	// not back yet; newNode, the replacement's node.
	uid     types.UID
	down    bool
	newNode string
	// backEarly: its node was brought back before its replacement ran,
	// which may then run there again (realnodes.go, heldOnFailedNode).
	backEarly bool
	rec       *timeline.Recorder
	writer    *scenario.Writer
	moved     bool
}

func (t *Trial) run(ctx context.Context, log framework.Logger, res *Result) ([]string, error) {
	var steps []string
	if t.Schedule.Prepare != nil {
		more, err := t.Schedule.Prepare(ctx, t)
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
	}
	if args := t.Schedule.AttacherArgs; len(args) > 0 {
		// Every driver's controller gets the flags, as an operator sets
		// them on every sidecar: node-level state (the storm guard, power
		// and machine fences) is the owner's, whichever driver's controller
		// holds the node-fencing Lease, and drivers added by earlier trials
		// (two-drivers, stale-registration, the detach driver) compete for
		// it (seeds 83023, 83024: the machine fence never tried, its owner
		// run without --fencing-backends=machine).
		restore := func() {
			t.procMu.Lock()
			defer t.procMu.Unlock()
			for _, d := range t.p.Drivers {
				if err := d.RestartAttacher(ctx); err != nil {
					res.Problems = append(res.Problems, "restoring the flags of the controller of "+d.Name+": "+err.Error())
				}
			}
		}
		for _, d := range t.p.Drivers {
			if err := d.RestartAttacher(ctx, args...); err != nil {
				restore()
				return nil, err
			}
		}
		steps = append(steps, "controllers with "+strings.Join(args, " "))
		defer restore()
	}
	n := max(t.Schedule.Victims, 1)
	opts := scenario.Options{Prefix: fmt.Sprintf("t%d", t.Seed%100000), Nodes: n + 2, Replicas: n}
	if t.Schedule.SecondDriver {
		d2, more, err := t.secondDriver(ctx)
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
		opts.Drivers = []*framework.Driver{t.p.Driver, d2}
	}
	var dd *framework.Driver
	if t.Schedule.DetachDriver {
		var err error
		if dd, err = t.detachDriver(ctx); err != nil {
			return steps, err
		}
		opts.Drivers = []*framework.Driver{t.p.Driver, dd}
	}
	env, err := scenario.SetupWith(ctx, t.c, t.p, log, opts)
	if err != nil {
		return steps, err
	}
	t.Env, t.ns = env, env.NS
	stop := make(chan struct{})
	defer close(stop)
	t.stop = stop
	go t.supervise(ctx, stop)
	for i := 0; i < n; i++ {
		node, err := env.WaitAttached(ctx, i, "", 30*time.Second)
		if err != nil {
			return steps, err
		}
		if slices.ContainsFunc(t.victims, func(v *victim) bool { return v.node == node }) {
			return steps, fmt.Errorf("replicas %d and %d on the same node %s", t.victims[0].replica, i, node)
		}
		v := &victim{node: node, volume: env.Volumes[i], replica: i, pod: env.PodName(i)}
		v.rec = timeline.New(timeline.Target{Node: node, Namespace: env.NS, Pod: env.PodName(i), PVName: v.volume}, nil)
		if err := v.rec.Watch(t.c.Client, t.c.Dynamic, stop); err != nil {
			return steps, err
		}
		if err := t.watchReady(node, stop); err != nil {
			return steps, err
		}
		if err := t.watchLease(node, stop); err != nil {
			return steps, err
		}
		v.writer = scenario.StartWriter(ctx, t.p.Nodes[node], v.volume, 100*time.Millisecond)
		defer v.writer.Stop()
		if err := framework.WaitFor(ctx, 10*time.Second, "first write of the workload", func(context.Context) (bool, error) {
			return v.writer.Accepted.Load() > 0, nil
		}); err != nil {
			return steps, err
		}
		t.victims = append(t.victims, v)
	}
	t.Victim, t.Volume = t.victims[0].node, t.victims[0].volume
	if dd != nil {
		t.detach = &detachRun{driver: dd, volume: env.DriverVolumes[dd.Name][t.victims[0].replica], since: time.Now()}
		steps = append(steps, "volume "+t.detach.volume+" of "+dd.Name+" (fenced by its detach) beside "+t.Volume)
	}
	if t.Schedule.Before != nil {
		more, err := t.Schedule.Before(ctx, t)
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
	}

	how := "power-off"
	if t.Schedule.Partition {
		how = "partition (its workload keeps writing)"
	}
	for _, v := range t.victims {
		v.rec.Mark(timeline.NodeDown, v.node+" "+how)
		steps = append(steps, how+" of "+v.node)
		node := t.p.Node(v.node)
		var err error
		if t.Schedule.Partition {
			err = node.Partition(ctx)
		} else {
			v.writer.Stop()
			err = node.PowerOff(ctx)
		}
		if err != nil {
			return steps, err
		}
	}
	for _, v := range t.victims {
		if err := t.c.WaitNodeReady(ctx, v.node, false, 60*time.Second); err != nil {
			return steps, err
		}
	}
	if t.Schedule.During != nil {
		more, err := t.Schedule.During(ctx, t)
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
	}
	// Each replica runs elsewhere (or, when its node came back first,
	// anywhere), and then its node is powered on: under a storm guard, the
	// next node is fenced only once the first is back and released.
	err = framework.WaitFor(ctx, 300*time.Second, "every replica running elsewhere", func(ctx context.Context) (bool, error) {
		for _, v := range t.victims {
			if v.moved {
				continue
			}
			notOn := v.node
			if t.Schedule.SameNodeOK {
				notOn = ""
			}
			newNode, err := env.WaitAttached(ctx, v.replica, notOn, time.Second)
			if err != nil || newNode == "" {
				continue
			}
			v.rec.Mark(timeline.AttachedElsewhere, "on "+newNode)
			if err := t.p.Nodes[newNode].Write(ctx, v.volume); err != nil {
				return false, fmt.Errorf("the replacement cannot write to its volume: %w", err)
			}
			v.moved = true
			v.writer.Stop()
			if d, ok := v.rec.Since(timeline.NodeDown, timeline.AttachedElsewhere); ok {
				res.Recovery = max(res.Recovery, d)
			}
			if d, ok := v.rec.Since(timeline.PodEvicted, timeline.AttachedElsewhere); ok {
				res.Failover = max(res.Failover, d)
			}
			if !t.ready(v.node, time.Now()) {
				steps = append(steps, "power on "+v.node)
				if err := env.PowerOn(ctx, v.node); err != nil {
					return false, err
				}
			}
		}
		return !slices.ContainsFunc(t.victims, func(v *victim) bool { return !v.moved }), nil
	})
	if err != nil {
		return steps, err
	}
	if t.Schedule.AfterReturn != nil {
		more, err := t.Schedule.AfterReturn(ctx, t)
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
	}
	return steps, t.waitSettled(ctx)
}

// supervise restarts a controller that exited on its own, as its kubelet
// restarts a container: external-attacher's leader election exits the
// process when it cannot renew its Lease (an apiserver down longer than
// --leader-election-renew-deadline). It restarts the control plane's
// kube-controller-manager, kube-scheduler and KWOK the same way (their
// kubelet would): kube-scheduler exits when a slow apiserver restart leaves
// its cache inconsistent, and a run without it schedules nothing (seed
// 80052).
func (t *Trial) supervise(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	failed := map[string]int{} // failed restarts since the last success, by driver
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		t.procMu.Lock()
		restarted, err := t.c.RestartCrashed()
		if len(restarted) > 0 || err != nil {
			t.mu.Lock()
			t.supervised = append(t.supervised, restarted...)
			if err != nil {
				t.supervised = append(t.supervised, "restarting the control plane: "+err.Error())
			}
			t.mu.Unlock()
		}
		for _, d := range t.drivers() {
			// A process that failed to start (the apiserver still down)
			// is retried at the next tick, as a crash loop is.
			if d.Attacher != nil && !d.Attacher.Unexpected() {
				continue
			}
			if err := d.StartAttacher(ctx); err != nil {
				failed[d.Name]++
				continue
			}
			t.mu.Lock()
			t.supervised = append(t.supervised, fmt.Sprintf("controller of %s exited on its own; restarted (%d failed attempts before, logs in %s/logs)", d.Name, failed[d.Name], t.c.WorkDir))
			t.mu.Unlock()
			failed[d.Name] = 0
		}
		t.procMu.Unlock()
	}
}

// drivers are the product's drivers the harness runs (none on real nodes,
// whose kubelets run the product).
func (t *Trial) drivers() []*framework.Driver {
	if t.p == nil {
		return nil
	}
	return t.p.Drivers
}

// watchReady records node's Ready transitions as the API shows them.
func (t *Trial) watchReady(node string, stop <-chan struct{}) error {
	lw := cache.NewListWatchFromClient(t.c.Client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", node))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	on := func(o interface{}) {
		if n, ok := o.(*corev1.Node); ok {
			t.observe(n.Name, framework.NodeReady(n), nodeTalking(n), framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule), fencingComplete(n))
			if framework.HasTaint(n, contract.OutOfServiceTaintKey, corev1.TaintEffectNoExecute) {
				t.mu.Lock()
				if t.outOfService == nil {
					t.outOfService = map[string][]time.Time{}
				}
				t.outOfService[n.Name] = append(t.outOfService[n.Name], time.Now())
				t.mu.Unlock()
			}
		}
	}
	// A deleted Node runs nothing: no kubelet reports for it.
	gone := func(interface{}) { t.observe(node, false, false, false, false) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o interface{}) { on(o) }, DeleteFunc: gone}); err != nil {
		return err
	}
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		return fmt.Errorf("node %s: cache not synced", node)
	}
	return nil
}

// transition is a node seen Ready (or not), and talking (or not: its Ready
// condition Unknown, or the Node deleted), from At on.
type transition struct {
	At      time.Time
	Ready   bool
	Talking bool
}

func (t *Trial) observe(node string, ready, talking, quarantined, complete bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.transitions == nil {
		t.transitions, t.quarantined, t.fencingComplete = map[string][]transition{}, map[string]bool{}, map[string][]time.Time{}
	}
	if complete {
		t.fencingComplete[node] = append(t.fencingComplete[node], time.Now())
	}
	t.quarantined[node] = quarantined
	now := 0
	for _, q := range t.quarantined {
		if q {
			now++
		}
	}
	t.mostQuarantined = max(t.mostQuarantined, now)
	trs := t.transitions[node]
	if n := len(trs); n == 0 || trs[n-1].Ready != ready || trs[n-1].Talking != talking {
		t.transitions[node] = append(trs, transition{At: time.Now(), Ready: ready, Talking: talking})
	}
}

// ready says whether node was seen Ready at the time at.
func (t *Trial) ready(node string, at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := true
	for _, tr := range t.transitions[node] {
		if tr.At.After(at) {
			break
		}
		r = tr.Ready
	}
	return r
}

// counts are the safety violations and refused unsafe requests of every
// driver's array.
func (t *Trial) counts() (map[string]int64, error) {
	arrays := map[string]*array.Array{}
	if t.real != nil {
		for _, d := range t.real.deployments() {
			a, err := d.Array()
			if err != nil {
				return nil, err
			}
			arrays[d.Driver] = a
		}
	} else {
		for _, d := range t.p.Drivers {
			arrays[d.Name] = d.Array
		}
	}
	out := map[string]int64{}
	for name, a := range arrays {
		s, err := a.Snapshot()
		if err != nil {
			return nil, err
		}
		for k, v := range s.CountViolations() {
			out[name+" "+k] += int64(v)
		}
		for k, v := range s.RefusedUnsafe() {
			out[name+" refused "+k] += v
		}
	}
	return out, nil
}

// secondDriver returns the second driver, added on first use, set to refuse
// its next fences a random number of times.
func (t *Trial) secondDriver(ctx context.Context) (*framework.Driver, []string, error) {
	var d *framework.Driver
	for _, x := range t.p.Drivers {
		if x.Name == secondDriverName {
			d = x
		}
	}
	if d == nil {
		var err error
		if d, err = t.p.AddDriver(ctx, framework.DriverOptions{Name: secondDriverName, MockArgs: MockArgs}); err != nil {
			return nil, nil, err
		}
	}
	n := 1 + t.Rng.Intn(3)
	if err := faults.NewStore(d.StateDir).Set("ControllerUnpublishVolume", faults.Fault{Code: codes.FailedPrecondition, Count: n}); err != nil {
		return nil, nil, err
	}
	return d, []string{fmt.Sprintf("second driver %s refuses its next %d fences", d.Name, n)}, nil
}

// productUser is the controller role's ServiceAccount in the harness.
const productUser = "system:serviceaccount:default:csi-fence-attacher"

// check returns every invariant the trial broke: new violations on the
// array (S1, S2) and unsafe requests it had to refuse, a pod of the trial
// deleted by the product while its node was seen Ready (S3), and, once the
// node is back, anything left behind (S6).
func (t *Trial) check(ctx context.Context, before map[string]int64, started time.Time) []string {
	var problems []string
	after, err := t.counts()
	if err != nil {
		return []string{err.Error()}
	}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			problems = append(problems, fmt.Sprintf("array: %d new %s", d, k))
		}
	}
	if t.ns == "" {
		return problems
	}
	events, err := t.c.AuditEvents()
	if err != nil {
		return append(problems, err.Error())
	}
	t.mu.Lock()
	most := t.mostQuarantined
	t.mu.Unlock()
	if lim := t.Schedule.MaxQuarantined; lim > 0 && most > lim {
		problems = append(problems, fmt.Sprintf("S5: %d nodes quarantined at once, limit %d", most, lim))
	}
	for _, v := range t.victims {
		for _, e := range events {
			if e.User == productUser && e.Verb == "delete" && e.Resource == "pods" && e.Namespace == t.ns &&
				e.Name == v.pod && e.Time.After(started) && e.Code < 300 {
				node := t.pods.nodeOfDeleted(e.Name, e.Time, v.node)
				switch {
				case t.ready(node, e.Time):
					problems = append(problems, fmt.Sprintf("S3: pod %s force-deleted at %s while node %s was Ready", e.Name, e.Time.Format("15:04:05.000"), node))
				case t.alive(node, e.Time):
					problems = append(problems, fmt.Sprintf("S3: pod %s force-deleted at %s while node %s was alive (%s)", e.Name, e.Time.Format("15:04:05.000"), node, t.why(node, e.Time)))
				}
			}
		}
		problems = append(problems, t.leftovers(ctx, v.node)...)
	}
	if t.real != nil {
		problems = append(problems, t.checkRecords()...)
	} else {
		problems = append(problems, t.fencedAlive(ctx, started)...)
	}
	if t.Schedule.Check != nil {
		problems = append(problems, t.Schedule.Check(ctx, t)...)
	}
	return problems
}

// fencedAlive returns the fences of the trial's volumes that reached the
// array while their node was alive, as the trial saw it (S4: no automatic
// fence of a node that is not down). A fence of a volume already fenced
// from the node and not published there since changes nothing on the
// array: S8 has every unpublish of a volume that may be quarantined fenced.
func (t *Trial) fencedAlive(ctx context.Context, started time.Time) []string {
	var out []string
	for _, d := range t.p.Drivers {
		revokes, err := t.revokesOnDetach(ctx, d)
		if err != nil {
			return append(out, err.Error())
		}
		rpcs, err := controllerRPCsOf(d.Mock.LogPath, started, revokes)
		if err != nil {
			return append(out, err.Error())
		}
		for _, r := range fencesWhileAlive(rpcs, func(node string, at time.Time) bool {
			return slices.ContainsFunc(t.victims, func(v *victim) bool { return v.node == node }) && t.alive(node, at)
		}) {
			out = append(out, fmt.Sprintf("S4: volume %s of %s fenced from node %s at %s while the node was alive (%s)",
				r.Volume, d.Name, r.NodeID, r.Received.Format("15:04:05.000"), t.why(r.NodeID, r.Received)))
		}
	}
	return out
}

// fencesWhileAlive returns the fences in rpcs (oldest first) received while
// alive says their node was, but those of a volume fenced from the node
// before and not published there since.
func fencesWhileAlive(rpcs []controllerRPC, alive func(node string, at time.Time) bool) []controllerRPC {
	var out []controllerRPC
	fenced := map[string]bool{} // volume + "@" + node
	for _, r := range rpcs {
		key := r.Volume + "@" + r.NodeID
		if !r.Fence {
			fenced[key] = false
			continue
		}
		if !fenced[key] && alive(r.NodeID, r.Received) {
			out = append(out, r)
		}
		fenced[key] = true
	}
	return out
}

// why says how the node was seen alive at the time at.
func (t *Trial) why(node string, at time.Time) string {
	if t.talking(node, at) {
		return "its Ready condition not Unknown"
	}
	return "its heartbeat Lease renewed"
}

// fencingComplete says whether the node has FencingComplete=True.
func fencingComplete(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == contract.ConditionFencingComplete {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitSettled waits until the nodes that came back hold nothing of the
// failover any more.
func (t *Trial) waitSettled(ctx context.Context) error {
	var left []string
	err := framework.WaitFor(ctx, 120*time.Second, "the failed nodes released and clean", func(ctx context.Context) (bool, error) {
		left = nil
		for _, v := range t.victims {
			left = append(left, t.leftovers(ctx, v.node)...)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.Join(left, "; "))
	}
	return nil
}

// leftovers lists what the failover of node left behind: taints,
// conditions, an unfinished record, a storm-guard admission.
func (t *Trial) leftovers(ctx context.Context, node string) []string {
	var out []string
	n, err := t.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return []string{err.Error()}
	}
	for _, tt := range n.Spec.Taints {
		if tt.Key == contract.QuarantineTaintKey || tt.Key == contract.FencingTriagedTaintKey || tt.Key == contract.FencingRequiredTaintKey {
			out = append(out, node+": taint "+tt.Key)
		}
	}
	for _, c := range n.Status.Conditions {
		switch string(c.Type) {
		case contract.ConditionFencingTriaged, contract.ConditionFencingRequired, contract.ConditionFencingComplete:
			out = append(out, node+": condition "+string(c.Type))
		}
	}
	fr, err := fencingv1alpha1.NewClient(t.c.Dynamic).Get(ctx, node)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		out = append(out, err.Error())
	case fencerecord.Pending(fr):
		out = append(out, node+": record with volumes not cleaned")
	case len(fr.Finalizers) > 0:
		out = append(out, node+": record finalizers "+strings.Join(fr.Finalizers, ","))
	case fr.Status.Phase != fencingv1alpha1.PhaseComplete && fr.Status.Phase != "":
		out = append(out, node+": record phase "+string(fr.Status.Phase))
	}
	lease, err := t.c.Client.CoordinationV1().Leases(sidecar.DefaultStormGuardNamespace).Get(ctx, contract.StormGuardLeaseName, metav1.GetOptions{})
	if err == nil && slices.Contains(strings.Split(lease.Annotations[contract.Prefix+"/fencing-nodes"], ","), node) {
		out = append(out, node+": storm guard admission")
	}
	return out
}

// sleep waits d, the random moment a schedule chose for its next fault.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// between draws a duration in [lo, hi).
func (t *Trial) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(t.Rng.Int63n(int64(hi-lo)))
}

// killController kills the controller role (kill -9) at a random moment
// after NotReady and starts it again after a random delay.
func killController(ctx context.Context, t *Trial) ([]string, error) {
	d1, d2 := t.between(0, 4*time.Second), t.between(0, 3*time.Second)
	if err := sleep(ctx, d1); err != nil {
		return nil, err
	}
	t.procMu.Lock()
	defer t.procMu.Unlock()
	t.p.KillAttacher()
	if err := sleep(ctx, d2); err != nil {
		return nil, err
	}
	steps := []string{fmt.Sprintf("kill -9 controller at NotReady+%.2fs", d1.Seconds()), fmt.Sprintf("restart it %.2fs later", d2.Seconds())}
	return steps, t.p.StartAttacher(ctx)
}

// returnMidFence makes the fence slow and powers the node on while its RPC
// is in flight: the node is Ready again before the fence is confirmed.
func returnMidFence(ctx context.Context, t *Trial) ([]string, error) {
	latency, clear, err := t.slowFence(ctx, 2*time.Second, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer clear()
	steps := []string{fmt.Sprintf("fence latency %.2fs", latency.Seconds()), "power on mid-fence"}
	return steps, t.Env.PowerOn(ctx, t.Victim)
}

// leaderLoss starts a second replica, as a rolling update does, and
// terminates the leader (SIGTERM) at a random moment after NotReady. The
// steps measure the hand-over: when the new replica held the leader's
// Leases, and when the fence of the trial's volume reached the driver from
// then (or before, from the old leader).
func leaderLoss(ctx context.Context, t *Trial) ([]string, error) {
	t.procMu.Lock()
	standby, _, err := t.p.StartStandbyAttacher(ctx)
	t.procMu.Unlock()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	d := t.between(0, 3*time.Second)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	held, err := t.leaderLeases(ctx)
	if err != nil {
		return nil, err
	}
	t.replaceLeader(standby)
	steps := []string{fmt.Sprintf("second replica started; leader terminated at NotReady+%.2fs", d.Seconds())}
	more, err := t.handOver(ctx, held, started)
	return append(steps, more...), err
}

// handOver waits until another replica holds the Leases in held (the
// holders before the leader was terminated), then for the fence of the
// trial's volume from its node, and says how long after the takeover (and
// after the new replica started) the fence reached the driver. The
// node-fencing Lease of another driver's sidecar is not waited for.
func (t *Trial) handOver(ctx context.Context, held map[string]string, standbyStarted time.Time) ([]string, error) {
	driver := contract.SanitizeDriverName(framework.DriverName)
	for name, holder := range held {
		if strings.HasSuffix(name, "/"+contract.NodeFencingLeaseName) && !strings.HasSuffix(holder, "_"+driver) {
			delete(held, name)
		}
	}
	if err := t.waitLeasesTakenOver(ctx, held, "the new replica holding the leader's Leases"); err != nil {
		return nil, err
	}
	takeover := time.Now()
	fence, err := t.firstFence(ctx, standbyStarted.Add(-2*time.Minute))
	if err != nil {
		return nil, err
	}
	if fence.Before(takeover) {
		return []string{fmt.Sprintf("fenced by the old leader %.2fs before the takeover", takeover.Sub(fence).Seconds())}, nil
	}
	return []string{fmt.Sprintf("takeover to fence %.2fs (new replica started %.2fs before the takeover)",
		fence.Sub(takeover).Seconds(), takeover.Sub(standbyStarted).Seconds())}, nil
}

// driverFaults makes the driver refuse the next fences and publish slowly.
func driverFaults(ctx context.Context, t *Trial) ([]string, error) {
	refusals := []codes.Code{codes.Unavailable, codes.Internal, codes.FailedPrecondition, codes.DeadlineExceeded}
	code, n := refusals[t.Rng.Intn(len(refusals))], 1+t.Rng.Intn(3)
	latency := t.between(200*time.Millisecond, 2*time.Second)
	store := faults.NewStore(t.stateDir())
	if err := store.Set("ControllerUnpublishVolume", faults.Fault{Code: code, Count: n}); err != nil {
		return nil, err
	}
	// The replacement's publish: slow (and refused, 1 or 2 times).
	publish := faults.Fault{Latency: latency, Count: 1}
	if pubErrs := t.Rng.Intn(3); pubErrs > 0 {
		publish.Code, publish.Count = codes.Unavailable, pubErrs
	}
	if err := store.Set("ControllerPublishVolume", publish); err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("unpublish fails %d times with %s; publish %s", n, code, publish)}, nil
}

// rebootDuringCleanup reboots the node that came back (its node agent
// killed with everything else) at a random moment of its cleanup.
func rebootDuringCleanup(ctx context.Context, t *Trial) ([]string, error) {
	d := t.between(0, 1500*time.Millisecond)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	// A reboot: the node's processes end and start again.
	return []string{fmt.Sprintf("reboot %.2fs after power-on", d.Seconds())}, t.p.Node(t.Victim).PowerOn(ctx)
}

// restartAPIServer restarts kube-apiserver at a random moment after
// NotReady: every watch breaks, every request fails for a while.
func restartAPIServer(ctx context.Context, t *Trial) ([]string, error) {
	d := t.between(0, 4*time.Second)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	begin := time.Now()
	if err := t.c.RestartAPIServer(ctx); err != nil {
		return nil, err
	}
	steps := []string{fmt.Sprintf("kube-apiserver restarted at NotReady+%.2fs (down %.2fs)", d.Seconds(), time.Since(begin).Seconds())}
	// The taint eviction controller gives up a pod deletion that fails
	// while the apiserver is down, and never tries again: the pod is not
	// Terminating and nothing fails it over (seed 5020). An operator
	// deletes it then, as for any pod stuck on a dead node.
	pods := t.c.Client.CoreV1().Pods(t.Env.NS)
	name := t.Env.PodName(t.victims[0].replica)
	err := framework.WaitFor(ctx, 60*time.Second, "pod "+name+" evicted", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		return err == nil && (p.DeletionTimestamp != nil || p.Spec.NodeName != t.Victim), nil
	})
	if err != nil {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return steps, err
		}
		steps = append(steps, "the taint manager's eviction was lost with the apiserver: pod deleted by the operator")
	}
	return steps, nil
}
