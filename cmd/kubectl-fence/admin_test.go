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

package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fenceview"
)

// The arguments of fence, release, pause and resume: one NODE for the
// first two, none for the others, --reason required to pause; each verb
// has its own flags only. They are refused before any API access.
func TestAdminArguments(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"fence", "--reason=x"}, "want exactly one NODE"},
		{[]string{"fence", "node-a", "--storm-guard-namespace=x"}, "unknown flag: --storm-guard-namespace"},
		{[]string{"fence", "node-a", "-n", "x"}, "unknown shorthand flag: 'n'"},
		{[]string{"release", "node-a", "node-b"}, "want exactly one NODE"},
		{[]string{"release", "node-a", "--reason=x"}, "unknown flag: --reason"},
		{[]string{"pause"}, "--reason is required"},
		{[]string{"pause", "node-a", "--reason=m"}, "unexpected arguments"},
		{[]string{"resume", "now"}, "unexpected arguments"},
		{[]string{"resume", "--reason=x"}, "unknown flag: --reason"},
		{[]string{"pause", "--reason=m", "--dry-run=maybe"}, `invalid dry-run value ("maybe")`},
		{[]string{"release", "node-a", "-o", "wide"}, "unable to match a printer suitable for the output format \"wide\""},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			kube, dyn := fake.NewClientset(), fakeDynamic()
			err := newTestPlugin(t, kube, dyn, "").execute(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if n := len(kube.Actions()) + len(dyn.Actions()); n != 0 {
				t.Errorf("%d API calls", n)
			}
		})
	}
}

func node(name string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
}

func request(t *testing.T, name string, origin fencingv1alpha1.Origin, finalizers []string, vols ...fencingv1alpha1.FencedVolume) runtime.Object {
	t.Helper()
	u, err := fencingv1alpha1.ToUnstructured(&fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Finalizers: finalizers},
		Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: name, Origin: origin},
		Status:     fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseFenced, Volumes: vols},
	})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// released sets spec.released and the phase of a request.
func released(t *testing.T, obj runtime.Object, phase fencingv1alpha1.Phase) runtime.Object {
	t.Helper()
	u := obj.(*unstructured.Unstructured)
	if err := unstructured.SetNestedField(u.Object, true, "spec", "released"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, string(phase), "status", "phase"); err != nil {
		t.Fatal(err)
	}
	return u
}

// fakeDynamic is the dynamic fake with FencingRequests, deleting as the
// apiserver does: an object with finalizers only gets its
// deletionTimestamp.
func fakeDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList", fencingv1alpha1.FenceAgentConfigResource: "FenceAgentConfigList"}, objs...)
	dyn.PrependReactor("delete", fencingv1alpha1.Resource.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		obj, err := dyn.Tracker().Get(fencingv1alpha1.Resource, "", name)
		if err != nil {
			return false, nil, nil
		}
		u := obj.(*unstructured.Unstructured)
		if len(u.GetFinalizers()) == 0 {
			return false, nil, nil
		}
		now := metav1.Now()
		u.SetDeletionTimestamp(&now)
		return true, nil, dyn.Tracker().Update(fencingv1alpha1.Resource, u, "")
	})
	return dyn
}

// crdAccepts checks u against the FencingRequest CRD's schema where the
// plugin fills it in: spec.nodeName required and not empty, origin one of
// the enum, and the root rule that the name is spec.nodeName (evaluated
// here by hand; the test checks the CRD still has it).
func crdAccepts(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/kubernetes/base/crd-fencingrequests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "rule: self.metadata.name == self.spec.nodeName") {
		t.Fatal("the CRD's rule metadata.name == spec.nodeName is gone: check what fence creates against its rules")
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Required   []string `json:"required"`
								Properties struct {
									Origin struct {
										Enum []string `json:"enum"`
									} `json:"origin"`
								} `json:"properties"`
							} `json:"spec"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil || len(crd.Spec.Versions) != 1 {
		t.Fatalf("reading the CRD: %v (%d versions)", err, len(crd.Spec.Versions))
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec
	nodeName, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
	origin, _, _ := unstructured.NestedString(u.Object, "spec", "origin")
	if !slices.Contains(spec.Required, "nodeName") || nodeName == "" {
		t.Errorf("spec.nodeName %q (required %v)", nodeName, spec.Required)
	}
	if !slices.Contains(spec.Properties.Origin.Enum, origin) {
		t.Errorf("spec.origin %q not in the CRD's enum %v", origin, spec.Properties.Origin.Enum)
	}
	if u.GetName() != nodeName {
		t.Errorf("metadata.name %q is not spec.nodeName %q: the CRD's rule refuses it", u.GetName(), nodeName)
	}
}

// fence creates the admin's request as the CRD accepts it, and refuses,
// creating nothing, when the node has a request already (the admin's or
// the failover's record) or does not exist.
func TestFence(t *testing.T) {
	tests := []struct {
		name     string
		nodes    []runtime.Object
		requests []runtime.Object
		reason   string
		wantErr  string
		wantOut  []string
		notOut   []string
	}{
		{name: "NotReady node", nodes: []runtime.Object{node("node-a", corev1.ConditionUnknown)}, reason: "rack 7 down",
			wantOut: []string{"fencingrequest/node-a created (origin Manual, reason: rack 7 down)", "kubectl fence release node-a"}, notOut: []string{"is Ready"}},
		{name: "Ready node says its storage is fenced while it runs", nodes: []runtime.Object{node("node-a", corev1.ConditionTrue)},
			wantOut: []string{"fencingrequest/node-a created (origin Manual)", "node node-a is Ready: its volumes' storage is fenced while it runs"}},
		{name: "the admin's request exists", nodes: []runtime.Object{node("node-a", corev1.ConditionTrue)},
			requests: []runtime.Object{request(t, "node-a", fencingv1alpha1.OriginManual, nil)},
			wantErr:  "fencingrequest/node-a already exists (origin Manual, Fenced): nothing created; `kubectl fence release node-a` withdraws it"},
		{name: "the failover's record exists", nodes: []runtime.Object{node("node-a", corev1.ConditionFalse)},
			requests: []runtime.Object{request(t, "node-a", fencingv1alpha1.OriginAutomatic, []string{contract.RecordFinalizer})},
			wantErr:  "already exists (origin Automatic, Fenced): nothing created; it is the failover's record"},
		{name: "the admin's request, released, waiting for its cleanup", nodes: []runtime.Object{node("node-a", corev1.ConditionTrue)},
			requests: []runtime.Object{released(t, request(t, "node-a", fencingv1alpha1.OriginManual, []string{contract.RecordFinalizer}), fencingv1alpha1.PhaseFenced)},
			wantErr:  "already exists (origin Manual, Fenced, released): nothing created; it was released and waits for its volumes to be cleaned"},
		{name: "the admin's request, released and Complete: replaced", nodes: []runtime.Object{node("node-a", corev1.ConditionFalse)},
			requests: []runtime.Object{released(t, request(t, "node-a", fencingv1alpha1.OriginManual, nil), fencingv1alpha1.PhaseComplete)},
			wantOut:  []string{"fencingrequest/node-a of an earlier fence was released and Complete: replaced", "fencingrequest/node-a created (origin Manual)"}},
		{name: "no such node", nodes: nil, wantErr: `node "node-a" not found: nothing created`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(tc.nodes...)
			dyn := fakeDynamic(tc.requests...)
			args := []string{"fence", "node-a"}
			if tc.reason != "" {
				args = append(args, "--reason="+tc.reason)
			}
			p := newTestPlugin(t, kube, dyn, "")
			err := p.execute(args...)
			out := p.out
			creates := 0
			for _, a := range dyn.Actions() {
				if a.GetVerb() == "create" {
					creates++
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if creates != 0 {
					t.Errorf("refused, yet %d creates", creates)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.notOut {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
			obj, err := dyn.Tracker().Get(fencingv1alpha1.Resource, "", "node-a")
			if err != nil {
				t.Fatal(err)
			}
			u := obj.(*unstructured.Unstructured)
			crdAccepts(t, u)
			fr, err := fencingv1alpha1.FromUnstructured(u)
			if err != nil {
				t.Fatal(err)
			}
			if fr.Spec.Origin != fencingv1alpha1.OriginManual || fr.Spec.Reason != tc.reason || !fr.ManualActive() {
				t.Errorf("created spec %+v: not an active manual request with reason %q", fr.Spec, tc.reason)
			}
		})
	}
}

// release withdraws the admin's request through its spec (spec.released,
// by an update; never a delete), the output saying what stays pending, and
// refuses the failover's record, changing nothing. The failover writes the
// request's status while it fences: a release that meets that write (a
// conflict) reads the request again and releases it (seen failing the e2e
// test TestKubectlFenceOnRealAPIServer when it told the admin to run it
// again).
func TestRelease(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	fenced := fencingv1alpha1.FencedVolume{Driver: "d", VolumeHandle: "v1", FencedTime: &t0}
	cleaned := fencingv1alpha1.FencedVolume{Driver: "d", VolumeHandle: "v2", FencedTime: &t0, CleanedTime: &t0}
	tests := []struct {
		name    string
		request runtime.Object
		// conflicts: the first updates that meet a concurrent write.
		conflicts    int
		wantErr      string
		wantOut      string
		wantUpdates  int
		wantReleased bool
	}{
		{name: "with a record: released, kept", request: request(t, "node-a", fencingv1alpha1.OriginManual, []string{contract.RecordFinalizer}, fenced, cleaned),
			wantOut: "fencingrequest/node-a released (spec.released=true): nothing new is fenced for it; the node stays quarantined until the node agent has cleaned each volume recorded in it (1 not cleaned yet)", wantUpdates: 1, wantReleased: true},
		{name: "nothing recorded: released, kept", request: request(t, "node-a", "", nil),
			wantOut: "nothing recorded in it is left to clean: the failover lifts the quarantine, and the request is Complete and kept as the record", wantUpdates: 1, wantReleased: true},
		{name: "the failover's record is refused", request: request(t, "node-a", fencingv1alpha1.OriginAutomatic, []string{contract.RecordFinalizer}, fenced),
			wantErr: "fencingrequest/node-a is the failover's automatic record (origin Automatic, Fenced), not an admin's request: nothing changed; the controller releases the node itself once every volume recorded there is cleaned"},
		{name: "no request", wantErr: `node "node-a" has no FencingRequest: nothing to release`},
		{name: "a conflict: read again, released", request: request(t, "node-a", fencingv1alpha1.OriginManual, []string{contract.RecordFinalizer}, fenced), conflicts: 1,
			wantOut: "fencingrequest/node-a released (spec.released=true)", wantUpdates: 2, wantReleased: true},
		{name: "conflicts every time", request: request(t, "node-a", fencingv1alpha1.OriginManual, []string{contract.RecordFinalizer}, fenced), conflicts: 100,
			wantErr: "kept changing while it was released: nothing changed; run it again", wantUpdates: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.request != nil {
				objs = append(objs, tc.request)
			}
			dyn := fakeDynamic(objs...)
			left := tc.conflicts
			dyn.PrependReactor("update", "fencingrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if left == 0 {
					return false, nil, nil
				}
				left--
				return true, nil, apierrors.NewConflict(fencingv1alpha1.Resource.GroupResource(), "node-a", errors.New("the object has been modified"))
			})
			p := newTestPlugin(t, nil, dyn, "")
			err := p.execute("release", "node-a")
			out := p.out
			writes := map[string]int{}
			for _, a := range dyn.Actions() {
				writes[a.GetVerb()]++
			}
			if writes["delete"] != 0 || writes["update"] != tc.wantUpdates {
				t.Errorf("%d deletes, %d updates; want none, %d", writes["delete"], writes["update"], tc.wantUpdates)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("output:\n%s\nwant %q", out.String(), tc.wantOut)
			}
			obj, err := dyn.Tracker().Get(fencingv1alpha1.Resource, "", "node-a")
			if err != nil {
				t.Fatalf("the request is gone: %v", err)
			}
			fr, err := fencingv1alpha1.FromUnstructured(obj)
			if err != nil {
				t.Fatal(err)
			}
			if fr.Spec.Released != tc.wantReleased || fr.ManualActive() || fr.DeletionTimestamp != nil {
				t.Errorf("spec %+v, active %v, deleted %v: want released, not active, not deleted", fr.Spec, fr.ManualActive(), fr.DeletionTimestamp)
			}
		})
	}
	// A second release writes nothing more; nor does one of a request an
	// older plugin withdrew by deleting it.
	deleted := request(t, "node-a", fencingv1alpha1.OriginManual, []string{contract.RecordFinalizer}, fenced).(*unstructured.Unstructured)
	now := metav1.Now()
	deleted.SetDeletionTimestamp(&now)
	for _, start := range []runtime.Object{request(t, "node-a", fencingv1alpha1.OriginManual, []string{contract.RecordFinalizer}, fenced), deleted} {
		dyn := fakeDynamic(start)
		for i := range 2 {
			p := newTestPlugin(t, nil, dyn, "")
			if err := p.execute("release", "node-a"); err != nil {
				t.Fatal(err)
			}
			out := p.out
			if i == 1 && !strings.Contains(out.String(), "already withdrawn") {
				t.Errorf("release #2: output %q, want already withdrawn", out.String())
			}
		}
		updates := 0
		for _, a := range dyn.Actions() {
			if a.GetVerb() == "update" {
				updates++
			}
		}
		if want := map[bool]int{true: 0, false: 1}[start == deleted]; updates != want {
			t.Errorf("%d updates over two releases, want %d", updates, want)
		}
	}
}

// pause and resume set and remove the pause switch by patch, leaving the
// storm guard's admissions alone; pause creates the Lease where no sidecar
// has yet; resume of what is not paused writes nothing.
func TestPauseResume(t *testing.T) {
	admissions := contract.Prefix + "/fencing-nodes"
	lease := func(ns string, ann map[string]string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fenceview.StormGuardLease, Namespace: ns, Annotations: ann}}
	}
	tests := []struct {
		name       string
		verb       string
		ns         string
		lease      *coordinationv1.Lease
		want       map[string]string // the Lease's annotations after; nil: no Lease
		wantOut    string
		wantWrites []string
	}{
		{name: "pause keeps the admissions", verb: "pause", ns: "kube-system", lease: lease("kube-system", map[string]string{admissions: "node-a"}),
			want: map[string]string{admissions: "node-a", fenceview.PausedAnnotation: "storage maintenance"}, wantOut: "fencing paused (Lease kube-system/csi-fence-storm-guard, reason: storage maintenance)", wantWrites: []string{"patch"}},
		{name: "pause creates the Lease", verb: "pause", ns: "csi-fence-system",
			want: map[string]string{fenceview.PausedAnnotation: "storage maintenance"}, wantOut: "fencing paused (Lease csi-fence-system/csi-fence-storm-guard", wantWrites: []string{"create"}},
		{name: "pause again says what it replaced", verb: "pause", ns: "kube-system", lease: lease("kube-system", map[string]string{fenceview.PausedAnnotation: "old"}),
			want: map[string]string{fenceview.PausedAnnotation: "storage maintenance"}, wantOut: "it was already paused: old", wantWrites: []string{"patch"}},
		{name: "resume keeps the admissions", verb: "resume", ns: "kube-system", lease: lease("kube-system", map[string]string{admissions: "node-a", fenceview.PausedAnnotation: "x"}),
			want: map[string]string{admissions: "node-a"}, wantOut: "fencing resumed (Lease kube-system/csi-fence-storm-guard; was paused: x)", wantWrites: []string{"patch"}},
		{name: "resume when not paused", verb: "resume", ns: "kube-system", lease: lease("kube-system", map[string]string{admissions: "node-a"}),
			want: map[string]string{admissions: "node-a"}, wantOut: "fencing is not paused"},
		{name: "resume with no Lease", verb: "resume", ns: "kube-system", wantOut: "fencing is not paused (no Lease kube-system/csi-fence-storm-guard)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			kube := fake.NewClientset(objs...)
			args := []string{tc.verb, "--storm-guard-namespace=" + tc.ns}
			if tc.verb == "pause" {
				args = append(args, "--reason=storage maintenance")
			}
			p := newTestPlugin(t, kube, nil, "")
			if err := p.execute(args...); err != nil {
				t.Fatal(err)
			}
			out := p.out
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("output:\n%s\nwant %q", out.String(), tc.wantOut)
			}
			var writes []string
			for _, a := range kube.Actions() {
				if v := a.GetVerb(); v != "get" {
					writes = append(writes, v)
				}
			}
			if !slices.Equal(writes, tc.wantWrites) {
				t.Errorf("writes %v, want %v", writes, tc.wantWrites)
			}
			got, err := kube.CoordinationV1().Leases(tc.ns).Get(context.Background(), fenceview.StormGuardLease, metav1.GetOptions{})
			if tc.want == nil {
				if err == nil {
					t.Errorf("a Lease was created: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Annotations) != len(tc.want) {
				t.Errorf("annotations %v, want %v", got.Annotations, tc.want)
			}
			for k, v := range tc.want {
				if got.Annotations[k] != v {
					t.Errorf("annotations %v, want %v", got.Annotations, tc.want)
				}
			}
		})
	}
}
