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
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/machinefence"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
)

// fakeMachines is a Cluster API cluster as the machine backend sees it: it
// checks, when asked to delete the Machine, that the intent is already in
// the record (S8), and confirms only when the test says the infrastructure
// deleted the instance.
type fakeMachines struct {
	e         *env
	locateErr error
	// deleting: the Machine is being deleted by someone else already.
	deleting bool
	// onLocate runs as the Machine is located, after the pass's first
	// live read of the node.
	onLocate func()

	mu           sync.Mutex
	remediations int
	noIntent     bool
	confirmed    bool
	withdrawals  int
}

func (f *fakeMachines) target() fencingv1alpha1.MachineTarget {
	return fencingv1alpha1.MachineTarget{Namespace: "ns", Name: "m1", UID: "u1",
		Infrastructure: fencingv1alpha1.InfrastructureRef{APIVersion: "infrastructure.example.io/v1alpha1", Kind: "TestMachine", Name: "m1", UID: "i1"}}
}

func (f *fakeMachines) Locate(ctx context.Context, node *v1.Node) (fencingv1alpha1.MachineTarget, error) {
	if f.onLocate != nil {
		f.onLocate()
	}
	if f.locateErr != nil {
		return fencingv1alpha1.MachineTarget{}, f.locateErr
	}
	t := f.target()
	if f.deleting {
		t.DeletionStartedBy = machinefence.StartedByOther
	}
	return t, nil
}

func (f *fakeMachines) Remediate(ctx context.Context, t fencingv1alpha1.MachineTarget) (string, error) {
	fr, err := f.e.fr.Get(ctx, "n1")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remediations++
	if err != nil || fencerecord.MachineIntentRecorded(fr) == nil || fr.Status.NodeFence.Machine.UID != t.UID {
		f.noIntent = true
	}
	f.e.steps.add("delete machine m1")
	return machinefence.StartedByUs, nil
}

func (f *fakeMachines) Check(ctx context.Context, t fencingv1alpha1.MachineTarget) (machinefence.Progress, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.confirmed {
		f.e.steps.add("instance gone")
		return machinefence.Progress{Confirmed: true}, nil
	}
	return machinefence.Progress{Waiting: "waiting: TestMachine m1 being deleted (Ready DeletionRefused: quota exceeded)"}, nil
}

// Requested: the request is there until a Withdraw removed it.
func (f *fakeMachines) Requested(ctx context.Context, t fencingv1alpha1.MachineTarget) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.withdrawals == 0, nil
}

func (f *fakeMachines) Withdraw(ctx context.Context, t fencingv1alpha1.MachineTarget) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.withdrawals++
	f.e.steps.add("withdraw m1")
	return f.withdrawals == 1, nil
}

func (f *fakeMachines) confirm() {
	f.mu.Lock()
	f.confirmed = true
	f.mu.Unlock()
}

func (f *fakeMachines) counts() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.remediations, f.noIntent
}

// events drains the reasons of the Events the controller posted.
func events(c *Controller) []string {
	var out []string
	for {
		select {
		case e := <-c.recorder.(*record.FakeRecorder).Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasEvent(evs []string, reason string) bool {
	for _, e := range evs {
		if strings.Contains(e, " "+reason+" ") {
			return true
		}
	}
	return false
}

// The machine backend: a dead node whose pod storage fencing cannot free
// (its driver has no UNPUBLISH_FENCE) is fenced by deleting its Cluster API
// Machine, asked once, after the intent is recorded and the node is found
// down by a live read; nothing moves until the infrastructure reports the
// instance gone, then exactly as after a power off: FencingComplete, this
// system's out-of-service taint, the pod deleted. Bad input asks nothing.
func TestMachineFence(t *testing.T) {
	storageMachine := []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendMachine}
	tests := []struct {
		name      string
		backends  []string
		annotated bool // the node names its Machine
		locateErr error
		deleting  bool // someone else is deleting the Machine
		alive     bool
		// aliveLater: the kubelet renews its Lease after the pass's first
		// live read, before the Machine is asked for.
		aliveLater bool
		// confirmAfter: the infrastructure deletes the instance after this
		// many passes (0: never).
		confirmAfter    int
		passes          int
		wantRemediate   int
		wantMoved       bool
		wantEvent       string
		wantIntent      bool
		wantWaitingSaid bool
	}{
		{name: "deleted, moves once the instance is gone", backends: storageMachine, annotated: true, confirmAfter: 2, passes: 3,
			wantRemediate: 1, wantMoved: true, wantEvent: "NodeInstanceDeleted", wantIntent: true},
		{name: "a provider that never confirms: nothing moves, the reason is recorded", backends: storageMachine, annotated: true, passes: 4,
			wantRemediate: 1, wantEvent: "MachineFencePending", wantIntent: true, wantWaitingSaid: true},
		{name: "a Machine being deleted by someone else is followed, not deleted", backends: storageMachine, annotated: true, deleting: true, confirmAfter: 1, passes: 2,
			wantMoved: true, wantEvent: "MachineDeletionFollowed", wantIntent: true},
		{name: "a node without a Machine: nothing asked", backends: storageMachine, passes: 2, wantEvent: "FailoverBlocked"},
		{name: "a Machine that is not the node's: nothing asked, nothing recorded", backends: storageMachine, annotated: true, passes: 2,
			locateErr: errors.New("Machine ns/m1 has no status.nodeRef"), wantEvent: "MachineFenceFailed"},
		{name: "a node alive by a live read: nothing asked", backends: storageMachine, annotated: true, alive: true, passes: 2},
		{name: "a node back before the ask: intent recorded, nothing asked", backends: storageMachine, annotated: true, aliveLater: true, passes: 1,
			wantIntent: true},
		{name: "machine backend not enabled", backends: []string{fencingv1alpha1.BackendStorage}, annotated: true, confirmAfter: 1, passes: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			n := objs[0].(*v1.Node)
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
			if tc.annotated {
				n.Annotations = map[string]string{machinefence.MachineAnnotation: "m1", machinefence.ClusterNamespaceAnnotation: "ns"}
			}
			if tc.alive {
				objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: v1.NamespaceNodeLease},
					Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now())), LeaseDurationSeconds: ptr.To[int32](40)}})
			}
			machines := &fakeMachines{locateErr: tc.locateErr, deleting: tc.deleting}
			e := machineEnv(t, objs, tc.backends, machines)
			if tc.aliveLater {
				machines.onLocate = func() { renewLease(t, e.client, "n1") }
			}
			var evs []string
			for pass := 1; pass <= tc.passes; pass++ {
				if tc.confirmAfter > 0 && pass > tc.confirmAfter {
					machines.confirm()
				}
				_ = e.sync(t)
				evs = append(evs, events(e.c)...)
				if moved := e.steps.index("delete db-0") >= 0; moved && (tc.confirmAfter == 0 || pass <= tc.confirmAfter) {
					t.Fatalf("pass %d: the pod moved before the infrastructure confirmed: %v", pass, e.steps.log)
				}
			}
			remediations, noIntent := machines.counts()
			if remediations != tc.wantRemediate {
				t.Errorf("Machine deletions asked = %d, want %d (%v)", remediations, tc.wantRemediate, e.steps.log)
			}
			if noIntent {
				t.Errorf("the Machine was deleted before its intent was recorded (S8)")
			}
			if moved := e.steps.index("delete db-0") >= 0; moved != tc.wantMoved {
				t.Errorf("pod deleted = %v, want %v (%v)", moved, tc.wantMoved, e.steps.log)
			}
			node := e.node(t, "n1")
			taint, ours := outOfService(node)
			if taint != tc.wantMoved || ours != tc.wantMoved {
				t.Errorf("out-of-service taint = %v (ours %v), want %v", taint, ours, tc.wantMoved)
			}
			if complete := nodestate.ConditionTrue(node, contract.ConditionFencingComplete); complete != tc.wantMoved {
				t.Errorf("FencingComplete = %v, want %v", complete, tc.wantMoved)
			}
			if tc.wantEvent != "" && !hasEvent(evs, tc.wantEvent) {
				t.Errorf("no %s event: %v", tc.wantEvent, evs)
			}
			fr, _ := e.fr.Get(context.Background(), "n1")
			var nf *fencingv1alpha1.NodeFence
			if fr != nil {
				nf = fr.Status.NodeFence
			}
			if intent := nf != nil && nf.Backend == fencingv1alpha1.BackendMachine && nf.StartedTime != nil && nf.Machine != nil; intent != tc.wantIntent {
				t.Fatalf("machine fence intent recorded = %v, want %v: %+v", intent, tc.wantIntent, nf)
			}
			if !tc.wantIntent {
				return
			}
			if nf.Attempts != 1 {
				t.Errorf("attempts = %d, want 1: following a deletion is not a new attempt", nf.Attempts)
			}
			if (nf.ConfirmedTime != nil) != tc.wantMoved {
				t.Errorf("confirmed = %v, want %v", nf.ConfirmedTime, tc.wantMoved)
			}
			if tc.wantWaitingSaid && !strings.Contains(nf.Output, "quota exceeded") {
				t.Errorf("the record does not say what the fence waits for: %+v", nf)
			}
			if tc.wantWaitingSaid {
				// Said once in an Event, with the provider's reason, not
				// at every pass that finds it unchanged.
				var pending []string
				for _, ev := range evs {
					if strings.Contains(ev, " MachineFencePending ") {
						pending = append(pending, ev)
					}
				}
				if len(pending) != 1 || !strings.Contains(pending[0], "quota exceeded") {
					t.Errorf("want one MachineFencePending event with the provider's reason over %d passes, got %q", tc.passes, pending)
				}
			}
			if tc.wantMoved && !fencerecord.OwnOutOfServiceTaint(fr, nodestate.Taint(node, contract.OutOfServiceTaintKey)) {
				t.Errorf("the record does not say the out-of-service taint is this system's")
			}
			if tc.wantMoved && e.steps.index("instance gone") > e.steps.index("delete db-0") {
				t.Errorf("pod deleted before the instance was gone: %v", e.steps.log)
			}
		})
	}
}

// machineEnv is powerEnv with the machine backend: a fakeMachines, or the
// real one (capiEnv).
func machineEnv(t *testing.T, objs []runtime.Object, backends []string, machines MachineFencer) *env {
	e := newEnv(t, objs, true)
	if f, ok := machines.(*fakeMachines); ok {
		f.e = e
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	e.tweaks = append(e.tweaks, func(o *Options) {
		o.CanFence = false
		o.Backends = backends
		o.Machine = machines
	})
	e.c = e.start(ctx, t, true)
	return e
}

// restartWithMachineFence records, as a crashed leader left it a minute
// ago, node n1's fence through target in a record of phase (confirmed or
// not), and restarts the controller on it.
func (e *env) restartWithMachineFence(t *testing.T, target fencingv1alpha1.MachineTarget, phase fencingv1alpha1.Phase, confirmed bool) {
	t.Helper()
	started := metav1.NewTime(time.Now().Add(-time.Minute))
	nf := &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendMachine, StartedTime: &started, Attempts: 1, Machine: &target}
	if confirmed {
		nf.ConfirmedTime = &started
	}
	fr := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "n1", Finalizers: []string{contract.RecordFinalizer}},
		Spec:   fencingv1alpha1.FencingRequestSpec{NodeName: "n1", Origin: fencingv1alpha1.OriginAutomatic},
		Status: fencingv1alpha1.FencingRequestStatus{Phase: phase, NodeFence: nf}}
	if _, err := e.fr.Create(context.Background(), fr); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fr.UpdateStatus(context.Background(), fr); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
}

// Cluster API deletes a Machine's Node right after its instance: no Node
// is left to carry the out-of-service taint. Once the record holds the
// instance confirmed deleted, every attachment to the gone node that no pod
// there uses is deleted, whatever its driver (this one cannot fence), and
// the record stays until none is left; an unconfirmed machine fence
// releases nothing.
func TestDeletedInstanceReleasesAttachments(t *testing.T) {
	for _, tc := range []struct {
		name        string
		confirmed   bool
		infraGone   bool // the InfraMachine is gone, not yet recorded
		podOnNode   bool
		wantDeleted bool
	}{
		{name: "instance confirmed deleted", confirmed: true, wantDeleted: true},
		{name: "machine fence not confirmed", confirmed: false},
		{name: "confirmed by the infrastructure after the Node was deleted", infraGone: true, wantDeleted: true},
		{name: "a pod still on the node", confirmed: true, podOnNode: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			for _, o := range objects(v1.ConditionUnknown, false) {
				if n, ok := o.(*v1.Node); ok && n.Name == "n1" {
					continue // deleted by Cluster API
				}
				if p, ok := o.(*v1.Pod); ok && !tc.podOnNode && p.Spec.NodeName == "n1" {
					continue // garbage-collected as orphaned
				}
				objs = append(objs, o)
			}
			machines := &fakeMachines{confirmed: tc.infraGone}
			e := machineEnv(t, objs, []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendMachine}, machines)
			e.restartWithMachineFence(t, machines.target(), fencingv1alpha1.PhaseFenced, tc.confirmed)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			_, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{})
			if deleted := apierrors.IsNotFound(err); deleted != tc.wantDeleted {
				t.Fatalf("VolumeAttachment deleted = %v, want %v", deleted, tc.wantDeleted)
			}
			got, err := e.fr.Get(context.Background(), "n1")
			if err != nil {
				t.Fatalf("the record went while an attachment to the node remained: %v", err)
			}
			if confirmed := got.Status.NodeFence.ConfirmedTime != nil; confirmed != (tc.confirmed || tc.infraGone) {
				t.Errorf("machine fence confirmed = %v in the record, want %v", confirmed, tc.confirmed || tc.infraGone)
			}
			if !tc.wantDeleted {
				return
			}
			// Once the attachment is gone from the cache too, the record goes.
			e.restart(t)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if _, err := e.fr.Get(context.Background(), "n1"); !apierrors.IsNotFound(err) {
				t.Errorf("the record of a released deleted instance stays: %v", err)
			}
		})
	}
}

// backBeforeMachineFence is node n1 Ready again, still quarantined, with
// the record a crashed leader left of a machine fence of Machine m1 that
// startedBy started (confirmed or not), and the controller restarted on it.
func backBeforeMachineFence(t *testing.T, startedBy string, confirmed bool) (*env, *fakeMachines) {
	t.Helper()
	objs := objects(v1.ConditionTrue, false)
	n := objs[0].(*v1.Node)
	n.Annotations = map[string]string{machinefence.MachineAnnotation: "m1", machinefence.ClusterNamespaceAnnotation: "ns"}
	n.Spec.Taints = []v1.Taint{{Key: contract.QuarantineTaintKey, Effect: v1.TaintEffectNoSchedule}}
	machines := &fakeMachines{}
	e := machineEnv(t, objs, []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendMachine}, machines)
	target := machines.target()
	target.DeletionStartedBy = startedBy
	e.restartWithMachineFence(t, target, fencingv1alpha1.PhaseFencing, confirmed)
	return e, machines
}

// The withdrawal's record is written ahead: when the record's write after
// the withdrawal fails, the next pass, which finds nothing left to withdraw
// on the Machine, still records it and says it in an Event before the
// release completes, instead of completing as if there had been nothing to
// withdraw.
func TestMachineRemediationWithdrawalRecordedAfterAFailedWrite(t *testing.T) {
	e, _ := backBeforeMachineFence(t, machinefence.StartedByMHC, false)

	// The first record of the outcome fails, once.
	failed := false
	e.dyn.PrependReactor("update", "fencingrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u, ok := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured)
		if !ok || failed {
			return false, nil, nil
		}
		if out, _, _ := unstructured.NestedString(u.Object, "status", "nodeFence", "output"); strings.HasSuffix(out, " withdrawn") {
			failed = true
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	if err := e.sync(t); err == nil || !failed {
		t.Fatalf("the pass whose record write failed returned %v (write failed: %v)", err, failed)
	}
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	got, err := e.fr.Get(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != fencingv1alpha1.PhaseComplete {
		t.Errorf("the node back is not released: %+v", got.Status)
	}
	if !strings.HasSuffix(got.Status.NodeFence.Output, " withdrawn") || !hasEvent(events(e.c), "MachineRemediationWithdrawn") {
		t.Errorf("the withdrawal is not said in the record and an Event: %+v", got.Status.NodeFence)
	}
}

// A node that comes back before MachineHealthCheck acted on this system's
// request (--machine-remediation=mhc) gets the request withdrawn as it is
// released, before its record completes: a healthy node must not be
// remediated later on a request nobody means any more (S6). A deletion
// this system or someone else started, or a fence confirmed, has no
// request to withdraw.
func TestMachineRemediationWithdrawnWhenTheNodeIsBack(t *testing.T) {
	for _, tc := range []struct {
		name          string
		startedBy     string
		confirmed     bool
		wantWithdrawn bool
	}{
		{name: "MachineHealthCheck asked, not acted: withdrawn", startedBy: machinefence.StartedByMHC, wantWithdrawn: true},
		{name: "the Machine deleted by this system", startedBy: machinefence.StartedByUs},
		{name: "a deletion someone else started", startedBy: machinefence.StartedByOther},
		{name: "a fence through MachineHealthCheck confirmed", startedBy: machinefence.StartedByMHC, confirmed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, machines := backBeforeMachineFence(t, tc.startedBy, tc.confirmed)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			machines.mu.Lock()
			withdrawals := machines.withdrawals
			machines.mu.Unlock()
			want := 0
			if tc.wantWithdrawn {
				want = 1
			}
			if withdrawals != want {
				t.Fatalf("requests withdrawn = %d, want %d (%v)", withdrawals, want, e.steps.log)
			}
			got, err := e.fr.Get(context.Background(), "n1")
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != fencingv1alpha1.PhaseComplete {
				t.Errorf("the node back is not released: %+v", got.Status)
			}
			if tc.wantWithdrawn && (!hasEvent(events(e.c), "MachineRemediationWithdrawn") || !strings.Contains(got.Status.NodeFence.Output, "withdrawn")) {
				t.Errorf("the withdrawal is not said in an Event and the record: %+v", got.Status.NodeFence)
			}
		})
	}
}

// capi is a Cluster API cluster in a fake dynamic client, for the real
// machine backend: Machine m1 of node n1 and its InfraMachine TestMachine
// m1, which the steps of a test delete as Cluster API and its provider
// would, or remove as a person or clusterctl move would.
type capi struct {
	dyn *dynamicfake.FakeDynamicClient
}

var testMachineGVR = schema.GroupVersionResource{Group: "infrastructure.example.io", Version: "v1alpha1", Resource: "testmachines"}

// capiEnv is machineEnv with the real machine backend on a fake Cluster
// API (newCAPI), after the storage backend.
func capiEnv(t *testing.T, objs []runtime.Object, withInfra bool) (*env, *capi) {
	cluster, backend := newCAPI(withInfra)
	return machineEnv(t, objs, []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendMachine}, backend), cluster
}

func newCAPI(withInfra bool) (*capi, *machinefence.Backend) {
	m := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]interface{}{"name": "m1", "namespace": "ns", "uid": "u1"},
		"spec": map[string]interface{}{"clusterName": "c",
			"infrastructureRef": map[string]interface{}{"apiGroup": testMachineGVR.Group, "kind": "TestMachine", "name": "m1"}},
		"status": map[string]interface{}{"nodeRef": map[string]interface{}{"name": "n1"}},
	}}
	objs := []runtime.Object{m}
	if withInfra {
		objs = append(objs, testMachine("i1"))
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		machinefence.MachineResource: "MachineList", testMachineGVR: "TestMachineList"}, objs...)
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{testMachineGVR.GroupVersion()})
	mapper.AddSpecific(testMachineGVR.GroupVersion().WithKind("TestMachine"), testMachineGVR, testMachineGVR.GroupVersion().WithResource("testmachine"), meta.RESTScopeNamespace)
	return &capi{dyn: dyn}, &machinefence.Backend{Dynamic: dyn, Mapper: mapper, Mode: machinefence.ModeDelete}
}

func testMachine(uid string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": testMachineGVR.GroupVersion().String(), "kind": "TestMachine",
		"metadata": map[string]interface{}{"name": "m1", "namespace": "ns", "uid": uid},
	}}
}

func (c *capi) infra(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	u, err := c.dyn.Resource(testMachineGVR).Namespace("ns").Get(context.Background(), "m1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (c *capi) update(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if _, err := c.dyn.Resource(testMachineGVR).Namespace("ns").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deleting: the Machine controller deletes the InfraMachine, its
// provider's finalizer holding it until the instance is gone.
func (c *capi) deleting(t *testing.T) {
	u := c.infra(t)
	now := metav1.Now()
	u.SetDeletionTimestamp(&now)
	u.SetFinalizers([]string{"testmachine.infrastructure.example.io"})
	c.update(t, u)
}

// annotate adds key to the InfraMachine.
func (c *capi) annotate(key string) func(t *testing.T) {
	return func(t *testing.T) {
		u := c.infra(t)
		u.SetAnnotations(map[string]string{key: ""})
		c.update(t, u)
	}
}

// gone: the InfraMachine is removed, by its provider or anyone.
func (c *capi) gone(t *testing.T) {
	if err := c.dyn.Resource(testMachineGVR).Namespace("ns").Delete(context.Background(), "m1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// replaced: the InfraMachine is there again under its name, another
// object (a pivot, a recreation).
func (c *capi) replaced(t *testing.T) {
	c.gone(t)
	if _, err := c.dyn.Resource(testMachineGVR).Namespace("ns").Create(context.Background(), testMachine("i2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A machine fence is confirmed only by the provider's own report: the
// InfraMachine recorded (its UID, before the Machine is deleted) read
// being deleted through its provider, then gone. One that disappears
// without that read (its finalizer removed by hand), is moved by
// clusterctl, replaced under its name, or is gone before the fence starts
// leaves an instance that may still write: nothing moves, and the record
// and an Event say why. With the real backend over a fake Cluster API.
func TestMachineFenceConfirmedOnlyByItsProvider(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noInfra   bool // the InfraMachine is gone before the fence
		between   func(c *capi) []func(*testing.T)
		wantMoved bool
		// wantEvent: said in the last two passes; wantOutput: in the record.
		wantEvent, wantOutput string
	}{
		{name: "seen being deleted through its provider, then gone: confirmed",
			between:   func(c *capi) []func(*testing.T) { return []func(*testing.T){c.deleting, c.gone} },
			wantMoved: true, wantEvent: "NodeInstanceDeleted"},
		{name: "gone without its deletion seen (finalizer stripped): not confirmed",
			between:   func(c *capi) []func(*testing.T) { return []func(*testing.T){c.gone, func(*testing.T) {}} },
			wantEvent: "MachineFenceUnconfirmable", wantOutput: "no read saw it being deleted"},
		{name: "deleted by clusterctl move: not confirmed",
			between: func(c *capi) []func(*testing.T) {
				return []func(*testing.T){func(t *testing.T) { c.annotate(machinefence.DeleteForMoveAnnotation)(t); c.deleting(t) }, c.gone}
			},
			wantEvent: "MachineFenceUnconfirmable", wantOutput: "no read saw it being deleted"},
		{name: "seen being deleted, then paused, then gone: not confirmed",
			between: func(c *capi) []func(*testing.T) {
				return []func(*testing.T){c.deleting, c.annotate(machinefence.PausedAnnotation), c.gone}
			},
			wantEvent: "MachineFenceUnconfirmable", wantOutput: "no read saw it being deleted"},
		{name: "replaced under its name (a pivot): not confirmed",
			between:   func(c *capi) []func(*testing.T) { return []func(*testing.T){c.replaced, func(*testing.T) {}} },
			wantEvent: "MachineFenceUnconfirmable", wantOutput: "replaced under its name"},
		{name: "gone before the fence: refused, nothing recorded or asked", noInfra: true,
			between:   func(c *capi) []func(*testing.T) { return []func(*testing.T){func(*testing.T) {}} },
			wantEvent: "MachineFenceFailed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			n := objs[0].(*v1.Node)
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
			n.Annotations = map[string]string{machinefence.MachineAnnotation: "m1", machinefence.ClusterNamespaceAnnotation: "ns"}
			e, cluster := capiEnv(t, objs, !tc.noInfra)

			var evs []string
			_ = e.sync(t)
			for _, step := range tc.between(cluster) {
				step(t)
				evs = events(e.c)
				_ = e.sync(t)
			}
			evs = append(evs, events(e.c)...)
			if moved := e.steps.index("delete db-0") >= 0; moved != tc.wantMoved {
				t.Errorf("pod deleted = %v, want %v (%v)", moved, tc.wantMoved, e.steps.log)
			}
			node := e.node(t, "n1")
			if complete := nodestate.ConditionTrue(node, contract.ConditionFencingComplete); complete != tc.wantMoved {
				t.Errorf("FencingComplete = %v, want %v", complete, tc.wantMoved)
			}
			if taint, _ := outOfService(node); taint != tc.wantMoved {
				t.Errorf("out-of-service taint = %v, want %v", taint, tc.wantMoved)
			}
			if !hasEvent(evs, tc.wantEvent) {
				t.Errorf("no %s Event in the last two passes: %v", tc.wantEvent, evs)
			}
			fr, err := e.fr.Get(context.Background(), "n1")
			if tc.noInfra {
				if err == nil && fr.Status.NodeFence != nil {
					t.Errorf("a machine fence was recorded: %+v", fr.Status.NodeFence)
				}
				if _, err := cluster.dyn.Resource(machinefence.MachineResource).Namespace("ns").Get(context.Background(), "m1", metav1.GetOptions{}); err != nil {
					t.Errorf("the Machine was deleted: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			nf := fr.Status.NodeFence
			if nf == nil || nf.Machine == nil || nf.Machine.Infrastructure.UID != "i1" {
				t.Fatalf("the record does not name InfraMachine i1: %+v", nf)
			}
			if (nf.ConfirmedTime != nil) != tc.wantMoved {
				t.Errorf("confirmed %v, want %v", nf.ConfirmedTime, tc.wantMoved)
			}
			if !strings.Contains(nf.Output, tc.wantOutput) {
				t.Errorf("the record says %q, want %q", nf.Output, tc.wantOutput)
			}
		})
	}
}

// A machine fence's confirmation is recorded with the node's Ready
// transition (notReadySince), or not at all: one recorded without it, when
// the node could not be read at that moment, never counts (NodeFenced
// compares no clocks), and the node would stay unfenced for good. The next
// pass confirms it again, with the node read.
func TestMachineFenceConfirmedWithTheNodesEpisode(t *testing.T) {
	objs := objects(v1.ConditionUnknown, true)
	n := objs[0].(*v1.Node)
	n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	n.Annotations = map[string]string{machinefence.MachineAnnotation: "m1", machinefence.ClusterNamespaceAnnotation: "ns"}
	machines := &fakeMachines{}
	e := machineEnv(t, objs, []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendMachine}, machines)
	_ = e.sync(t)
	machines.confirm()
	// The node's next live read fails, once: the one after the instance
	// is found gone.
	var mu sync.Mutex
	failed := false
	e.client.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if failed || e.steps.index("instance gone") < 0 {
			return false, nil, nil
		}
		failed = true
		return true, nil, errors.New("apiserver unavailable")
	})
	if err := e.sync(t); err == nil {
		t.Fatal("the pass that could not read the node reported no error")
	}
	if fr, _ := e.fr.Get(context.Background(), "n1"); fr == nil || fr.Status.NodeFence == nil || fr.Status.NodeFence.ConfirmedTime != nil {
		t.Fatalf("confirmation recorded without the node's Ready transition: %+v", fr)
	}
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	fr, err := e.fr.Get(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if nf := fr.Status.NodeFence; nf.ConfirmedTime == nil || nf.NotReadySince == nil || !nf.NotReadySince.Equal(&n.Status.Conditions[0].LastTransitionTime) {
		t.Fatalf("not confirmed with the node's episode: %+v", nf)
	}
	if e.steps.index("delete db-0") < 0 || !nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
		t.Errorf("the node confirmed fenced did not fail over: %v", e.steps.log)
	}
}

// Cluster API cordons and drains the node of a Machine being deleted: the
// node is then "under maintenance" and fenced no further automatically,
// but a machine fence already started is followed still, so that the
// InfraMachine is seen being deleted and its disappearance, found once
// Cluster API has deleted the Node too, confirms the fence and releases
// the gone instance's attachments. The observation is in the record: a
// restart in between loses nothing.
func TestMachineFenceFollowedOnACordonedNode(t *testing.T) {
	var objs []runtime.Object
	for _, o := range objects(v1.ConditionUnknown, false) {
		if p, ok := o.(*v1.Pod); ok && p.Spec.NodeName == "n1" {
			continue // deleted by Cluster API's drain, or the pod GC
		}
		if n, ok := o.(*v1.Node); ok && n.Name == "n1" {
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
			n.Annotations = map[string]string{machinefence.MachineAnnotation: "m1", machinefence.ClusterNamespaceAnnotation: "ns"}
			n.Spec.Unschedulable = true // cordoned by Cluster API's drain
		}
		objs = append(objs, o)
	}
	e, cluster := capiEnv(t, objs, true)
	target := fencingv1alpha1.MachineTarget{Namespace: "ns", Name: "m1", UID: "u1", DeletionStartedBy: machinefence.StartedByUs,
		Infrastructure: fencingv1alpha1.InfrastructureRef{APIVersion: testMachineGVR.GroupVersion().String(), Kind: "TestMachine", Name: "m1", UID: "i1"}}
	e.restartWithMachineFence(t, target, fencingv1alpha1.PhaseFencing, false)

	// Cluster API deletes the InfraMachine; the provider stops the instance.
	cluster.deleting(t)
	_ = e.sync(t)
	if nf := e.record(t).Status.NodeFence; nf.Machine.Infrastructure.DeletionSeenTime == nil {
		t.Fatalf("the InfraMachine's deletion was not seen on the cordoned node: %+v", nf)
	}
	// The instance is gone; Cluster API deletes the Node.
	cluster.gone(t)
	if err := e.client.CoreV1().Nodes().Delete(context.Background(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if nf := e.record(t).Status.NodeFence; nf.ConfirmedTime == nil {
		t.Errorf("the machine fence is not confirmed: %+v", nf)
	}
	if _, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the gone instance's attachment is not released: %v", err)
	}
}
