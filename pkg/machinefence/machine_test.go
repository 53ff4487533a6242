package machinefence

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

func TestLocate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		node    *v1.Node
		objs    []runtime.Object
		wantErr string
		want    fencingv1alpha1.MachineTarget
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
			} else if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
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
	}{
		{name: "deletes the Machine", mode: ModeDelete, objs: []runtime.Object{machine("m1", "u1", "n1", "", false)}, want: StartedByUs, wantDeleted: true},
		{name: "a Machine already being deleted is followed, not deleted again", mode: ModeDelete,
			objs: []runtime.Object{machine("m1", "u1", "n1", "", true)}, want: StartedByOther, wantUID: "u1"},
		{name: "a Machine replaced under the same name is not deleted", mode: ModeDelete,
			objs: []runtime.Object{machine("m1", "u2", "n9", "", false)}, want: StartedByOther, wantUID: "u2"},
		{name: "a Machine gone is someone else's deletion", mode: ModeDelete, want: StartedByOther, wantDeleted: true},
		{name: "MachineHealthCheck is asked to remediate, the request marked ours", mode: ModeMHC,
			objs: []runtime.Object{machine("m1", "u1", "n1", "", false)}, want: StartedByMHC, wantUID: "u1", wantAnn: true, wantOurs: true},
		{name: "someone else's request to MachineHealthCheck is not marked ours", mode: ModeMHC,
			objs: []runtime.Object{annotated(machine("m1", "u1", "n1", "", false), RemediateMachineAnnotation)}, want: StartedByMHC, wantUID: "u1", wantAnn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, client := newBackend(tc.mode, tc.objs...)
			got, err := b.Remediate(context.Background(), target)
			if err != nil {
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
	forbidden := func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(infraGVR.GroupResource(), "m1", errors.New("no RBAC"))
	}
	for _, tc := range []struct {
		name        string
		objs        []runtime.Object
		react       clienttesting.ReactionFunc
		want        bool
		wantWaiting []string
		wantErr     string
	}{
		{name: "the InfraMachine gone confirms", objs: []runtime.Object{machine("m1", "u1", "n1", "", true)}, want: true},
		{name: "the InfraMachine replaced confirms", objs: []runtime.Object{infra("m1", "i2", false, "")}, want: true},
		{name: "the Machine gone while its InfraMachine stays does not confirm",
			objs:        []runtime.Object{infra("m1", "i1", true, "")},
			wantWaiting: []string{"Machine ns/m1 is gone", "TestMachine m1 being deleted"}},
		{name: "a provider that never confirms: pending, saying why",
			objs:        []runtime.Object{machine("m1", "u1", "n1", "", true), infra("m1", "i1", true, "instance delete refused by the cloud: quota")},
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
			got, err := b.Check(context.Background(), target)
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
