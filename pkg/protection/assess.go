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

package protection

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// DefaultNodeMonitorGracePeriod is kube-controller-manager's
// --node-monitor-grace-period default (Kubernetes 1.32 and later): how long
// a node's kubelet may stay silent before the node is marked unreachable.
const DefaultNodeMonitorGracePeriod = 50 * time.Second

// Cluster is what Assess reads, beyond the triage's Facts: the failover's
// configuration and the state of the storm guard.
type Cluster struct {
	Facts
	// Registered: some driver's sidecar registered (ReasonNoController).
	Registered bool
	// Gate is the NonGracefulFailover feature gate.
	Gate bool
	// Backends are --fencing-backends, in order.
	Backends []string
	// NodeBackend reports whether a node-level backend (power, machine,
	// out-of-service) can fence node; only called for enabled ones.
	NodeBackend func(node *v1.Node, backend string) bool
	// Paused is why the storm guard is paused ("": it is not).
	Paused string
	// Admitted are the nodes the storm guard admitted; Nodes counts every
	// node; MaxNodes and MaxPercent are its limits (0: none).
	Admitted             []string
	Nodes                int
	MaxNodes, MaxPercent int
	// NodeMonitorGracePeriod is kube-controller-manager's (0: the default).
	NodeMonitorGracePeriod time.Duration
	// FenceTime is how long backend's fence of node is expected to take
	// (nil, or a Term with no Seconds: not known).
	FenceTime func(node *v1.Node, backend string) Term
}

// Term is one part of the time a failover takes.
type Term struct {
	Name string `json:"name"`
	// Seconds is the term's length; Known false when nothing bounds it.
	Seconds float64 `json:"seconds"`
	Known   bool    `json:"known"`
	// Source says where the number comes from.
	Source string `json:"source,omitempty"`
}

// Answer is whether one pod is protected: would it fail over automatically
// if its node died now, through which backend, after about how long; and
// if not, why and what fixes it.
type Answer struct {
	Protected bool `json:"protected"`
	// Backend moves the pod: storage, or a node-level one.
	Backend string `json:"backend,omitempty"`
	// After are the terms of the time to failover; AfterSeconds is their
	// sum (a lower bound when a term is not Known).
	After        []Term  `json:"after,omitempty"`
	AfterSeconds float64 `json:"afterSeconds,omitempty"`
	// Reason, Why and Fix say why a pod is not protected.
	Reason Reason `json:"reason,omitempty"`
	Why    string `json:"why,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

func unprotected(r Reason, why, driver, node string) Answer {
	return Answer{Reason: r, Why: why, Fix: r.Fix(driver, node)}
}

// Assess answers for pod on node (nil: the pod's node, or none, as
// ReasonNotScheduled) whether it fails over if the node died now: the
// failover's decisions (decide's order: the gate, the node held, then the
// triage of the pod as the taint manager's eviction leaves it, the storm
// guard, the backend) on the pod as it would be.
func Assess(pod *v1.Pod, node *v1.Node, c Cluster) Answer {
	if pod.Spec.NodeName == "" || node == nil {
		return unprotected(ReasonNotScheduled, "the pod is on no node", "", "")
	}
	if owner := metav1.GetControllerOf(pod); owner != nil && owner.Kind == "DaemonSet" {
		return Answer{Reason: ReasonDaemonSet, Why: "a DaemonSet's pod belongs to its node and never moves"}
	}
	switch {
	case !c.Registered:
		return unprotected(ReasonNoController, "no CSI driver's fence-attacher sidecar has registered", "", node.Name)
	case !c.Gate:
		return unprotected(ReasonGateOff, "the NonGracefulFailover feature gate is off: nothing fails over", "", node.Name)
	case IsControlPlane(node):
		return unprotected(ReasonControlPlane, "node "+node.Name+" is a control-plane node, never fenced automatically", "", node.Name)
	}
	if why := Maintenance(node); why != "" {
		return unprotected(ReasonMaintenance, why, "", node.Name)
	}
	evict, ok := EvictionAfter(pod)
	if !ok {
		return unprotected(ReasonToleratesUnreachable, "the pod tolerates node.kubernetes.io/unreachable:NoExecute for ever: Kubernetes never evicts it from a dead node", "", node.Name)
	}
	// The taint manager's eviction makes it Terminating: the triage sees
	// it so.
	dying := pod.DeepCopy()
	if dying.DeletionTimestamp == nil {
		now := metav1.Now()
		dying.DeletionTimestamp = &now
	}
	wholeNode := c.enabled(fencingv1alpha1.BackendPower) && c.NodeBackend(node, fencingv1alpha1.BackendPower) ||
		c.enabled(fencingv1alpha1.BackendMachine) && c.NodeBackend(node, fencingv1alpha1.BackendMachine)
	v := Triage(dying, c.Facts, wholeNode)
	if v.Class != Candidate {
		return unprotected(v.Reason, v.Why, v.Driver, node.Name)
	}
	if !slices.Contains(c.Admitted, node.Name) {
		if c.Paused != "" {
			return unprotected(ReasonStormGuardPaused, "fencing is paused: "+c.Paused, "", node.Name)
		}
		if ok, why := StormGuard(len(c.Admitted), c.Nodes, c.MaxNodes, c.MaxPercent, false); !ok {
			return unprotected(ReasonStormGuardFull, "the storm guard would refuse the node: "+why, "", node.Name)
		}
	}
	backend := fencingv1alpha1.BackendStorage
	if need, why := NeedsNodeFence(c.Backends, v.Vols, c.StorageFences); need {
		nodeLevel := NodeBackends(c.Backends, func(b string) bool { return c.NodeBackend(node, b) })
		storageFrees := true
		var stuck string
		for _, vol := range v.Vols {
			if !c.StorageFences(vol.Driver) {
				storageFrees, stuck = false, vol.Driver
				break
			}
		}
		switch {
		case len(nodeLevel) > 0:
			backend = nodeLevel[0]
		case !storageFrees:
			return unprotected(ReasonNoNodeBackend, why+", and no node-level backend can fence node "+node.Name, stuck, node.Name)
		}
	}
	a := Answer{Protected: true, Backend: backend}
	grace := c.NodeMonitorGracePeriod
	if grace == 0 {
		grace = DefaultNodeMonitorGracePeriod
	}
	a.After = []Term{
		{Name: "node-monitor-grace-period", Seconds: grace.Seconds(), Known: true, Source: "kube-controller-manager: the node is marked unreachable"},
		{Name: "tolerationSeconds", Seconds: evict.Seconds(), Known: true, Source: "the pod's toleration of node.kubernetes.io/unreachable:NoExecute (0: none)"},
	}
	fence := Term{Name: "fence (" + backend + ")"}
	if c.FenceTime != nil {
		fence = c.FenceTime(node, backend)
	}
	a.After = append(a.After, fence)
	for _, t := range a.After {
		a.AfterSeconds += t.Seconds
	}
	return a
}

func (c Cluster) enabled(backend string) bool { return slices.Contains(c.Backends, backend) }

// UnreachableTaint is the taint the node lifecycle controller puts on a
// node whose kubelet stopped talking; its NoExecute effect evicts the pods
// that do not tolerate it.
var UnreachableTaint = v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}

// EvictionAfter is how long after its node is marked unreachable the taint
// manager evicts the pod (makes it Terminating), as it computes it: the
// shortest tolerationSeconds of the pod's tolerations of the taint, 0
// without one; ok false when every one of them tolerates it for ever.
func EvictionAfter(pod *v1.Pod) (time.Duration, bool) {
	var matching []v1.Toleration
	for _, t := range pod.Spec.Tolerations {
		if t.ToleratesTaint(klog.Background(), &UnreachableTaint, false) {
			matching = append(matching, t)
		}
	}
	if len(matching) == 0 {
		return 0, true
	}
	after, bounded := time.Duration(0), false
	for _, t := range matching {
		if t.TolerationSeconds == nil {
			continue
		}
		d := time.Duration(max(*t.TolerationSeconds, 0)) * time.Second
		if !bounded || d < after {
			after, bounded = d, true
		}
	}
	return after, bounded
}
