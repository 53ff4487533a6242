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

package fencerecord

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

func TestRecordForceDeletedPods(t *testing.T) {
	ctx := context.Background()
	pod := func(uid, reason string) fencingv1alpha1.ForceDeletedPod {
		return fencingv1alpha1.ForceDeletedPod{Namespace: "ns", Name: "p-" + uid, UID: types.UID(uid), TerminationReason: reason}
	}
	full := fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced)
	for i := range MaxForceDeletedPods {
		p := pod(fmt.Sprint(i), "Eviction")
		p.DeletedTime = &t0
		full.Status.ForceDeletedPods = append(full.Status.ForceDeletedPods, p)
	}
	for _, tc := range []struct {
		name     string
		objs     []*fencingv1alpha1.FencingRequest
		record   []fencingv1alpha1.ForceDeletedPod
		batch    bool     // recorded in one call (else one call each)
		wantUIDs []string // in order; nil: no request
		want     map[string]string
	}{
		{
			name:     "recorded in the node's request",
			objs:     []*fencingv1alpha1.FencingRequest{fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing)},
			record:   []fencingv1alpha1.ForceDeletedPod{pod("a", "IntolerableTaint"), pod("b", "Eviction")},
			wantUIDs: []string{"a", "b"},
			want:     map[string]string{"a": "IntolerableTaint", "b": "Eviction"},
		},
		{
			name:     "a pod recorded again keeps one entry, the last reason",
			objs:     []*fencingv1alpha1.FencingRequest{fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing)},
			record:   []fencingv1alpha1.ForceDeletedPod{pod("a", "Eviction"), pod("b", "Eviction"), pod("a", "IntolerableTaint")},
			wantUIDs: []string{"b", "a"},
			want:     map[string]string{"a": "IntolerableTaint"},
		},
		{
			name:     "a batch is one write, the last reason of a pod in it kept",
			objs:     []*fencingv1alpha1.FencingRequest{fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing)},
			record:   []fencingv1alpha1.ForceDeletedPod{pod("a", "Eviction"), pod("b", "Eviction"), pod("a", "IntolerableTaint")},
			batch:    true,
			wantUIDs: []string{"b", "a"},
			want:     map[string]string{"a": "IntolerableTaint", "b": "Eviction"},
		},
		{
			name:     "bounded: the oldest goes",
			objs:     []*fencingv1alpha1.FencingRequest{full},
			record:   []fencingv1alpha1.ForceDeletedPod{pod("new", "Eviction")},
			wantUIDs: append(uids(1, MaxForceDeletedPods), "new"),
			want:     map[string]string{"new": "Eviction", "1": "Eviction"},
		},
		{
			name:   "no request: nothing is created",
			record: []fencingv1alpha1.ForceDeletedPod{pod("a", "Eviction")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn, c := newClient(t, tc.objs...)
			calls := [][]fencingv1alpha1.ForceDeletedPod{tc.record}
			if !tc.batch {
				calls = nil
				for _, p := range tc.record {
					calls = append(calls, []fencingv1alpha1.ForceDeletedPod{p})
				}
			}
			for _, call := range calls {
				if err := RecordForceDeletedPods(ctx, c, "node-1", call); err != nil {
					t.Fatal(err)
				}
			}
			if writes := countWrites(dyn); tc.wantUIDs != nil && writes != len(calls) {
				t.Errorf("%d writes for %d calls", writes, len(calls))
			}
			got, err := c.Get(ctx, "node-1")
			if tc.wantUIDs == nil {
				if err == nil {
					t.Fatalf("a request was created: %+v", got.Status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var gotUIDs []string
			for _, p := range got.Status.ForceDeletedPods {
				gotUIDs = append(gotUIDs, string(p.UID))
				if p.DeletedTime == nil {
					t.Errorf("%s: no deletedTime", p.UID)
				}
			}
			if fmt.Sprint(gotUIDs) != fmt.Sprint(tc.wantUIDs) {
				t.Errorf("entries %v, want %v", gotUIDs, tc.wantUIDs)
			}
			for uid, reason := range tc.want {
				if p, ok := ForceDeletedPodReason(got, types.UID(uid)); !ok || p.TerminationReason != reason {
					t.Errorf("reason of %s: %q (found %v), want %q", uid, p.TerminationReason, ok, reason)
				}
			}
			if _, ok := ForceDeletedPodReason(got, "0"); ok && len(tc.objs) > 0 && tc.objs[0] == full {
				t.Errorf("the oldest entry is still there")
			}
		})
	}
}

func uids(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

// Issue 19 hole 12: a power fence's confirmation holds while the node's
// Ready condition has not transitioned since the fence, judged on the node
// lifecycle controller's own times, whatever its clock says against this
// process's.
func TestNodeFencedAcrossClocks(t *testing.T) {
	// This process confirmed the node off at noon by its clock.
	confirmed := metav1.NewTime(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	node := func(status v1.ConditionStatus, transition time.Duration) *v1.Node {
		return &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: status,
			LastTransitionTime: metav1.NewTime(confirmed.Add(transition))}}}}
	}
	record := func(notReadySince *metav1.Time) *fencingv1alpha1.FencingRequest {
		r := fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced)
		r.Status.NodeFence = &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendPower, ConfirmedTime: &confirmed, NotReadySince: notReadySince}
		return r
	}
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(confirmed.Add(d)); return &t }
	for _, tc := range []struct {
		name   string
		fr     *fencingv1alpha1.FencingRequest
		node   *v1.Node
		fenced bool
	}{
		{"same episode, controller clocks agree", record(at(-time.Minute)), node(v1.ConditionUnknown, -time.Minute), true},
		{"same episode, the node lifecycle controller's clock an hour ahead", record(at(time.Hour)), node(v1.ConditionUnknown, time.Hour), true},
		{"Ready since, then down again, its clock an hour behind", record(at(-time.Hour)), node(v1.ConditionUnknown, -time.Hour+time.Minute), false},
		{"Ready now", record(at(-time.Minute)), node(v1.ConditionTrue, time.Minute), false},
		// No notReadySince: nothing but a comparison across clocks is
		// left, and its answer cannot be trusted either way.
		{"no notReadySince, Ready since, then down again, its clock an hour behind", record(nil), node(v1.ConditionUnknown, -time.Hour+time.Minute), false},
		{"no notReadySince, down since before the fence by both clocks", record(nil), node(v1.ConditionUnknown, -time.Minute), false},
	} {
		if got := NodeFenced(tc.fr, tc.node); got != tc.fenced {
			t.Errorf("%s: NodeFenced = %v, want %v", tc.name, got, tc.fenced)
		}
	}
}

// countWrites returns how many writes the client was asked for.
func countWrites(dyn *dynamicfake.FakeDynamicClient) int {
	n := 0
	for _, a := range dyn.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			n++
		}
	}
	return n
}
