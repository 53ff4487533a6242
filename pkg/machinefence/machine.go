package machinefence

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// Cluster API's names this backend relies on.
const (
	// MachineAnnotation on a Node names its Machine.
	MachineAnnotation = "cluster.x-k8s.io/machine"
	// ClusterNamespaceAnnotation on a Node names its Machine's namespace.
	ClusterNamespaceAnnotation = "cluster.x-k8s.io/cluster-namespace"
	// RemediateMachineAnnotation on a Machine asks MachineHealthCheck to
	// take it as unhealthy and remediate it (ModeMHC).
	RemediateMachineAnnotation = "cluster.x-k8s.io/remediate-machine"
	// RemediationRequestedAnnotation on a Machine says that this system
	// added its RemediateMachineAnnotation (the value: when), so that it
	// withdraws only its own request (Withdraw).
	RemediationRequestedAnnotation = "csi-fence.io/remediation-requested"
	// Group is Cluster API's core API group.
	Group = "cluster.x-k8s.io"
)

// MachineResource is the v1beta2 Machine API (Cluster API v1.11 and later).
var MachineResource = schema.GroupVersionResource{Group: Group, Version: "v1beta2", Resource: "machines"}

// Who started a Machine's deletion (MachineTarget.DeletionStartedBy).
const (
	StartedByUs    = "fence-attacher"
	StartedByOther = "other"
	// StartedByMHC: this system asked MachineHealthCheck (ModeMHC).
	StartedByMHC = "machinehealthcheck"
)

// Mode is how the backend asks for a Machine's remediation.
type Mode string

const (
	// ModeDelete deletes the Machine, as MachineHealthCheck's own
	// remediation of a MachineSet's Machine does.
	ModeDelete Mode = "delete"
	// ModeMHC annotates the Machine cluster.x-k8s.io/remediate-machine and
	// leaves the deletion to the cluster's MachineHealthCheck.
	ModeMHC Mode = "mhc"
)

// ErrNoMachine: the Node names no Machine (not a Cluster API node).
var ErrNoMachine = errors.New("the node names no Cluster API Machine (no " + MachineAnnotation + " annotation)")

// Backend fences nodes through their Machines.
type Backend struct {
	Dynamic dynamic.Interface
	// Mapper resolves an InfraMachine's kind to its resource (any
	// provider's); a discovery-backed mapper in the sidecar.
	Mapper meta.RESTMapper
	// Mode: ModeDelete when empty.
	Mode Mode
}

// MachineOf returns the namespace and name of the Machine node names, if
// any. It decides nothing: Locate reads the Machine and checks it.
func MachineOf(node *v1.Node) (namespace, name string, ok bool) {
	name = node.Annotations[MachineAnnotation]
	return node.Annotations[ClusterNamespaceAnnotation], name, name != ""
}

// Locate reads the node's Machine and its InfraMachine live and returns
// what a fence of them must record, or why the node cannot be fenced
// through a Machine: no Machine named, the Machine gone, without a
// nodeRef, naming another node or another instance.
func (b *Backend) Locate(ctx context.Context, node *v1.Node) (fencingv1alpha1.MachineTarget, error) {
	var t fencingv1alpha1.MachineTarget
	ns, name, ok := MachineOf(node)
	if !ok {
		return t, ErrNoMachine
	}
	if ns == "" {
		return t, fmt.Errorf("node %s names Machine %s but not its namespace (no %s annotation)", node.Name, name, ClusterNamespaceAnnotation)
	}
	m, err := b.Dynamic.Resource(MachineResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return t, fmt.Errorf("node %s names Machine %s/%s, which does not exist", node.Name, ns, name)
	}
	if err != nil {
		return t, fmt.Errorf("reading Machine %s/%s: %w", ns, name, err)
	}
	nodeRef, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
	switch {
	case nodeRef == "":
		return t, fmt.Errorf("Machine %s/%s has no status.nodeRef: nothing says node %s is its instance", ns, name, node.Name)
	case nodeRef != node.Name:
		return t, fmt.Errorf("Machine %s/%s is the Machine of node %s (status.nodeRef), not of node %s: the node's %s annotation is stale", ns, name, nodeRef, node.Name, MachineAnnotation)
	}
	providerID, _, _ := unstructured.NestedString(m.Object, "spec", "providerID")
	if providerID != "" && node.Spec.ProviderID != "" && providerID != node.Spec.ProviderID {
		return t, fmt.Errorf("Machine %s/%s has providerID %s, node %s has %s: not the same instance", ns, name, providerID, node.Name, node.Spec.ProviderID)
	}
	infra, err := b.infraRef(m)
	if err != nil {
		return t, fmt.Errorf("Machine %s/%s: %w", ns, name, err)
	}
	t = fencingv1alpha1.MachineTarget{Namespace: ns, Name: name, UID: m.GetUID(), ProviderID: providerID, Infrastructure: infra}
	obj, err := b.getInfra(ctx, ns, infra)
	switch {
	case apierrors.IsNotFound(err):
		// Gone already: the provider has reported the instance deleted.
	case err != nil:
		return t, err
	default:
		t.Infrastructure.UID = obj.GetUID()
	}
	if ts := m.GetDeletionTimestamp(); ts != nil {
		t.DeletionStartedBy = StartedByOther
	}
	return t, nil
}

// infraRef resolves the Machine's spec.infrastructureRef: v1beta2 names an
// apiGroup (the version is the one the API server prefers), v1beta1 an
// apiVersion.
func (b *Backend) infraRef(m *unstructured.Unstructured) (fencingv1alpha1.InfrastructureRef, error) {
	ref, ok, _ := unstructured.NestedStringMap(m.Object, "spec", "infrastructureRef")
	if !ok || ref["kind"] == "" || ref["name"] == "" {
		return fencingv1alpha1.InfrastructureRef{}, errors.New("no spec.infrastructureRef: nothing could confirm its instance gone")
	}
	apiVersion := ref["apiVersion"]
	if apiVersion == "" {
		mapping, err := b.Mapper.RESTMapping(schema.GroupKind{Group: ref["apiGroup"], Kind: ref["kind"]})
		if err != nil {
			return fencingv1alpha1.InfrastructureRef{}, fmt.Errorf("infrastructure kind %s.%s is not served: %w", ref["kind"], ref["apiGroup"], err)
		}
		apiVersion = mapping.GroupVersionKind.GroupVersion().String()
	}
	return fencingv1alpha1.InfrastructureRef{APIVersion: apiVersion, Kind: ref["kind"], Name: ref["name"]}, nil
}

// getInfra reads an InfraMachine live.
func (b *Backend) getInfra(ctx context.Context, ns string, ref fencingv1alpha1.InfrastructureRef) (*unstructured.Unstructured, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("infrastructure %s %s: %w", ref.Kind, ref.Name, err)
	}
	mapping, err := b.Mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
	if err != nil {
		return nil, fmt.Errorf("infrastructure kind %s (%s) is not served: %w", ref.Kind, ref.APIVersion, err)
	}
	obj, err := b.Dynamic.Resource(mapping.Resource).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading %s %s/%s (grant get on %s): %w", ref.Kind, ns, ref.Name, mapping.Resource.GroupResource(), err)
	}
	return obj, err
}

// Remediate asks for the deletion of the Machine t names, unless it is
// being deleted already or is gone (then someone else started it), and
// returns who started it. The request carries the Machine's UID, so that a
// Machine replaced under the same name is never the one deleted.
func (b *Backend) Remediate(ctx context.Context, t fencingv1alpha1.MachineTarget) (string, error) {
	machines := b.Dynamic.Resource(MachineResource).Namespace(t.Namespace)
	m, err := machines.Get(ctx, t.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return StartedByOther, nil
	case err != nil:
		return "", fmt.Errorf("reading Machine %s/%s: %w", t.Namespace, t.Name, err)
	case m.GetUID() != t.UID || m.GetDeletionTimestamp() != nil:
		return StartedByOther, nil
	}
	if b.Mode == ModeMHC {
		if _, ok := m.GetAnnotations()[RemediateMachineAnnotation]; ok {
			return StartedByMHC, nil
		}
		ann := m.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[RemediateMachineAnnotation] = ""
		// Ours: the request is withdrawn if the node comes back before
		// MHC acts, and only ours is.
		ann[RemediationRequestedAnnotation] = time.Now().UTC().Format(time.RFC3339)
		m.SetAnnotations(ann)
		// An update, with the resourceVersion read: the Machine as checked.
		if _, err := machines.Update(ctx, m, metav1.UpdateOptions{}); err != nil {
			return "", fmt.Errorf("asking MachineHealthCheck to remediate Machine %s/%s: %w", t.Namespace, t.Name, err)
		}
		return StartedByMHC, nil
	}
	uid := t.UID
	err = machines.Delete(ctx, t.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone or replaced meanwhile: someone else's deletion.
		return StartedByOther, nil
	case err != nil:
		return "", fmt.Errorf("deleting Machine %s/%s: %w", t.Namespace, t.Name, err)
	}
	return StartedByUs, nil
}

// Withdraw removes this system's request to MachineHealthCheck from the
// Machine t names (ModeMHC): a node that is back before MHC acted must not
// be remediated later, healthy, on a request nobody means any more (S6).
// Only a request marked ours (RemediationRequestedAnnotation) is removed,
// with the mark, by an update carrying the resourceVersion read; someone
// else's request is theirs. A Machine gone, replaced or being deleted has
// nothing to withdraw: MHC acted, or someone else did. It reports whether
// a request was withdrawn.
func (b *Backend) Withdraw(ctx context.Context, t fencingv1alpha1.MachineTarget) (bool, error) {
	m, requested, err := b.ourRequest(ctx, t)
	if err != nil || m == nil {
		return false, err
	}
	ann := m.GetAnnotations()
	delete(ann, RemediateMachineAnnotation)
	delete(ann, RemediationRequestedAnnotation)
	m.SetAnnotations(ann)
	if _, err := b.Dynamic.Resource(MachineResource).Namespace(t.Namespace).Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		return false, fmt.Errorf("withdrawing the request to MachineHealthCheck to remediate Machine %s/%s: %w", t.Namespace, t.Name, err)
	}
	return requested, nil
}

// Requested reads, live, whether the Machine t names carries this system's
// request to MachineHealthCheck, not acted on yet: what Withdraw would
// withdraw. The failover records that it withdraws it before it does.
func (b *Backend) Requested(ctx context.Context, t fencingv1alpha1.MachineTarget) (bool, error) {
	_, requested, err := b.ourRequest(ctx, t)
	return requested, err
}

// ourRequest reads the Machine t names and returns it when it carries this
// system's mark (RemediationRequestedAnnotation), with whether the request
// itself is there too; nil when the Machine is gone, replaced, being
// deleted or unmarked.
func (b *Backend) ourRequest(ctx context.Context, t fencingv1alpha1.MachineTarget) (*unstructured.Unstructured, bool, error) {
	m, err := b.Dynamic.Resource(MachineResource).Namespace(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading Machine %s/%s: %w", t.Namespace, t.Name, err)
	case m.GetUID() != t.UID || m.GetDeletionTimestamp() != nil:
		return nil, false, nil
	}
	ann := m.GetAnnotations()
	if _, ours := ann[RemediationRequestedAnnotation]; !ours {
		return nil, false, nil
	}
	_, requested := ann[RemediateMachineAnnotation]
	return m, requested, nil
}

// Progress is where a Machine fence is.
type Progress struct {
	// Confirmed: the InfraMachine is gone, the provider's report that the
	// instance is deleted.
	Confirmed bool
	// Waiting says what the fence waits for, with what the Machine and
	// the InfraMachine say of their deletion.
	Waiting string
}

// Check reads the InfraMachine t names, live: gone (or replaced: another
// UID) is the confirmation. Otherwise it says what the deletion waits
// for, from the Machine's and the InfraMachine's own conditions. An
// InfraMachine that cannot be read is an error, never a confirmation.
func (b *Backend) Check(ctx context.Context, t fencingv1alpha1.MachineTarget) (Progress, error) {
	infra, err := b.getInfra(ctx, t.Namespace, t.Infrastructure)
	if apierrors.IsNotFound(err) || (err == nil && t.Infrastructure.UID != "" && infra.GetUID() != t.Infrastructure.UID) {
		return Progress{Confirmed: true}, nil
	}
	if err != nil {
		return Progress{}, err
	}
	var parts []string
	m, err := b.Dynamic.Resource(MachineResource).Namespace(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || (err == nil && m.GetUID() != t.UID):
		parts = append(parts, fmt.Sprintf("Machine %s/%s is gone", t.Namespace, t.Name))
	case err != nil:
		parts = append(parts, fmt.Sprintf("Machine %s/%s unreadable: %v", t.Namespace, t.Name, err))
	case m.GetDeletionTimestamp() == nil:
		parts = append(parts, fmt.Sprintf("Machine %s/%s is not being deleted", t.Namespace, t.Name))
	default:
		parts = append(parts, fmt.Sprintf("Machine %s/%s being deleted since %s%s", t.Namespace, t.Name,
			m.GetDeletionTimestamp().UTC().Format(time.RFC3339), conditionsSaying(m, "Deleting")))
	}
	if ts := infra.GetDeletionTimestamp(); ts != nil {
		parts = append(parts, fmt.Sprintf("%s %s being deleted since %s%s", t.Infrastructure.Kind, t.Infrastructure.Name,
			ts.UTC().Format(time.RFC3339), conditionsSaying(infra, "")))
	} else {
		parts = append(parts, fmt.Sprintf("%s %s not being deleted yet%s", t.Infrastructure.Kind, t.Infrastructure.Name, conditionsSaying(infra, "")))
	}
	return Progress{Waiting: "waiting for the infrastructure provider to delete the instance: " + strings.Join(parts, "; ")}, nil
}

// conditionsSaying renders the conditions of obj that explain something:
// the one of type want (any that is not True when want is ""), as
// "type reason: message".
func conditionsSaying(obj *unstructured.Unstructured, want string) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var out []string
	for _, c := range conds {
		m, ok := c.(map[string]interface{})
		if !ok {
			continue
		}
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		reason, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		if (want != "" && typ != want) || (want == "" && status == "True") || (reason == "" && msg == "") {
			continue
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s: %s", typ, reason, msg)))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, "; ") + ")"
}

// NodeOfMachine returns the node a Machine object (from an informer) names
// in its status.nodeRef, for the failover to look at that node again when
// the Machine changes.
func NodeOfMachine(obj interface{}) string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	n, _, _ := unstructured.NestedString(u.Object, "status", "nodeRef", "name")
	return n
}
