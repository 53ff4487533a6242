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
	// ControlPlaneLabel marks a control plane's Machines. They are never
	// deleted nor annotated here: their remediation is their control plane
	// provider's, which keeps etcd's quorum, and deleting one by hand
	// bypasses it. The machine-fencing component's admission policy
	// denies it to the sidecar as well.
	ControlPlaneLabel = "cluster.x-k8s.io/control-plane"
	// Group is Cluster API's core API group.
	Group = "cluster.x-k8s.io"
	// PausedAnnotation on a Cluster API object stops its controllers,
	// the provider's included: an InfraMachine that disappears while
	// paused was not removed by its provider.
	PausedAnnotation = "cluster.x-k8s.io/paused"
	// DeleteForMoveAnnotation is clusterctl move's mark on an object it is
	// about to delete from the source cluster, its finalizers stripped,
	// while the instance lives on under the target cluster.
	DeleteForMoveAnnotation = "clusterctl.cluster.x-k8s.io/delete-for-move"
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
	if controlPlane(m) {
		return t, fmt.Errorf("Machine %s/%s is a control plane's (%s): its remediation is its control plane provider's, not this system's", ns, name, ControlPlaneLabel)
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
		// Gone before anything was asked: whether its provider deleted the
		// instance or someone removed the object (its finalizer stripped, a
		// half-done clusterctl move, an edited infrastructureRef), no read
		// can tell any more. Nothing would confirm the fence: refused, so
		// that the next backend or a person acts.
		return t, fmt.Errorf("Machine %s/%s: its %s %s is already gone: nothing can show its instance deleted (the object may have been removed with its finalizer stripped, moved, or the Machine's infrastructureRef edited); not fencing through it",
			ns, name, infra.Kind, infra.Name)
	case err != nil:
		return t, err
	}
	if why := notOfMachine(obj, m, node); why != "" {
		return t, fmt.Errorf("Machine %s/%s: %s %s %s: not fencing through it", ns, name, infra.Kind, infra.Name, why)
	}
	t.Infrastructure.UID = obj.GetUID()
	if deleting, _ := deletedByProvider(obj); deleting {
		now := metav1.Now()
		t.Infrastructure.DeletionSeenTime = &now
	}
	if ts := m.GetDeletionTimestamp(); ts != nil {
		t.DeletionStartedBy = StartedByOther
	}
	return t, nil
}

// controlPlane reports whether m is one of a control plane's Machines.
func controlPlane(m *unstructured.Unstructured) bool {
	_, ok := m.GetLabels()[ControlPlaneLabel]
	return ok
}

// notOfMachine says why the InfraMachine obj is not the instance of Machine
// m and node, or "": owned by another Machine, or of another providerID
// than theirs (an edited infrastructureRef). Deleting the Machine deletes
// the object its ref names: the wrong one's disappearance would be taken
// for the node's instance.
func notOfMachine(obj, m *unstructured.Unstructured, node *v1.Node) string {
	for _, o := range obj.GetOwnerReferences() {
		if o.Kind == "Machine" && strings.HasPrefix(o.APIVersion, Group+"/") && o.UID != m.GetUID() {
			return fmt.Sprintf("is owned by another Machine (%s, UID %s)", o.Name, o.UID)
		}
	}
	pid, _, _ := unstructured.NestedString(obj.Object, "spec", "providerID")
	if pid == "" {
		return ""
	}
	if mpid, _, _ := unstructured.NestedString(m.Object, "spec", "providerID"); mpid != "" && mpid != pid {
		return fmt.Sprintf("has providerID %s, its Machine %s: not the same instance", pid, mpid)
	}
	if node.Spec.ProviderID != "" && node.Spec.ProviderID != pid {
		return fmt.Sprintf("has providerID %s, node %s has %s: not the same instance", pid, node.Name, node.Spec.ProviderID)
	}
	return ""
}

// deletedByProvider reports whether the InfraMachine obj is being deleted
// through its provider: a deletionTimestamp with the finalizers that hold
// it until the instance is gone, and neither paused (its provider does not
// act on it) nor marked for clusterctl move (deleted here, finalizers
// stripped, the instance kept). Otherwise it says why not, for the record.
func deletedByProvider(obj *unstructured.Unstructured) (bool, string) {
	_, paused := obj.GetAnnotations()[PausedAnnotation]
	_, moving := obj.GetAnnotations()[DeleteForMoveAnnotation]
	switch {
	case moving:
		return false, "marked " + DeleteForMoveAnnotation + ": clusterctl move removes it, not its provider"
	case paused:
		return false, "paused (" + PausedAnnotation + "): its provider does not act on it"
	case obj.GetDeletionTimestamp() == nil:
		return false, "not being deleted yet"
	case len(obj.GetFinalizers()) == 0:
		return false, "being deleted without a finalizer: nothing waits for its instance"
	}
	return true, ""
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
	case controlPlane(m):
		// Labelled since Locate: never asked of a control plane's Machine.
		return "", fmt.Errorf("Machine %s/%s is a control plane's (%s): not deleting it nor asking MachineHealthCheck", t.Namespace, t.Name, ControlPlaneLabel)
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
	// Confirmed: the InfraMachine recorded, once seen being deleted
	// through its provider (DeletionSeenTime), is gone: the provider's
	// report that the instance is deleted.
	Confirmed bool
	// Read: the InfraMachine recorded was read, present, and
	// DeletionSeen says whether it is being deleted through its provider
	// now; the caller records that (a change either way) for the read
	// that finds it gone.
	Read, DeletionSeen bool
	// Unconfirmable: nothing this backend may still read can confirm the
	// fence (the InfraMachine gone without its deletion seen, replaced,
	// never recorded); Waiting says why. Only a person, who can find out
	// whether the instance still runs, can end it.
	Unconfirmable bool
	// Waiting says what the fence waits for, with what the Machine and
	// the InfraMachine say of their deletion.
	Waiting string
}

// unconfirmableHint is what a person can do about an unconfirmable
// machine fence.
const unconfirmableHint = "the instance may still run and write; once you know it is off, add the out-of-service taint to the node yourself"

// Check reads the InfraMachine t names, live. Its disappearance confirms
// the fence only after a read saw it being deleted through its provider
// (t.Infrastructure.DeletionSeenTime, recorded by the caller from Read and
// DeletionSeen): gone without that, or replaced under its name (another
// UID: a pivot, a recreation), it is Unconfirmable. Otherwise it says what
// the deletion waits for, from the Machine's and the InfraMachine's own
// conditions. An InfraMachine that cannot be read is an error, never a
// confirmation.
func (b *Backend) Check(ctx context.Context, t fencingv1alpha1.MachineTarget) (Progress, error) {
	ref := t.Infrastructure
	if ref.UID == "" {
		return Progress{Unconfirmable: true, Waiting: fmt.Sprintf("not confirmable: the fence recorded no UID of %s %s (it was gone when the fence started), so no read can show it deleted through its provider; %s",
			ref.Kind, ref.Name, unconfirmableHint)}, nil
	}
	infra, err := b.getInfra(ctx, t.Namespace, ref)
	switch {
	case apierrors.IsNotFound(err) && ref.DeletionSeenTime != nil:
		return Progress{Confirmed: true}, nil
	case apierrors.IsNotFound(err):
		return Progress{Unconfirmable: true, Waiting: fmt.Sprintf("not confirmable: %s %s is gone, but no read saw it being deleted through its provider (its finalizer removed by hand, a clusterctl move, or a provider faster than this system's reads); %s",
			ref.Kind, ref.Name, unconfirmableHint)}, nil
	case err != nil:
		return Progress{}, err
	case infra.GetUID() != ref.UID:
		return Progress{Unconfirmable: true, Waiting: fmt.Sprintf("not confirmable: %s %s has UID %s, the fence recorded %s: replaced under its name (a pivot or a recreation), which says nothing of the instance; %s",
			ref.Kind, ref.Name, infra.GetUID(), ref.UID, unconfirmableHint)}, nil
	}
	deleting, why := deletedByProvider(infra)
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
	if deleting {
		parts = append(parts, fmt.Sprintf("%s %s being deleted since %s%s", ref.Kind, ref.Name,
			infra.GetDeletionTimestamp().UTC().Format(time.RFC3339), conditionsSaying(infra, "")))
	} else {
		parts = append(parts, fmt.Sprintf("%s %s %s%s", ref.Kind, ref.Name, why, conditionsSaying(infra, "")))
	}
	return Progress{Read: true, DeletionSeen: deleting, Waiting: "waiting for the infrastructure provider to delete the instance: " + strings.Join(parts, "; ")}, nil
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
