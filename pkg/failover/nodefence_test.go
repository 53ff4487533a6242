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
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
	"github.com/csi-fence/fence-attacher/pkg/powerfence"
)

// fakePower is a power switch: it counts fences and checks, at the moment
// it acts, that the intent is already in the record (S8).
type fakePower struct {
	t          *testing.T
	e          *env
	configured bool
	err        error
	confirmed  bool

	mu        sync.Mutex
	fences    int
	noIntent  bool
	onFenceDo func()
}

func (p *fakePower) Config(node string) (string, string, bool) {
	return "bmc", "fence_ipmilan", p.configured
}

func (p *fakePower) Fence(ctx context.Context, node string) (powerfence.Result, error) {
	fr, err := p.e.fr.Get(ctx, node)
	p.mu.Lock()
	p.fences++
	if err != nil || fr.Status.NodeFence == nil || fr.Status.NodeFence.StartedTime == nil || fr.Status.NodeFence.ConfirmedTime != nil {
		p.noIntent = true
	}
	p.mu.Unlock()
	p.e.steps.add("power off " + node)
	if p.onFenceDo != nil {
		p.onFenceDo()
	}
	res := powerfence.Result{Node: node, Agent: "fence_ipmilan", Action: powerfence.ActionOff, Confirmed: p.confirmed && p.err == nil,
		Steps: []powerfence.Step{{Action: powerfence.ActionOff, Attempt: 1, ExitCode: 0, Output: "Success: Powered OFF"}}}
	return res, p.err
}

func (p *fakePower) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fences
}

// powerEnv is a dead node n1 with a terminating pod on a volume of our
// driver, and the failover controller with a power switch.
func powerEnv(t *testing.T, objs []runtime.Object, canFence bool, backends []string, power *fakePower) *env {
	e := newEnv(t, objs, true)
	power.t, power.e = t, e
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	e.tweaks = append(e.tweaks, func(o *Options) {
		o.CanFence = canFence
		o.Backends = backends
		o.Power = power
	})
	e.c = e.start(ctx, t, true)
	return e
}

func outOfService(n *v1.Node) (taint, ours bool) {
	_, ours = n.Annotations[contract.OutOfServiceProvenanceAnnotation]
	return nodestate.Taint(n, contract.OutOfServiceTaintKey) != nil, ours
}

// Escalation from storage to power: a node whose pods storage fencing
// cannot free (a driver without UNPUBLISH_FENCE, or refusing) is powered off
// when, and only when, the admin configured it and a FenceAgentConfig lists
// the node; only a confirmed power off moves anything, and then the node is
// out of service by this system's taint.
func TestPowerFenceEscalation(t *testing.T) {
	storagePower := []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower}
	tests := []struct {
		name        string
		canFence    bool
		refuse      bool // the driver refuses the storage fence
		backends    []string
		configured  bool
		powerErr    error
		unconfirmed bool
		alive       bool // the node's kubelet renewed its Lease: alive by a live read
		// aliveLater: the kubelet renews its Lease after the first live
		// read of the pass (during the storage fence).
		aliveLater bool
		wantPower  int
		wantDelete bool
		wantOOS    bool
	}{
		{name: "driver cannot fence: powered off", backends: storagePower, configured: true, wantPower: 1, wantDelete: true, wantOOS: true},
		{name: "driver refuses: powered off", canFence: true, refuse: true, backends: storagePower, configured: true, wantPower: 1, wantDelete: true, wantOOS: true},
		{name: "driver fences: no power off", canFence: true, backends: storagePower, configured: true, wantPower: 0, wantDelete: true},
		{name: "power first: powered off although the driver fences", canFence: true, backends: []string{fencingv1alpha1.BackendPower, fencingv1alpha1.BackendStorage}, configured: true, wantPower: 1, wantDelete: true, wantOOS: true},
		{name: "no FenceAgentConfig for the node", backends: storagePower, configured: false},
		{name: "power backend not enabled", backends: []string{fencingv1alpha1.BackendStorage}, configured: true},
		{name: "agent fails", backends: storagePower, configured: true, powerErr: errors.New("connection refused"), wantPower: 1},
		{name: "agent does not confirm", backends: storagePower, configured: true, unconfirmed: true, wantPower: 1},
		{name: "node alive by a live read", backends: storagePower, configured: true, alive: true},
		{name: "node back during the storage fence", canFence: true, refuse: true, backends: storagePower, configured: true, aliveLater: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			if tc.alive {
				objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: v1.NamespaceNodeLease},
					Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now())), LeaseDurationSeconds: ptr.To[int32](40)}})
			}
			// As the node lifecycle controller sets it (kept by the record).
			objs[0].(*v1.Node).Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
			power := &fakePower{configured: tc.configured, err: tc.powerErr, confirmed: !tc.unconfirmed}
			e := powerEnv(t, objs, tc.canFence, tc.backends, power)
			if tc.aliveLater {
				e.csi.before = func() { renewLease(t, e.client, "n1") }
			}
			if tc.refuse {
				e.csi.err = errors.New("FAILED_PRECONDITION: node still writing")
			}
			_ = e.sync(t)
			if got := power.count(); got != tc.wantPower {
				t.Errorf("power fences = %d, want %d (%v)", got, tc.wantPower, e.steps.log)
			}
			if power.noIntent {
				t.Errorf("the node was powered off before its intent was recorded (S8)")
			}
			deleted := e.steps.index("delete db-0") >= 0
			if deleted != tc.wantDelete {
				t.Errorf("pod deleted = %v, want %v (%v)", deleted, tc.wantDelete, e.steps.log)
			}
			if deleted && tc.wantPower > 0 && e.steps.index("power off n1") > e.steps.index("delete db-0") {
				t.Errorf("pod deleted before the power off: %v", e.steps.log)
			}
			n := e.node(t, "n1")
			taint, ours := outOfService(n)
			if taint != tc.wantOOS || ours != tc.wantOOS {
				t.Errorf("out-of-service taint = %v (ours %v), want %v", taint, ours, tc.wantOOS)
			}
			if complete := nodestate.ConditionTrue(n, contract.ConditionFencingComplete); complete != tc.wantDelete {
				t.Errorf("FencingComplete = %v, want %v", complete, tc.wantDelete)
			}
			if tc.wantPower > 0 {
				nf := e.record(t).Status.NodeFence
				if nf == nil || nf.Backend != fencingv1alpha1.BackendPower || nf.StartedTime == nil || (nf.ConfirmedTime != nil) != tc.wantOOS {
					t.Fatalf("power fence record = %+v", nf)
				}
				if !tc.wantOOS && nf.Error == "" {
					t.Errorf("failed power fence without its error in the record: %+v", nf)
				}
				if tc.wantOOS && !fencerecord.OwnOutOfServiceTaint(e.record(t), nodestate.Taint(n, contract.OutOfServiceTaintKey)) {
					t.Errorf("the record does not say the out-of-service taint is this system's: %+v, taint %+v", nf, nodestate.Taint(n, contract.OutOfServiceTaintKey))
				}
				if tc.wantOOS && (nf.NotReadySince == nil || !nf.NotReadySince.Equal(fencerecord.ReadyTransition(n))) {
					t.Errorf("confirmed power fence records notReadySince %v, want the node's Ready transition %v", nf.NotReadySince, fencerecord.ReadyTransition(n))
				}
			}
		})
	}
}

// A power fence confirmed in an earlier failure of the node is not a fence
// now: neither once the request completed (the node was released), nor
// while the node has been Ready since the confirmation.
func TestStalePowerFenceIsNotAFence(t *testing.T) {
	confirmed := metav1.NewTime(time.Now().Add(-time.Hour))
	tests := []struct {
		name  string
		phase fencingv1alpha1.Phase
		// refusing: the driver can fence and refuses: its intent reopens
		// the request before the power fence is tried.
		refusing bool
		// readySince: the node's Ready condition changed this long after
		// the confirmation (0: not since).
		readySince time.Duration
	}{
		{name: "request completed since", phase: fencingv1alpha1.PhaseComplete},
		{name: "request completed since, reopened by a storage fence", phase: fencingv1alpha1.PhaseComplete, refusing: true},
		{name: "node Ready since the confirmation", phase: fencingv1alpha1.PhaseFenced, readySince: 30 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			n := objs[0].(*v1.Node)
			if tc.readySince > 0 {
				n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(confirmed.Add(tc.readySince))
			}
			power := &fakePower{configured: true, err: errors.New("BMC unreachable")}
			e := powerEnv(t, objs, tc.refusing, []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower}, power)
			if tc.refusing {
				e.csi.err = errors.New("FAILED_PRECONDITION: node still writing")
			}
			old := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: fencingv1alpha1.FencingRequestSpec{NodeName: "n1", Origin: fencingv1alpha1.OriginAutomatic},
				Status: fencingv1alpha1.FencingRequestStatus{Phase: tc.phase, NodeFence: &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendPower, StartedTime: &confirmed, ConfirmedTime: &confirmed}}}
			if _, err := e.fr.Create(context.Background(), old); err != nil {
				t.Fatal(err)
			}
			if _, err := e.fr.UpdateStatus(context.Background(), old); err != nil {
				t.Fatal(err)
			}
			e.restart(t)
			_ = e.sync(t)
			if e.steps.index("delete db-0") >= 0 {
				t.Fatalf("pod deleted on a stale power fence: %v", e.steps.log)
			}
			if taint, _ := outOfService(e.node(t, "n1")); taint {
				t.Errorf("out-of-service taint added on a stale power fence")
			}
			if power.count() != 1 {
				t.Errorf("want a new power fence, got %d", power.count())
			}
		})
	}
}

// S8/S6: the process dies after the node was powered off and before
// anything else reached the API. The record already holds the intent; the
// next pass after a restart powers it off again (idempotent) and finishes:
// taint, FencingComplete, the pod.
func TestCrashAfterPowerOff(t *testing.T) {
	power := &fakePower{configured: true, confirmed: true}
	objs := objects(v1.ConditionUnknown, true)
	// The node lifecycle controller's time of the transition: what the
	// confirmation is recorded with (notReadySince), and held against.
	objs[0].(*v1.Node).Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	e := powerEnv(t, objs, false, []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower}, power)
	power.onFenceDo = func() {
		killWrites(e)
	}
	_ = e.sync(t)
	if nf := e.record(t).Status.NodeFence; nf == nil || nf.StartedTime == nil {
		t.Fatalf("no intent in the record after the crash: %+v", nf)
	}
	if e.steps.index("delete db-0") >= 0 {
		t.Fatalf("pod deleted by a process that was killed")
	}
	e.dyn.ReactionChain = e.dyn.ReactionChain[1:]
	e.client.ReactionChain = e.client.ReactionChain[1:]
	power.onFenceDo = nil
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if e.steps.index("delete db-0") < 0 {
		t.Fatalf("pod not deleted after the restart: %v", e.steps.log)
	}
	if taint, ours := outOfService(e.node(t, "n1")); !taint || !ours {
		t.Errorf("out-of-service taint = %v (ours %v) after the restart", taint, ours)
	}
}

// killWrites makes every later write of the env's clients fail, as after
// kill -9 of the process that sent them.
func killWrites(e *env) {
	readOnly := func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a.GetVerb() {
		case "get", "list", "watch":
			return false, nil, nil
		}
		return true, nil, errors.New("process killed")
	}
	e.dyn.PrependReactor("*", "*", readOnly)
	e.client.PrependReactor("*", "*", readOnly)
}

// S6: the out-of-service taint this system added goes once the node is
// back and clean; one someone else added stays, and so does ours while the
// node is not back.
func TestOutOfServiceTaintRemovedOnlyIfOurs(t *testing.T) {
	tests := []struct {
		name string
		// ours: the record holds the taint's timeAdded; annotated: the
		// Node carries the provenance annotation (which its own kubelet
		// may write).
		ours, annotated bool
		ready           v1.ConditionStatus
		wantTaint       bool
	}{
		{name: "ours, node back", ours: true, annotated: true, ready: v1.ConditionTrue, wantTaint: false},
		{name: "an admin's, node back", ready: v1.ConditionTrue, wantTaint: true},
		{name: "an admin's, annotated by the node itself, node back", annotated: true, ready: v1.ConditionTrue, wantTaint: true},
		{name: "ours, node still down", ours: true, annotated: true, ready: v1.ConditionUnknown, wantTaint: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(tc.ready, false)
			n := objs[0].(*v1.Node)
			taintAdded := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
			n.Spec.Taints = []v1.Taint{{Key: contract.OutOfServiceTaintKey, Value: contract.OutOfServiceTaintValue, Effect: v1.TaintEffectNoExecute, TimeAdded: &taintAdded},
				{Key: contract.QuarantineTaintKey, Effect: v1.TaintEffectNoSchedule}}
			if tc.annotated {
				n.Annotations = map[string]string{contract.OutOfServiceProvenanceAnnotation: driver}
			}
			e := powerEnv(t, objs, false, []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower}, &fakePower{configured: true, confirmed: true})
			// The node was powered off (confirmed) and nothing else fenced.
			confirmed := metav1.NewTime(time.Now().Add(-time.Minute))
			fr := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: fencingv1alpha1.FencingRequestSpec{NodeName: "n1", Origin: fencingv1alpha1.OriginAutomatic},
				Status: fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseFenced, NodeFence: &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendPower, StartedTime: &confirmed, ConfirmedTime: &confirmed}}}
			if tc.ours {
				fr.Status.NodeFence.OutOfServiceTaintAdded = &taintAdded
			}
			if _, err := e.fr.Create(context.Background(), fr); err != nil {
				t.Fatal(err)
			}
			if _, err := e.fr.UpdateStatus(context.Background(), fr); err != nil {
				t.Fatal(err)
			}
			e.restart(t)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			taint, ours := outOfService(e.node(t, "n1"))
			if taint != tc.wantTaint {
				t.Errorf("out-of-service taint present = %v, want %v", taint, tc.wantTaint)
			}
			if !taint && ours {
				t.Errorf("provenance annotation left behind")
			}
			if quarantined := nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) != nil; quarantined != (tc.ready != v1.ConditionTrue) {
				t.Errorf("quarantined = %v with the node Ready=%s", quarantined, tc.ready)
			}
		})
	}
}

// The out-of-service backend (ceph-csi's --enable-fencing): a dead node
// whose every attachment is of a driver that fences on the out-of-service
// taint (or fences storage) gets the taint, as this system's; one with an
// attachment of a driver that does neither does not, nor does any node
// when the backend is off.
func TestOutOfServiceBackend(t *testing.T) {
	all := []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower, fencingv1alpha1.BackendOutOfService}
	tests := []struct {
		name string
		// ours: our driver fences on the taint (else it fences storage).
		ours bool
		// other: a second driver's attachment on the node: "" none,
		// "oos" fencing on the taint, "none" fencing in no way.
		other    string
		backends []string
		// aliveLater: the kubelet renews its Lease during the storage
		// fence of our driver's volume.
		aliveLater bool
		// unattached: another pod on the node uses an inline NFS volume.
		unattached bool
		want       bool
	}{
		{name: "a pod's storage has no attachment", ours: true, backends: all, unattached: true},
		{name: "node back during the storage fence", ours: false, other: "oos", backends: all, aliveLater: true},
		{name: "the only driver fences on the taint", ours: true, backends: all, want: true},
		{name: "with a driver that fences storage", ours: false, other: "oos", backends: all, want: true},
		{name: "with a driver that fences in no way", ours: true, other: "none", backends: all},
		{name: "backend off", ours: true, backends: []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			if tc.ours {
				objs[2].(*storagev1.CSIDriver).Annotations[contract.FencesOnOutOfServiceAnnotation] = "true"
			}
			if tc.other != "" {
				objs = twoDrivers(objs)
				if tc.other == "oos" {
					objs[len(objs)-5].(*storagev1.CSIDriver).Annotations[contract.FencesOnOutOfServiceAnnotation] = "true"
				}
			}
			if tc.aliveLater {
				objs[0].(*v1.Node).Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute))
			}
			if tc.unattached {
				objs = withUnattachedStorage(objs, "inline")
			}
			e := powerEnv(t, objs, !tc.ours, tc.backends, &fakePower{})
			if tc.aliveLater {
				e.csi.before = func() { renewLease(t, e.client, "n1") }
			}
			_ = e.sync(t)
			taint, ours := outOfService(e.node(t, "n1"))
			if taint != tc.want || ours != tc.want {
				t.Errorf("out-of-service taint = %v (ours %v), want %v; %v", taint, ours, tc.want, e.steps.log)
			}
			if tc.want {
				if nf := e.record(t).Status.NodeFence; nf == nil || nf.Backend != fencingv1alpha1.BackendOutOfService || nf.StartedTime == nil || nf.ConfirmedTime != nil {
					t.Errorf("the out-of-service step is not in the record: %+v", nf)
				}
			}
			if e.steps.index("delete db-0") >= 0 && !tc.ours {
				return // our driver fenced its volume: the pod may go
			}
			if e.steps.index("delete db-0") >= 0 {
				t.Errorf("pod deleted before its volume's driver fenced it: %v", e.steps.log)
			}
		})
	}
}

// S5 covers every backend: two nodes failing at once under
// --max-fenced-nodes=1, with a driver that cannot fence and a power switch
// on both, synced by two workers: one node only is powered off.
func TestStormGuardCoversPowerFencing(t *testing.T) {
	power := &fakePower{configured: true, confirmed: true}
	e := powerEnv(t, failing(objects(v1.ConditionUnknown, true), "n2"), false,
		[]string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower}, power)
	e.c.opts.MaxFencedNodes, e.c.opts.MaxFencedNodePercent = 1, 0
	compareAndSwapLeases(e.client)
	_, ctx := ktesting.NewTestContext(t)
	var wg sync.WaitGroup
	for _, n := range []string{"n1", "n2"} {
		wg.Go(func() { _ = e.c.sync(ctx, n) })
	}
	wg.Wait()
	if got := power.count(); got != 1 {
		t.Fatalf("%d nodes powered off under --max-fenced-nodes=1 (%v)", got, e.steps.log)
	}
}

// compareAndSwapLeases makes the fake apiserver do what the real one does
// with a Lease update: it fails with a conflict unless it carries the
// Lease's current resourceVersion, and bumps it (the storm guard's
// admissions rely on it).
func compareAndSwapLeases(c *fake.Clientset) {
	var mu sync.Mutex
	c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		cur, err := c.Tracker().Get(a.GetResource(), l.Namespace, l.Name)
		if err != nil {
			return true, nil, err
		}
		if cur.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), l.Name, errors.New("the object has been modified"))
		}
		rv, _ := strconv.Atoi(l.ResourceVersion)
		l.ResourceVersion = strconv.Itoa(rv + 1)
		return true, l, c.Tracker().Update(a.GetResource(), l, l.Namespace)
	})
}

// renewLease is the node's kubelet renewing its Lease now: the node is
// alive, whatever its Ready condition still says.
func renewLease(t *testing.T, client kubernetes.Interface, node string) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: v1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))}}
	if _, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
		t.Error(err)
	}
}

// flipOwner owns node-level state until lose is called.
type flipOwner struct{ lost atomic.Bool }

func (o *flipOwner) IsOwner() bool { return !o.lost.Load() }

// Issue 38 item 9: a pass decides its part by its ownership at its start,
// and a power fence may outlast that ownership (an agent timing out for
// minutes, the Lease lost meanwhile). The confirmation is recorded, but the
// node-level writes after it (the out-of-service taint, FencingComplete,
// the force-deletes) are left to the new owner.
func TestOwnershipLostDuringAPowerFence(t *testing.T) {
	objs := objects(v1.ConditionUnknown, true)
	objs[0].(*v1.Node).Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	owner := &flipOwner{}
	power := &fakePower{configured: true, confirmed: true, onFenceDo: func() { owner.lost.Store(true) }}
	e := powerEnv(t, objs, false, []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower}, power)
	e.c.owner = owner
	if err := e.sync(t); !errors.Is(err, errNotOwner) {
		t.Errorf("sync = %v, want it to stop as no longer the owner", err)
	}
	if power.count() != 1 {
		t.Fatalf("power fences = %d, want 1: the test proves nothing", power.count())
	}
	if nf := e.record(t).Status.NodeFence; nf == nil || nf.ConfirmedTime == nil {
		t.Errorf("the confirmed power off is not recorded: %+v", nf)
	}
	n := e.node(t, "n1")
	if taint, _ := outOfService(n); taint {
		t.Error("out-of-service taint added by a controller that lost the ownership")
	}
	if nodestate.ConditionTrue(n, contract.ConditionFencingComplete) {
		t.Error("FencingComplete set by a controller that lost the ownership")
	}
	if e.steps.index("delete db-0") >= 0 {
		t.Errorf("pod force-deleted by a controller that lost the ownership: %v", e.steps.log)
	}
}
