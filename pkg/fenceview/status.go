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

// Package fenceview builds what `kubectl fence status` and `kubectl fence
// timeline NODE` show an operator in the middle of an outage: which nodes are
// fenced or quarantined and how far each got, and the steps of one node's
// failover with their times. It only reads (Nodes, FencingRequests, the storm
// guard's Lease, Events), so it needs no more than a viewer's RBAC, and its
// output depends on nothing but what it read (and the time it is given), so
// that it can be compared in tests and diffed by a person.
package fenceview

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// The storm guard's Lease and its annotations, as pkg/failover writes them
// (stormguard.go; the nodes' annotation is unexported there, and the
// package is the failover controller's, too heavy for a kubectl plugin).
const (
	StormGuardLease           = "csi-fence-storm-guard"
	stormGuardNodesAnnotation = contract.Prefix + "/fencing-nodes"
	// PausedAnnotation is the pause switch (failover.PausedAnnotation).
	PausedAnnotation = contract.Prefix + "/paused"
)

// Status is the fencing state of the cluster.
type Status struct {
	StormGuard StormGuard   `json:"stormGuard"`
	Nodes      []NodeStatus `json:"nodes"`
	// Protection sums up `kubectl fence explain -A` (AddProtection); nil
	// when not asked for.
	Protection *Protection `json:"protection,omitempty"`
}

// Protection counts the running pods of the cluster that would fail over
// if their node died now and those that would not, by reason.
type Protection struct {
	Protected   int            `json:"protected"`
	Unprotected int            `json:"unprotected"`
	ByReason    map[string]int `json:"byReason,omitempty"`
	// Error says why it could not be told (the status is shown all the
	// same).
	Error string `json:"error,omitempty"`
}

// AddProtection sums up Explain over the whole cluster into the status.
// A failure (a viewer without the RBAC to read claims, say) is said in
// it, not returned: the rest of the status still stands.
func (st *Status) AddProtection(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, opts ExplainOptions) {
	x, err := Explain(ctx, kube, dyn, Target{}, opts)
	if err != nil {
		st.Protection = &Protection{Error: err.Error()}
		return
	}
	st.Protection = &Protection{Protected: x.Protected, Unprotected: x.Unprotected, ByReason: x.ByReason}
}

// StormGuard is the storm guard's Lease: the nodes admitted to fencing and
// the admin's pause.
type StormGuard struct {
	Namespace string `json:"namespace"`
	Lease     string `json:"lease"`
	// Found is false before the first admission (the Lease is created then).
	Found    bool     `json:"found"`
	Admitted []string `json:"admitted"`
	// Paused says why no new node is admitted; empty when not paused.
	Paused string `json:"paused,omitempty"`
}

// NodeStatus is one node that is fenced, quarantined, under a record or
// admitted by the storm guard.
type NodeStatus struct {
	Name string `json:"name"`
	// Ready is the node's Ready condition (True, False, Unknown), "Gone"
	// when the Node no longer exists but its record does.
	Ready string `json:"ready"`
	// Phase, Origin, Reason and Error are the FencingRequest's, empty
	// without one.
	Phase  string `json:"phase,omitempty"`
	Origin string `json:"origin,omitempty"`
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// Released: an admin withdrew the request (spec.released).
	Released bool `json:"released,omitempty"`
	// Backends that fenced (or are fencing) the node: storage when volumes
	// are recorded, the node-level backend when one acted.
	Backends []string `json:"backends,omitempty"`
	// Volumes are counted from the record: fenced (confirmed, not
	// cleaned), pending (intent recorded, not confirmed: may be
	// quarantined all the same) and cleaned.
	Volumes VolumeCounts `json:"volumes"`
	// Taints are those of fencing on the node: quarantine, out-of-service,
	// the Node Fencing KEP's.
	Taints []string `json:"taints,omitempty"`
	// FencingComplete is the node's condition, as the Node Fencing KEP
	// has it (True: the whole node is fenced).
	FencingComplete string `json:"fencingComplete,omitempty"`
	// Admitted: the storm guard counts this node.
	Admitted  bool         `json:"admitted"`
	StartTime *metav1.Time `json:"startTime,omitempty"`
}

// VolumeCounts count a record's volumes by state.
type VolumeCounts struct {
	Fenced  int `json:"fenced"`
	Pending int `json:"pending"`
	Cleaned int `json:"cleaned"`
}

// fencingTaints are the taints the status lists, in this order.
var fencingTaints = []string{contract.QuarantineTaintKey, contract.OutOfServiceTaintKey, contract.FencingRequiredTaintKey, contract.FencingTriagedTaintKey}

// GetStatus reads the cluster's fencing state: every node with a
// FencingRequest, a fencing taint, FencingComplete=True or an admission.
func GetStatus(ctx context.Context, kube kubernetes.Interface, frs *fencingv1alpha1.Client, stormGuardNamespace string) (*Status, error) {
	st := &Status{StormGuard: StormGuard{Namespace: stormGuardNamespace, Lease: StormGuardLease, Admitted: []string{}}, Nodes: []NodeStatus{}}
	lease, err := kube.CoordinationV1().Leases(stormGuardNamespace).Get(ctx, StormGuardLease, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("reading the storm guard's Lease %s/%s: %w", stormGuardNamespace, StormGuardLease, err)
	default:
		st.StormGuard.Found = true
		if s := lease.Annotations[stormGuardNodesAnnotation]; s != "" {
			st.StormGuard.Admitted = strings.Split(s, ",")
			sort.Strings(st.StormGuard.Admitted)
		}
		st.StormGuard.Paused = lease.Annotations[PausedAnnotation]
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	list, err := frs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing FencingRequests (is the CRD installed?): %w", err)
	}
	byNode := map[string]*NodeStatus{}
	get := func(name string) *NodeStatus {
		if ns, ok := byNode[name]; ok {
			return ns
		}
		ns := &NodeStatus{Name: name, Ready: "Gone"}
		byNode[name] = ns
		return ns
	}
	known := map[string]*corev1.Node{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		known[n.Name] = n
		taints := nodeFencingTaints(n)
		complete := condition(n, contract.ConditionFencingComplete)
		if len(taints) == 0 && (complete == nil || complete.Status != corev1.ConditionTrue) {
			continue
		}
		get(n.Name)
	}
	for i := range list.Items {
		fr := &list.Items[i]
		name := fr.Spec.NodeName
		if name == "" {
			name = fr.Name
		}
		ns := get(name)
		ns.Phase = string(fr.Status.Phase)
		if ns.Phase == "" {
			ns.Phase = string(fencingv1alpha1.PhasePending)
		}
		ns.Origin = string(fr.Spec.Origin)
		if ns.Origin == "" {
			ns.Origin = string(fencingv1alpha1.OriginManual)
		}
		ns.Reason = fr.Spec.Reason
		ns.Released = fr.Spec.Released
		ns.Error = fr.Status.ErrorReason
		ns.StartTime = fr.Status.StartTime
		for _, v := range fr.Status.Volumes {
			switch {
			case v.CleanedTime != nil:
				ns.Volumes.Cleaned++
			case v.FencedTime != nil:
				ns.Volumes.Fenced++
			case v.StartedTime != nil:
				ns.Volumes.Pending++
			}
		}
		if len(fr.Status.Volumes) > 0 {
			ns.Backends = append(ns.Backends, fencingv1alpha1.BackendStorage)
		}
		if nf := fr.Status.NodeFence; nf != nil && nf.Backend != "" {
			ns.Backends = append(ns.Backends, nf.Backend)
		}
	}
	for _, name := range st.StormGuard.Admitted {
		get(name).Admitted = true
	}
	for name, ns := range byNode {
		if n, ok := known[name]; ok {
			ns.Ready = "Unknown"
			if c := condition(n, corev1.NodeReady); c != nil {
				ns.Ready = string(c.Status)
			}
			if c := condition(n, contract.ConditionFencingComplete); c != nil {
				ns.FencingComplete = string(c.Status)
			}
			ns.Taints = nodeFencingTaints(n)
		}
		st.Nodes = append(st.Nodes, *ns)
	}
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].Name < st.Nodes[j].Name })
	return st, nil
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// nodeFencingTaints lists the node's fencing taints as key:effect.
func nodeFencingTaints(n *corev1.Node) []string {
	var out []string
	for _, k := range fencingTaints {
		for _, t := range n.Spec.Taints {
			if t.Key == k {
				out = append(out, t.Key+":"+string(t.Effect))
			}
		}
	}
	return out
}

// shortTaint drops the taint key's well-known prefixes for the table.
func shortTaint(t string) string {
	t = strings.TrimPrefix(t, contract.Prefix+"/")
	return strings.TrimPrefix(t, "node.kubernetes.io/")
}

// Table writes the status as kubectl-style columns, then the storm guard.
// now ages the start times (given, so that the output is reproducible).
func (st *Status) Table(now time.Time) string {
	var b strings.Builder
	if len(st.Nodes) == 0 {
		b.WriteString("No node is fenced, quarantined or under a FencingRequest.\n")
	} else {
		rows := [][]string{{"NODE", "READY", "PHASE", "ORIGIN", "BACKEND", "FENCED", "PENDING", "CLEANED", "TAINTS", "STORM-GUARD", "AGE", "ERROR"}}
		for _, n := range st.Nodes {
			var taints []string
			for _, t := range n.Taints {
				taints = append(taints, shortTaint(t))
			}
			age := "-"
			if n.StartTime != nil {
				age = shortDuration(now.Sub(n.StartTime.Time))
			}
			rows = append(rows, []string{n.Name, n.Ready, dash(n.Phase), dash(n.Origin), dash(strings.Join(n.Backends, ",")),
				fmt.Sprint(n.Volumes.Fenced), fmt.Sprint(n.Volumes.Pending), fmt.Sprint(n.Volumes.Cleaned),
				dash(strings.Join(taints, ",")), yesNo(n.Admitted, "admitted", "-"), age, dash(n.Error)})
		}
		writeColumns(&b, rows)
	}
	g := st.StormGuard
	fmt.Fprintf(&b, "\nStorm guard (Lease %s/%s): ", g.Namespace, g.Lease)
	switch {
	case !g.Found:
		b.WriteString("no admission yet")
	case len(g.Admitted) == 0:
		b.WriteString("no node admitted")
	default:
		fmt.Fprintf(&b, "%d admitted (%s)", len(g.Admitted), strings.Join(g.Admitted, ", "))
	}
	if g.Paused != "" {
		fmt.Fprintf(&b, "; PAUSED: %s (no new node is fenced)", g.Paused)
	} else {
		b.WriteString("; not paused")
	}
	b.WriteString("\n")
	if p := st.Protection; p != nil {
		b.WriteString("Protection: ")
		if p.Error != "" {
			fmt.Fprintf(&b, "cannot tell (%s)\n", p.Error)
			return b.String()
		}
		fmt.Fprintf(&b, "%d pod(s) would fail over if their node died now, %d would not", p.Protected, p.Unprotected)
		if p.Unprotected > 0 {
			reasons := make([]string, 0, len(p.ByReason))
			for r, n := range p.ByReason {
				reasons = append(reasons, fmt.Sprintf("%s: %d", r, n))
			}
			sort.Strings(reasons)
			fmt.Fprintf(&b, " (%s): kubectl fence explain -A says which and the fix", strings.Join(reasons, ", "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

// shortDuration is kubectl's AGE style: 45s, 3m20s, 5h10m, 2d3h.
func shortDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// writeColumns aligns rows on three spaces, as kubectl get does.
func writeColumns(b *strings.Builder, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, r := range rows {
		for i, c := range r {
			if i == len(r)-1 {
				b.WriteString(c)
			} else {
				fmt.Fprintf(b, "%-*s   ", widths[i], c)
			}
		}
		b.WriteString("\n")
	}
}
