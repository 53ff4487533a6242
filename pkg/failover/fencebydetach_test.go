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

// Fence by detach (issue 37): a driver that does not advertise
// UNPUBLISH_FENCE and whose CSIDriver declares that its plain unpublish
// revokes access is fenced by the storage backend with a plain
// ControllerUnpublishVolume, under every rule a fence keeps.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencemode"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
)

// declare sets our driver's declaration on the CSIDriver among objs ("":
// none).
func declare(objs []runtime.Object, value string) []runtime.Object {
	for _, o := range objs {
		if d, ok := o.(*storagev1.CSIDriver); ok && d.Name == driver && value != "" {
			d.Annotations[contract.UnpublishRevokesAccessAnnotation] = value
		}
	}
	return objs
}

// revokingEnv is the dead node n1 with db-0 Terminating on volume h1 of our
// driver, which does not advertise UNPUBLISH_FENCE (unless canFence) and
// whose CSIDriver carries declaration ("": none), under a controller with
// the given backends (nil: storage) and power switch (nil: none).
func revokingEnv(t *testing.T, objs []runtime.Object, canFence bool, declaration string, backends []string, power *fakePower, tweaks ...func(*Options)) *env {
	t.Helper()
	e := newEnv(t, declare(objs, declaration), true)
	if power != nil {
		power.t, power.e = t, e
	}
	e.csi.revokes = !canFence
	e.tweaks = append(e.tweaks, func(o *Options) {
		o.CanFence = canFence
		if backends != nil {
			o.Backends = backends
		}
		if power != nil {
			o.Power = power
		}
	})
	e.tweaks = append(e.tweaks, tweaks...)
	e.restart(t)
	return e
}

// events drains the Events the controller recorded.
func (e *env) events() []string {
	var out []string
	rec := e.c.recorder.(*record.FakeRecorder)
	for {
		select {
		case ev := <-rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func failoverFenceErrors(t *testing.T) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(fenceErrors.WithLabelValues(driver))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The modes of the storage backend: a declared driver without
// UNPUBLISH_FENCE is fenced with a plain unpublish (never the fence field),
// recorded, and its pod moves only after it (S1), with FencingComplete once
// the whole node is (S9); a driver that advertises UNPUBLISH_FENCE still
// gets fence=true; an undeclared driver without it is not fenced, as
// before; a value other than "true", or a declaration the API no longer
// holds (withdrawn, the cache behind), is no declaration.
func TestFenceByDetach(t *testing.T) {
	for _, tc := range []struct {
		name        string
		canFence    bool
		declaration string
		// liveDeclaration: what a live read of the CSIDriver finds, when it
		// is not what the cache holds ("-": no annotation).
		liveDeclaration string
		wantCalls       int
		wantMoved       bool
		wantEvent       string
		// wantMode is the mode the driver registers: the owner of
		// node-level state counts a declared driver as one that fences.
		wantMode fencemode.Mode
	}{
		{name: "declared, no UNPUBLISH_FENCE: a plain unpublish is the fence", declaration: "true", wantCalls: 1, wantMoved: true, wantMode: fencemode.RevokingUnpublish},
		{name: "UNPUBLISH_FENCE, declared too: fence=true", canFence: true, declaration: "true", wantCalls: 1, wantMoved: true, wantMode: fencemode.FenceField},
		{name: "UNPUBLISH_FENCE, not declared: fence=true", canFence: true, wantCalls: 1, wantMoved: true, wantMode: fencemode.FenceField},
		{name: "not declared, no UNPUBLISH_FENCE: unchanged, nothing sent, nothing moves", wantMode: fencemode.None},
		{name: "another value: no declaration, and a warning saying what was expected", declaration: "yes", wantMode: fencemode.None,
			wantEvent: `Warning InvalidFenceDeclaration CSIDriver ` + driver + ` has annotation ` + contract.UnpublishRevokesAccessAnnotation + `="yes", expected "true"`},
		{name: "declared in the cache, withdrawn in the API: read live, nothing sent, nothing moves", declaration: "true", liveDeclaration: "-", wantMode: fencemode.RevokingUnpublish},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := revokingEnv(t, objects(v1.ConditionUnknown, true), tc.canFence, tc.declaration, nil, nil)
			if tc.liveDeclaration != "" {
				e.client.PrependReactor("get", "csidrivers", func(k8stesting.Action) (bool, runtime.Object, error) {
					d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver, Annotations: map[string]string{contract.SafeDetachAnnotation: "true"}}}
					if tc.liveDeclaration != "-" {
						d.Annotations[contract.UnpublishRevokesAccessAnnotation] = tc.liveDeclaration
					}
					return true, d, nil
				})
			}
			err := e.sync(t)
			if tc.wantMoved && err != nil {
				t.Fatal(err)
			}
			if e.csi.calls != tc.wantCalls || e.csi.fieldSent != 0 {
				t.Fatalf("%d calls to the driver (%d with the fence field to a driver without UNPUBLISH_FENCE), want %d: %v",
					e.csi.calls, e.csi.fieldSent, tc.wantCalls, e.steps.log)
			}
			moved := e.steps.index("delete db-0") >= 0
			if moved != tc.wantMoved {
				t.Fatalf("pod moved %v, want %v: %v", moved, tc.wantMoved, e.steps.log)
			}
			fr, _ := e.fr.Get(context.Background(), "n1")
			complete := nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete)
			if !tc.wantMoved {
				if fencerecord.Find(fr, driver, "h1") != nil || complete {
					t.Errorf("recorded %+v, FencingComplete %v: nothing was fenced", fr, complete)
				}
			} else {
				if f, d := e.steps.index("fence h1"), e.steps.index("delete db-0"); f < 0 || f > d {
					t.Errorf("the pod moved before its volume was fenced (S1): %v", e.steps.log)
				}
				if !fencerecord.IsFenced(fr, driver, "h1") || !complete || fr.Status.Phase != fencingv1alpha1.PhaseFenced {
					t.Errorf("record %+v, FencingComplete %v: want h1 recorded fenced and the node fenced as a whole", fr, complete)
				}
			}
			_, ctx := ktesting.NewTestContext(t)
			e.c.registerDriver(ctx)
			lease, err := e.client.CoordinationV1().Leases("kube-system").Get(ctx, contract.RegistrationLeaseName(driver), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, can := lease.Annotations[fenceModeAnnotation], lease.Annotations[canFenceAnnotation]; got != string(tc.wantMode) || can != strconv.FormatBool(tc.wantMode.Fences()) {
				t.Errorf("registered mode %q, can fence %q; want %q, %v", got, can, tc.wantMode, tc.wantMode.Fences())
			}
			events := strings.Join(e.events(), "\n")
			if tc.wantEvent != "" && !strings.Contains(events, tc.wantEvent) {
				t.Errorf("Events %q, want %q", events, tc.wantEvent)
			}
		})
	}
}

// S8: the intent is in the record before the plain unpublish is sent, and
// a crash between the two loses nothing: the entry stays, the volume counts
// as quarantined on the node, nothing moves; the restarted process sends
// the unpublish and only then moves the pod.
func TestFenceByDetachWriteAhead(t *testing.T) {
	e := revokingEnv(t, objects(v1.ConditionUnknown, true), false, "true", nil, nil)
	var intentAtCall, crashed bool
	e.csi.before = func() {
		fr, err := e.fr.Get(context.Background(), "n1")
		v := fencerecord.Find(fr, driver, "h1")
		intentAtCall = err == nil && v != nil && v.StartedTime != nil && v.FencedTime == nil
		if crashed {
			return
		}
		// kill -9 between the record and the RPC: the unpublish never
		// reaches the driver, and nothing more reaches the API.
		crashed = true
		e.csi.err = errors.New("process killed before the unpublish was sent")
		for _, c := range []interface {
			PrependReactor(string, string, k8stesting.ReactionFunc)
		}{e.client, e.dyn} {
			c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
					return false, nil, nil
				}
				return true, nil, errors.New("process killed")
			})
		}
	}
	_ = e.sync(t)
	if !crashed || !intentAtCall {
		t.Fatalf("the intent was not recorded before the unpublish (crashed %v, intent at the call %v)", crashed, intentAtCall)
	}
	fr := e.record(t)
	if v := fencerecord.Find(fr, driver, "h1"); v == nil || v.FencedTime != nil || !fencerecord.MayBeQuarantined(fr, driver, "h1") {
		t.Fatalf("the intent is lost or taken for a fence after the crash: %+v", fr.Status.Volumes)
	}
	if e.steps.index("delete db-0") >= 0 || nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
		t.Fatalf("something moved on an intent alone: %v", e.steps.log)
	}

	// The restarted process finishes the fence, then the failover.
	e.client.ReactionChain = e.client.ReactionChain[1:]
	e.dyn.ReactionChain = e.dyn.ReactionChain[1:]
	e.csi.err = nil
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if !intentAtCall || e.csi.fenced("h1") != 1 {
		t.Fatalf("the retried unpublish: intent at the call %v, %d fences", intentAtCall, e.csi.fenced("h1"))
	}
	if f, d := e.steps.index("fence h1"), e.steps.index("delete db-0"); f < 0 || d < f {
		t.Fatalf("want the unpublish, then the pod moved: %v", e.steps.log)
	}
}

// S8, S2: once recorded, the fence by detach is sticky: not sent again,
// the node stays quarantined when it is back until its agent cleaned the
// volume, and is released then.
func TestFenceByDetachStickyUntilCleaned(t *testing.T) {
	e := revokingEnv(t, objects(v1.ConditionUnknown, true), false, "true", nil, nil)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if !fencerecord.IsFenced(e.record(t), driver, "h1") || e.steps.index("delete db-0") < 0 {
		t.Fatalf("no failover to start from: %v", e.steps.log)
	}
	e.attachmentReleased(t, "va1")
	e.setReady(t, "n1", v1.ConditionTrue)
	e.restart(t)
	for range 2 {
		if err := e.sync(t); err != nil {
			t.Fatal(err)
		}
	}
	if e.csi.calls != 1 {
		t.Errorf("unpublished %d times, want once", e.csi.calls)
	}
	fr := e.record(t)
	if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) == nil || !fencerecord.MayBeQuarantined(fr, driver, "h1") {
		t.Fatalf("quarantine lifted before the node agent cleaned the volume: taints %+v, record %+v", e.node(t, "n1").Spec.Taints, fr.Status.Volumes)
	}
	now := metav1.Now()
	fencerecord.Find(fr, driver, "h1").CleanedTime = &now
	if _, err := e.fr.UpdateStatus(context.Background(), fr); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	expectReleased(t, e)
}

// What is not a fence: an unpublish that fails or outlasts --timeout moves
// nothing; the reason is in the record, an Event and the fence error
// metric; the sync fails, so that it is retried with the per-node backoff;
// and the next backend of --fencing-backends (power) is tried, which, once
// it confirms, moves the pod.
func TestFailedFenceByDetachIsNoFence(t *testing.T) {
	storagePower := []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower}
	for _, tc := range []struct {
		name      string
		err       error
		hang      bool
		power     bool
		wantPower int
	}{
		{name: "refused", err: errors.New("FAILED_PRECONDITION: the disk is busy")},
		{name: "outlasts --timeout", hang: true},
		{name: "refused, then powered off", err: errors.New("FAILED_PRECONDITION: the disk is busy"), power: true, wantPower: 1},
		{name: "outlasts --timeout, then powered off", hang: true, power: true, wantPower: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			objs[0].(*v1.Node).Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
			var power *fakePower
			backends := []string{fencingv1alpha1.BackendStorage}
			if tc.power {
				power, backends = &fakePower{configured: true, confirmed: true}, storagePower
			}
			e := revokingEnv(t, objs, false, "true", backends, power, func(o *Options) { o.Timeout = 100 * time.Millisecond })
			e.csi.err, e.csi.hang = tc.err, tc.hang
			before := failoverFenceErrors(t)
			err := e.sync(t)
			if !tc.power && err == nil {
				t.Error("the sync succeeded: a failed fence must be retried")
			}
			fr := e.record(t)
			v := fencerecord.Find(fr, driver, "h1")
			if v == nil || v.FencedTime != nil || v.FenceError == "" || !fencerecord.MayBeQuarantined(fr, driver, "h1") {
				t.Fatalf("want the failure recorded, the volume kept as possibly quarantined: %+v", fr.Status.Volumes)
			}
			if got := failoverFenceErrors(t) - before; got != 1 {
				t.Errorf("fence error metric grew by %v, want 1", got)
			}
			if events := strings.Join(e.events(), "\n"); !strings.Contains(events, "Warning FenceFailed") {
				t.Errorf("no FenceFailed Event: %q", events)
			}
			if got := 0; power != nil {
				got = power.count()
				if got != tc.wantPower {
					t.Errorf("power fences %d, want %d", got, tc.wantPower)
				}
			}
			deleted := e.steps.index("delete db-0") >= 0
			if deleted != tc.power {
				t.Fatalf("pod moved %v, want %v: %v", deleted, tc.power, e.steps.log)
			}
			if deleted && e.steps.index("power off n1") > e.steps.index("delete db-0") {
				t.Errorf("the pod moved before the power fence: %v", e.steps.log)
			}
			if complete := nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete); complete != tc.power {
				t.Errorf("FencingComplete %v, want %v", complete, tc.power)
			}
		})
	}
}

// S9: FencingComplete only when every attachment of every driver on the
// node is fenced: our declared driver's fence by detach is not the node's
// while another driver's attachment there is not fenced.
func TestFenceByDetachIsNotTheWholeNode(t *testing.T) {
	e := revokingEnv(t, twoDrivers(objects(v1.ConditionUnknown, true)), false, "true", nil, nil)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if !fencerecord.IsFenced(e.record(t), driver, "h1") || e.steps.index("delete db-0") < 0 {
		t.Fatalf("the declared driver's pod did not fail over: %v", e.steps.log)
	}
	if nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
		t.Error("FencingComplete=True although another driver's attachment is not fenced")
	}
	if e.steps.index("delete web-0") >= 0 {
		t.Errorf("the other driver's pod moved unfenced: %v", e.steps.log)
	}
}

// A deleted Node's attachments of a declared driver are fenced by detach
// and released as a fence's are.
func TestFenceByDetachOfADeletedNode(t *testing.T) {
	e := revokingEnv(t, objects(v1.ConditionUnknown, false), false, "true", nil, nil)
	_, ctx := ktesting.NewTestContext(t)
	for _, p := range []string{"db-0"} {
		if err := e.client.CoreV1().Pods("ns").Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if e.csi.fenced("h1") != 1 || e.csi.fieldSent != 0 || !fencerecord.IsFenced(e.record(t), driver, "h1") {
		t.Fatalf("the deleted node's attachment was not fenced by detach: %d fences, %d with the field, %+v", e.csi.fenced("h1"), e.csi.fieldSent, e.record(t).Status.Volumes)
	}
	e.attachmentReleased(t, "va1")
}
