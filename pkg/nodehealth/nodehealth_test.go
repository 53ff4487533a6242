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

package nodehealth

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// S3, S4: only a node whose kubelet stopped talking is down, judged on this
// process's own clock; the kubelet's and the node lifecycle controller's
// clocks are never compared.
func TestCheck(t *testing.T) {
	// The node lifecycle controller's clock: the node went Unknown a minute
	// ago.
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	wentDown := metav1.NewTime(now.Add(-time.Minute))
	node := func(conds ...v1.NodeCondition) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Conditions: conds}}
	}
	ready := func(s v1.ConditionStatus) v1.NodeCondition {
		return v1.NodeCondition{Type: v1.NodeReady, Status: s, Reason: "KubeletNotReady", LastTransitionTime: wentDown}
	}
	lease := func(renew time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: LeaseNamespace},
			Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(renew)), LeaseDurationSeconds: ptr.To[int32](10)}}
	}
	type step struct {
		after time.Duration // this process's clock moves on by
		renew *time.Time    // the kubelet renews its Lease with this renewTime (its clock)
		gone  bool          // the Lease is deleted (with its Node, by the garbage collector)
	}
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	tests := []struct {
		name  string
		node  *v1.Node
		lease *coordinationv1.Lease
		steps []step // before the decision
		alive bool
	}{
		{name: "Ready", node: node(ready(v1.ConditionTrue)), alive: true},
		{name: "the kubelet reports the node not Ready itself", node: node(ready(v1.ConditionFalse)),
			lease: lease(now.Add(-time.Hour)), steps: []step{{after: time.Hour}}, alive: true},
		{name: "a node registered a moment ago, no Ready condition", node: node(), alive: true},
		{name: "unreachable, no heartbeat Lease", node: node(ready(v1.ConditionUnknown))},
		{name: "unreachable, Lease unchanged for its duration", node: node(ready(v1.ConditionUnknown)),
			lease: lease(now.Add(-time.Minute)), steps: []step{{after: 10 * time.Second}}},
		{name: "unreachable, Lease first seen a moment ago", node: node(ready(v1.ConditionUnknown)),
			lease: lease(now.Add(-time.Minute)), alive: true},
		{name: "unreachable, Lease unchanged for less than its duration", node: node(ready(v1.ConditionUnknown)),
			lease: lease(now.Add(-time.Minute)), steps: []step{{after: 9 * time.Second}}, alive: true},
		{name: "unreachable but renewing, the kubelet's clock an hour behind", node: node(ready(v1.ConditionUnknown)),
			lease: lease(now.Add(-time.Hour)), steps: []step{{after: 20 * time.Second}, {after: 2 * time.Second, renew: at(-time.Hour + 22*time.Second)}}, alive: true},
		{name: "dead, the kubelet's clock an hour ahead", node: node(ready(v1.ConditionUnknown)),
			lease: lease(now.Add(time.Hour)), steps: []step{{after: 10 * time.Second}}},
		{name: "Node gone, no Lease", node: nil},
		{name: "Node gone, Lease unchanged", lease: lease(now.Add(-time.Minute)), steps: []step{{after: 10 * time.Second}}},
		{name: "Node gone, Lease renewed", lease: lease(now.Add(-time.Minute)),
			steps: []step{{after: 10 * time.Second}, {after: time.Second, renew: at(time.Second)}}, alive: true},
		// kubectl delete node on a live node: its Lease goes with it, and
		// the kubelet registers both again a few seconds later.
		{name: "Node deleted while renewing, Lease gone with it", lease: lease(now.Add(-time.Minute)),
			steps: []step{{after: 9 * time.Second, renew: at(9 * time.Second)}, {after: 2 * time.Second, gone: true}}, alive: true},
		{name: "Node deleted while renewing, Lease gone for its duration", lease: lease(now.Add(-time.Minute)),
			steps: []step{{after: 9 * time.Second, renew: at(9 * time.Second)}, {after: 2 * time.Second, gone: true}, {after: 8 * time.Second}}},
		{name: "Node deleted long silent, Lease gone", lease: lease(now.Add(-time.Minute)),
			steps: []step{{after: 10 * time.Second}, {after: time.Second, gone: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.node != nil {
				objs = append(objs, tc.node)
			}
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			client := fake.NewClientset(objs...)
			clk := clocktesting.NewFakePassiveClock(now)
			o := NewObserverWithClock(client, clk)
			ctx := context.Background()
			leases := client.CoordinationV1().Leases(LeaseNamespace)
			if tc.lease != nil {
				o.Observe(tc.lease) // the informer's first sight of it
			}
			for _, s := range tc.steps {
				clk.SetTime(clk.Now().Add(s.after))
				if s.gone {
					if err := leases.Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				if s.renew != nil {
					l, err := leases.Get(ctx, "n1", metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(*s.renew))
					if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
						t.Fatal(err)
					}
					o.Observe(l) // the informer's update
				}
			}
			h, err := o.Check(ctx, "n1")
			if err != nil || h.Down() == tc.alive {
				t.Errorf("Check = %+v, %v, want alive=%v", h, err, tc.alive)
			}
			if alive := errors.Is(h.Err(), ErrNodeAlive); alive != tc.alive {
				t.Errorf("Err = %v, want alive=%v", h.Err(), tc.alive)
			}
		})
	}
}

// A renewal the informer has not delivered yet is seen by the live read of
// the decision itself.
func TestCheckSeesARenewalTheInformerMissed(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: LeaseNamespace},
		Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-time.Minute))), LeaseDurationSeconds: ptr.To[int32](10)}}
	client := fake.NewClientset(n, l)
	clk := clocktesting.NewFakePassiveClock(now)
	o := NewObserverWithClock(client, clk)
	o.Observe(l)
	clk.SetTime(now.Add(30 * time.Second))
	ctx := context.Background()
	if h, err := o.Check(ctx, "n1"); err != nil || !h.Down() {
		t.Fatalf("a Lease unchanged for 30 s of a 10 s duration: Check = %+v, %v", h, err)
	}
	l = l.DeepCopy()
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-time.Minute + time.Second)))
	if _, err := client.CoordinationV1().Leases(LeaseNamespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if h, err := o.Check(ctx, "n1"); err != nil || h.Down() {
		t.Errorf("renewed, not yet delivered by the informer: Check = %+v, %v, want alive", h, err)
	}
}

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		conds []v1.NodeCondition
		want  bool
	}{
		{nil, false},
		{[]v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}, false},
		{[]v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}}, false},
		{[]v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}, true},
	} {
		if got := Unreachable(&v1.Node{Status: v1.NodeStatus{Conditions: tc.conds}}); got != tc.want {
			t.Errorf("Unreachable(%v) = %v, want %v", tc.conds, got, tc.want)
		}
	}
}

// A node found alive only because its Lease looks fresh is looked at again
// when it would expire: no event announces that.
func TestRecheckAfter(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: LeaseNamespace},
		Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(now)), LeaseDurationSeconds: ptr.To[int32](10)}}
	clk := clocktesting.NewFakePassiveClock(now)
	o := NewObserverWithClock(fake.NewClientset(n, l), clk)
	o.Observe(l)
	clk.SetTime(now.Add(4 * time.Second))
	h, err := o.Check(context.Background(), "n1")
	if err != nil || h.Down() || h.RecheckAfter != 6*time.Second {
		t.Errorf("Check = %+v, %v, want alive, RecheckAfter 6s", h, err)
	}
	n.Status.Conditions = nil
	o = NewObserverWithClock(fake.NewClientset(n, l), clk)
	if h, err := o.Check(context.Background(), "n1"); err != nil || h.Down() || h.RecheckAfter != 0 {
		t.Errorf("a node without a Ready condition: Check = %+v, %v, want alive, RecheckAfter 0 (an event will tell)", h, err)
	}
}
