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

package machinefence

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

var infraGVR = schema.GroupVersionResource{Group: "infrastructure.example.io", Version: "v1alpha1", Resource: "testmachines"}

const infraAPIVersion = "infrastructure.example.io/v1alpha1"

func mapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{infraGVR.GroupVersion(), MachineResource.GroupVersion()})
	m.AddSpecific(infraGVR.GroupVersion().WithKind("TestMachine"), infraGVR, infraGVR.GroupVersion().WithResource("testmachine"), meta.RESTScopeNamespace)
	m.AddSpecific(MachineResource.GroupVersion().WithKind("Machine"), MachineResource, MachineResource.GroupVersion().WithResource("machine"), meta.RESTScopeNamespace)
	return m
}

// machine is a v1beta2 Machine of node (nodeRef "" leaves it out).
func machine(name, uid, nodeRef, providerID string, deleting bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]interface{}{"name": name, "namespace": "ns", "uid": uid},
		"spec": map[string]interface{}{
			"clusterName":       "c",
			"infrastructureRef": map[string]interface{}{"apiGroup": infraGVR.Group, "kind": "TestMachine", "name": name},
		},
	}}
	if providerID != "" {
		_ = unstructured.SetNestedField(u.Object, providerID, "spec", "providerID")
	}
	if nodeRef != "" {
		_ = unstructured.SetNestedField(u.Object, nodeRef, "status", "nodeRef", "name")
	}
	if deleting {
		now := metav1.Now()
		u.SetDeletionTimestamp(&now)
		u.SetFinalizers([]string{"machine.cluster.x-k8s.io"})
		_ = unstructured.SetNestedSlice(u.Object, []interface{}{map[string]interface{}{
			"type": "Deleting", "status": "True", "reason": "WaitingForInfrastructureDeletion", "message": "Waiting for TestMachine to be deleted"}}, "status", "conditions")
	}
	return u
}

func infra(name, uid string, deleting bool, message string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": infraAPIVersion, "kind": "TestMachine",
		"metadata": map[string]interface{}{"name": name, "namespace": "ns", "uid": uid},
	}}
	if deleting {
		now := metav1.Now()
		u.SetDeletionTimestamp(&now)
		u.SetFinalizers([]string{"testmachine.infrastructure.example.io"})
	}
	if message != "" {
		_ = unstructured.SetNestedSlice(u.Object, []interface{}{map[string]interface{}{
			"type": "Ready", "status": "False", "reason": "DeletionRefused", "message": message}}, "status", "conditions")
	}
	return u
}

func node(name, machineName, providerID string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
	if machineName != "" {
		n.Annotations = map[string]string{MachineAnnotation: machineName, ClusterNamespaceAnnotation: "ns"}
	}
	return n
}

func newBackend(mode Mode, objs ...runtime.Object) (*Backend, *dynamicfake.FakeDynamicClient) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		MachineResource: "MachineList", infraGVR: "TestMachineList"}, objs...)
	return &Backend{Dynamic: client, Mapper: mapper(), Mode: mode}, client
}

// withOwner returns obj owned by the Machine name of uid.
func withOwner(obj *unstructured.Unstructured, name, uid string) *unstructured.Unstructured {
	obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: MachineResource.GroupVersion().String(), Kind: "Machine", Name: name, UID: types.UID(uid)}})
	return obj
}

// withProviderID returns obj with spec.providerID id.
func withProviderID(obj *unstructured.Unstructured, id string) *unstructured.Unstructured {
	_ = unstructured.SetNestedField(obj.Object, id, "spec", "providerID")
	return obj
}

func TestLocate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		node    *v1.Node
		objs    []runtime.Object
		wantErr string
		want    fencingv1alpha1.MachineTarget
		// wantSeen: the InfraMachine was read being deleted through its
		// provider (Infrastructure.DeletionSeenTime set).
		wantSeen bool
	}{
		{name: "the node's Machine and instance", node: node("n1", "m1", "test://n1"),
			objs: []runtime.Object{machine("m1", "u1", "n1", "test://n1", false), infra("m1", "i1", false, "")},
			want: fencingv1alpha1.MachineTarget{Namespace: "ns", Name: "m1", UID: "u1", ProviderID: "test://n1",
				Infrastructure: fencingv1alpha1.InfrastructureRef{APIVersion: infraAPIVersion, Kind: "TestMachine", Name: "m1", UID: "i1"}}},
		{name: "a node without a Machine", node: node("n1", "", ""), wantErr: ErrNoMachine.Error()},
		{name: "a Machine that does not exist", node: node("n1", "m1", ""), wantErr: "does not exist"},
		{name: "a Machine without nodeRef", node: node("n1", "m1", ""),
			objs: []runtime.Object{machine("m1", "u1", "", "", false), infra("m1", "i1", false, "")}, wantErr: "has no status.nodeRef"},
		{name: "a Machine whose nodeRef names another node", node: node("n1", "m1", ""),
			objs: []runtime.Object{machine("m1", "u1", "n2", "", false), infra("m1", "i1", false, "")}, wantErr: "is the Machine of node n2"},
		{name: "a Machine of another instance", node: node("n1", "m1", "test://old"),
			objs: []runtime.Object{machine("m1", "u1", "n1", "test://new", false), infra("m1", "i1", false, "")}, wantErr: "not the same instance"},
		{name: "a Machine being deleted by someone else", node: node("n1", "m1", ""),
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true), infra("m1", "i1", true, "")},
			want: fencingv1alpha1.MachineTarget{Namespace: "ns", Name: "m1", UID: "u1", DeletionStartedBy: StartedByOther,
				Infrastructure: fencingv1alpha1.InfrastructureRef{APIVersion: infraAPIVersion, Kind: "TestMachine", Name: "m1", UID: "i1"}},
			wantSeen: true},
		{name: "an InfraMachine owned by its Machine, of its instance", node: node("n1", "m1", "test://n1"),
			objs: []runtime.Object{machine("m1", "u1", "n1", "test://n1", false), withProviderID(withOwner(infra("m1", "i1", false, ""), "m1", "u1"), "test://n1")},
			want: fencingv1alpha1.MachineTarget{Namespace: "ns", Name: "m1", UID: "u1", ProviderID: "test://n1",
				Infrastructure: fencingv1alpha1.InfrastructureRef{APIVersion: infraAPIVersion, Kind: "TestMachine", Name: "m1", UID: "i1"}}},
		// Nothing could tell its provider's deletion from its removal by
		// hand, a move or an edited infrastructureRef.
		{name: "an InfraMachine already gone: refused", node: node("n1", "m1", ""),
			objs: []runtime.Object{machine("m1", "u1", "n1", "", false)}, wantErr: "TestMachine m1 is already gone"},
		{name: "a Machine being deleted whose InfraMachine is already gone: refused", node: node("n1", "m1", ""),
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true)}, wantErr: "TestMachine m1 is already gone"},
		{name: "an edited infrastructureRef naming another Machine's InfraMachine: refused", node: node("n1", "m1", ""),
			objs: []runtime.Object{machine("m1", "u1", "n1", "", false), withOwner(infra("m1", "i1", false, ""), "m2", "u2")}, wantErr: "owned by another Machine"},
		{name: "an InfraMachine of another instance than the node's: refused", node: node("n1", "m1", "test://n1"),
			objs: []runtime.Object{machine("m1", "u1", "n1", "", false), withProviderID(infra("m1", "i1", false, ""), "test://n7")}, wantErr: "node n1 has test://n1"},
		{name: "an InfraMachine of another instance than the Machine's: refused", node: node("n1", "m1", ""),
			objs: []runtime.Object{machine("m1", "u1", "n1", "test://n1", false), withProviderID(infra("m1", "i1", false, ""), "test://n7")}, wantErr: "its Machine test://n1"},
		{name: "a control plane's Machine: refused", node: node("n1", "m1", ""),
			objs: []runtime.Object{labelled(machine("m1", "u1", "n1", "", false), ControlPlaneLabel), infra("m1", "i1", false, "")}, wantErr: "is a control plane's"},
		{name: "an InfraMachine being deleted while paused is not seen deleted by its provider", node: node("n1", "m1", ""),
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true), annotated(infra("m1", "i1", true, ""), PausedAnnotation)},
			want: fencingv1alpha1.MachineTarget{Namespace: "ns", Name: "m1", UID: "u1", DeletionStartedBy: StartedByOther,
				Infrastructure: fencingv1alpha1.InfrastructureRef{APIVersion: infraAPIVersion, Kind: "TestMachine", Name: "m1", UID: "i1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, client := newBackend(ModeDelete, tc.objs...)
			got, err := b.Locate(context.Background(), tc.node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one saying %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			} else {
				seen := got.Infrastructure.DeletionSeenTime != nil
				got.Infrastructure.DeletionSeenTime = nil
				if got != tc.want || seen != tc.wantSeen {
					t.Fatalf("got %+v (deletion seen %v), want %+v (deletion seen %v)", got, seen, tc.want, tc.wantSeen)
				}
			}
			// Locating reads; it never asks anything of a Machine.
			for _, a := range client.Actions() {
				if a.GetVerb() != "get" {
					t.Errorf("Locate did %s %s", a.GetVerb(), a.GetResource())
				}
			}
		})
	}
}

func TestRemediate(t *testing.T) {
	target := fencingv1alpha1.MachineTarget{Namespace: "ns", Name: "m1", UID: "u1",
		Infrastructure: fencingv1alpha1.InfrastructureRef{APIVersion: infraAPIVersion, Kind: "TestMachine", Name: "m1", UID: "i1"}}
	for _, tc := range []struct {
		name        string
		mode        Mode
		objs        []runtime.Object
		want        string
		wantDeleted bool   // the fake's Machine m1 is gone
		wantUID     string // the Machine m1 left, if not deleted
		wantAnn     bool
		wantOurs    bool // the request carries RemediationRequestedAnnotation
		wantErr     string
	}{
		{name: "deletes the Machine", mode: ModeDelete, objs: []runtime.Object{machine("m1", "u1", "n1", "", false)}, want: StartedByUs, wantDeleted: true},
		{name: "a Machine already being deleted is followed, not deleted again", mode: ModeDelete,
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true)}, want: StartedByOther, wantUID: "u1"},
		{name: "a Machine replaced under the same name is not deleted", mode: ModeDelete,
			objs: []runtime.Object{machine("m1", "u2", "n9", "", false)}, want: StartedByOther, wantUID: "u2"},
		{name: "a Machine gone is someone else's deletion", mode: ModeDelete, want: StartedByOther, wantDeleted: true},
		{name: "MachineHealthCheck is asked to remediate, the request marked ours", mode: ModeMHC,
			objs: []runtime.Object{machine("m1", "u1", "n1", "", false)}, want: StartedByMHC, wantUID: "u1", wantAnn: true, wantOurs: true},
		{name: "a Machine labelled control plane since it was located is not deleted", mode: ModeDelete,
			objs: []runtime.Object{labelled(machine("m1", "u1", "n1", "", false), ControlPlaneLabel)}, wantUID: "u1", wantErr: "is a control plane's"},
		{name: "MachineHealthCheck is not asked to remediate a control plane's Machine", mode: ModeMHC,
			objs: []runtime.Object{labelled(machine("m1", "u1", "n1", "", false), ControlPlaneLabel)}, wantUID: "u1", wantErr: "is a control plane's"},
		{name: "someone else's request to MachineHealthCheck is not marked ours", mode: ModeMHC,
			objs: []runtime.Object{annotated(machine("m1", "u1", "n1", "", false), RemediateMachineAnnotation)}, want: StartedByMHC, wantUID: "u1", wantAnn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, client := newBackend(tc.mode, tc.objs...)
			got, err := b.Remediate(context.Background(), target)
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got error %v, want one saying %q", err, tc.wantErr)
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("started by %q, want %q", got, tc.want)
			}
			m, err := client.Resource(MachineResource).Namespace("ns").Get(context.Background(), "m1", metav1.GetOptions{})
			if tc.wantDeleted {
				if !apierrors.IsNotFound(err) {
					t.Errorf("Machine m1 still there: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Machine m1 deleted: %v", err)
			}
			if string(m.GetUID()) != tc.wantUID {
				t.Errorf("Machine m1 has UID %s, want %s", m.GetUID(), tc.wantUID)
			}
			if _, ok := m.GetAnnotations()[RemediateMachineAnnotation]; ok != tc.wantAnn {
				t.Errorf("remediate-machine annotation %v, want %v", ok, tc.wantAnn)
			}
			if _, ok := m.GetAnnotations()[RemediationRequestedAnnotation]; ok != tc.wantOurs {
				t.Errorf("%s %v, want %v", RemediationRequestedAnnotation, ok, tc.wantOurs)
			}
		})
	}
}

// labelled returns m with the labels keys (empty values).
func labelled(m *unstructured.Unstructured, keys ...string) *unstructured.Unstructured {
	l := m.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for _, k := range keys {
		l[k] = ""
	}
	m.SetLabels(l)
	return m
}

// annotated returns m with the annotations keys (empty values).
func annotated(m *unstructured.Unstructured, keys ...string) *unstructured.Unstructured {
	ann := m.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	for _, k := range keys {
		ann[k] = ""
	}
	m.SetAnnotations(ann)
	return m
}

func TestWithdraw(t *testing.T) {
	target := fencingv1alpha1.MachineTarget{Namespace: "ns", Name: "m1", UID: "u1", DeletionStartedBy: StartedByMHC,
		Infrastructure: fencingv1alpha1.InfrastructureRef{APIVersion: infraAPIVersion, Kind: "TestMachine", Name: "m1", UID: "i1"}}
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		// want: the request was withdrawn; wantAnn: what Machine m1 keeps.
		want    bool
		wantAnn []string
	}{
		{name: "our request, MachineHealthCheck not acted yet: withdrawn",
			objs: []runtime.Object{annotated(machine("m1", "u1", "n1", "", false), RemediateMachineAnnotation, RemediationRequestedAnnotation)}, want: true},
		{name: "someone else's request is theirs: kept",
			objs:    []runtime.Object{annotated(machine("m1", "u1", "n1", "", false), RemediateMachineAnnotation)},
			wantAnn: []string{RemediateMachineAnnotation}},
		{name: "a Machine MachineHealthCheck has had deleted already: nothing to withdraw",
			objs:    []runtime.Object{annotated(machine("m1", "u1", "n1", "", true), RemediateMachineAnnotation, RemediationRequestedAnnotation)},
			wantAnn: []string{RemediateMachineAnnotation, RemediationRequestedAnnotation}},
		{name: "a Machine replaced under the same name is not ours to touch",
			objs:    []runtime.Object{annotated(machine("m1", "u2", "n9", "", false), RemediateMachineAnnotation, RemediationRequestedAnnotation)},
			wantAnn: []string{RemediateMachineAnnotation, RemediationRequestedAnnotation}},
		{name: "our mark without the request (removed by an admin): the mark goes",
			objs: []runtime.Object{annotated(machine("m1", "u1", "n1", "", false), RemediationRequestedAnnotation)}},
		{name: "a Machine gone: nothing to withdraw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, client := newBackend(ModeMHC, tc.objs...)
			// Requested reads what Withdraw then removes, and writes nothing.
			requested, err := b.Requested(context.Background(), target)
			if err != nil {
				t.Fatal(err)
			}
			if requested != tc.want {
				t.Errorf("requested %v, want %v", requested, tc.want)
			}
			for _, a := range client.Actions() {
				if a.GetVerb() != "get" {
					t.Errorf("Requested wrote: %s", a.GetVerb())
				}
			}
			got, err := b.Withdraw(context.Background(), target)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("withdrawn %v, want %v", got, tc.want)
			}
			m, err := client.Resource(MachineResource).Namespace("ns").Get(context.Background(), "m1", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kept []string
			for _, k := range []string{RemediateMachineAnnotation, RemediationRequestedAnnotation} {
				if _, ok := m.GetAnnotations()[k]; ok {
					kept = append(kept, k)
				}
			}
			if strings.Join(kept, ",") != strings.Join(tc.wantAnn, ",") {
				t.Errorf("Machine m1 keeps %v, want %v", kept, tc.wantAnn)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	target := fencingv1alpha1.MachineTarget{Namespace: "ns", Name: "m1", UID: "u1",
		Infrastructure: fencingv1alpha1.InfrastructureRef{APIVersion: infraAPIVersion, Kind: "TestMachine", Name: "m1", UID: "i1"}}
	// seen: the same target once a read saw its InfraMachine being deleted
	// through its provider.
	seen := target
	seen.Infrastructure.DeletionSeenTime = &metav1.Time{Time: time.Now().Add(-time.Minute)}
	noUID := target
	noUID.Infrastructure.UID = ""
	forbidden := func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(infraGVR.GroupResource(), "m1", errors.New("no RBAC"))
	}
	for _, tc := range []struct {
		name   string
		target *fencingv1alpha1.MachineTarget // target when nil
		objs   []runtime.Object
		react  clienttesting.ReactionFunc
		want   bool
		// wantSeen: the read found the InfraMachine being deleted through
		// its provider; wantNever: nothing can confirm the fence any more.
		wantSeen, wantNever bool
		wantWaiting         []string
		wantErr             string
	}{
		{name: "the InfraMachine seen being deleted, then gone, confirms", target: &seen,
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true)}, want: true},
		// Its finalizer stripped by hand, a move: the instance may run on.
		{name: "the InfraMachine gone without its deletion seen does not confirm",
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true)}, wantNever: true,
			wantWaiting: []string{"TestMachine m1 is gone, but no read saw it being deleted", "out-of-service taint"}},
		{name: "the InfraMachine replaced under its name (a pivot) does not confirm",
			objs: []runtime.Object{infra("m1", "i2", false, "")}, wantNever: true, wantWaiting: []string{"has UID i2, the fence recorded i1"}},
		{name: "the InfraMachine replaced after its deletion was seen does not confirm", target: &seen,
			objs: []runtime.Object{infra("m1", "i2", false, "")}, wantNever: true, wantWaiting: []string{"replaced under its name"}},
		{name: "a fence that recorded no InfraMachine UID never confirms", target: &noUID,
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true)}, wantNever: true, wantWaiting: []string{"recorded no UID of TestMachine m1"}},
		{name: "the InfraMachine being deleted through its provider is seen",
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true), infra("m1", "i1", true, "")}, wantSeen: true,
			wantWaiting: []string{"TestMachine m1 being deleted since"}},
		{name: "an InfraMachine being deleted for clusterctl move is not seen deleted by its provider", target: &seen,
			objs:        []runtime.Object{machine("m1", "u1", "n1", "", true), annotated(infra("m1", "i1", true, ""), DeleteForMoveAnnotation)},
			wantWaiting: []string{"clusterctl move removes it"}},
		{name: "a paused InfraMachine being deleted is not seen deleted by its provider",
			objs:        []runtime.Object{machine("m1", "u1", "n1", "", true), annotated(infra("m1", "i1", true, ""), PausedAnnotation)},
			wantWaiting: []string{"paused"}},
		{name: "the Machine gone while its InfraMachine stays does not confirm",
			objs: []runtime.Object{infra("m1", "i1", true, "")}, wantSeen: true,
			wantWaiting: []string{"Machine ns/m1 is gone", "TestMachine m1 being deleted"}},
		{name: "a provider that never confirms: pending, saying why",
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true), infra("m1", "i1", true, "instance delete refused by the cloud: quota")}, wantSeen: true,
			wantWaiting: []string{"WaitingForInfrastructureDeletion", "instance delete refused by the cloud: quota"}},
		{name: "a Machine not being deleted yet",
			objs:        []runtime.Object{machine("m1", "u1", "n1", "", false), infra("m1", "i1", false, "")},
			wantWaiting: []string{"is not being deleted", "not being deleted yet"}},
		{name: "an unreadable InfraMachine is an error, not a confirmation",
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true)}, react: forbidden, wantErr: "grant get on testmachines.infrastructure.example.io"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, client := newBackend(ModeDelete, tc.objs...)
			if tc.react != nil {
				client.PrependReactor("get", "testmachines", tc.react)
			}
			tg := target
			if tc.target != nil {
				tg = *tc.target
			}
			got, err := b.Check(context.Background(), tg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || got.Confirmed {
					t.Fatalf("got %+v, %v; want unconfirmed and an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Confirmed != tc.want {
				t.Fatalf("confirmed %v, want %v (%s)", got.Confirmed, tc.want, got.Waiting)
			}
			if got.Unconfirmable != tc.wantNever {
				t.Errorf("unconfirmable %v, want %v (%s)", got.Unconfirmable, tc.wantNever, got.Waiting)
			}
			if got.DeletionSeen != tc.wantSeen || (tc.wantSeen && !got.Read) {
				t.Errorf("read %v, deletion seen %v, want seen %v (%s)", got.Read, got.DeletionSeen, tc.wantSeen, got.Waiting)
			}
			for _, w := range tc.wantWaiting {
				if !strings.Contains(got.Waiting, w) {
					t.Errorf("waiting %q does not say %q", got.Waiting, w)
				}
			}
		})
	}
}

func TestNodeOfMachine(t *testing.T) {
	if got := NodeOfMachine(machine("m1", "u1", "n1", "", false)); got != "n1" {
		t.Errorf("got %q", got)
	}
	if got := NodeOfMachine(machine("m1", "u1", "", "", false)); got != "" {
		t.Errorf("got %q", got)
	}
}
