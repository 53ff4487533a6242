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

// Package termreason decides why a pod is being terminated, in the
// vocabulary of the Pod Termination Reason design (Eviction,
// IntolerableTaint, Decommissioned, Update, or a free-form reason its deleter
// gave), and names how a pod opts in to receive that reason in its preStop
// hooks and how it may rename the variable or header that carries it.
//
// Kubernetes records no reason on a deleted pod; what it leaves are signals,
// read here in the order of how directly they state the deleter's intent:
//
//  1. the deleter's own annotation (ReasonAnnotation): this system's pod GC
//     and the kubectl-fence plugin write it before they delete;
//  2. the DisruptionTarget condition that the eviction API, the scheduler's
//     preemption, the kubelet, the taint manager and the pod GC set;
//  3. the owner's desired state: a StatefulSet scaled below the pod's
//     ordinal (Decommissioned), or an owner whose current revision is not
//     the pod's (Update).
//
// When none applies the reason is Unknown: a consumer that hands off
// terabytes on Decommissioned must never do so on a guess.
//
// Decide is pure (objects in, reason out); Gather reads the objects it
// needs, each read bounded by the caller's context.
package termreason

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// Reasons. The four of the seed are contract's; Unknown says that no signal
// applied.
const (
	Eviction         = contract.TerminationEviction
	IntolerableTaint = contract.TerminationIntolerableTaint
	Decommissioned   = contract.TerminationDecommissioned
	Update           = contract.TerminationUpdate
	Unknown          = "Unknown"
)

// ReasonAnnotation is where a deleter records its reason before it deletes
// (contract.TerminationReasonAnnotation, which this system's pod GC has
// always written on the pods it force-deletes).
const ReasonAnnotation = contract.TerminationReasonAnnotation

// Opt-in and delivery overrides.
const (
	// OptInKey, as a pod label or annotation with value OptInEnabled, asks
	// the webhook to deliver the reason to the pod's preStop hooks.
	OptInKey     = contract.Prefix + "/termination-reason-hook"
	OptInEnabled = "enabled"
	// EnvAnnotation renames the environment variable of command hooks
	// (default contract.TerminationReasonEnv).
	EnvAnnotation = contract.Prefix + "/termination-reason-env"
	// HeaderAnnotation renames the header of HTTP GET hooks (default
	// contract.TerminationReasonHeader).
	HeaderAnnotation = contract.Prefix + "/termination-reason-header"
)

// DisruptionTarget reasons set by Kubernetes' own components (constants of
// k8s.io/kubernetes, which is not importable).
const (
	DisruptionEvictionAPI  = "EvictionByEvictionAPI"
	DisruptionPreemption   = "PreemptionByScheduler"
	DisruptionKubelet      = "TerminationByKubelet"
	DisruptionTaintManager = "DeletionByTaintManager"
	DisruptionPodGC        = "DeletionByPodGC"
)

// Labels the workload controllers put on their pods.
const (
	RevisionLabel      = appsv1.ControllerRevisionHashLabelKey // StatefulSet, DaemonSet
	PodIndexLabel      = appsv1.PodIndexLabel                  // StatefulSet ordinal
	DeploymentRevision = "deployment.kubernetes.io/revision"   // on a Deployment's ReplicaSets
)

// MaxReasonLength bounds a free-form reason: it travels in an environment
// variable and an HTTP header.
const MaxReasonLength = 256

// Signals are what Decide looks at. Only Pod is required; a signal whose
// object could not be read is left empty and cannot apply.
type Signals struct {
	Pod *v1.Pod
	// Node is the pod's node (for the pod GC's DisruptionTarget).
	Node *v1.Node
	// StatefulSet is the pod's controller when it is one.
	StatefulSet *appsv1.StatefulSet
	// CurrentRevision is the controller-revision-hash label that a pod of
	// its StatefulSet's or DaemonSet's current revision carries ("" when
	// not known).
	CurrentRevision string
	// NewestReplicaSet is the name of the newest ReplicaSet of the
	// Deployment that owns the pod's ReplicaSet ("" when the pod is not a
	// Deployment's or it is not known).
	NewestReplicaSet string
}

// Decision is a reason and the signal it came from (for logs).
type Decision struct {
	Reason string
	Source string
}

// Decide returns the pod's termination reason from its signals; see the
// package comment for the order.
func Decide(s Signals) Decision {
	pod := s.Pod
	if r, ok := pod.Annotations[ReasonAnnotation]; ok {
		if err := ValidReason(r); err == nil {
			return Decision{r, "annotation " + ReasonAnnotation}
		}
	}
	if c := disruptionTarget(pod); c != nil {
		switch c.Reason {
		case DisruptionEvictionAPI, DisruptionPreemption, DisruptionKubelet:
			return Decision{Eviction, "DisruptionTarget " + c.Reason}
		case DisruptionTaintManager:
			return Decision{IntolerableTaint, "DisruptionTarget " + c.Reason}
		case DisruptionPodGC:
			// The pod GC deletes orphans (their node is gone), pods that
			// never got scheduled, and pods on a node tainted
			// out-of-service. Only the last is a taint the pod does not
			// tolerate; the others say nothing about why.
			if untoleratedNoExecute(pod, s.Node) {
				return Decision{IntolerableTaint, "DisruptionTarget " + c.Reason + " on a NoExecute-tainted node"}
			}
		}
	}
	if sts := s.StatefulSet; sts != nil && ownedBy(pod, "StatefulSet", sts.Name) {
		if ord, ok := ordinal(pod, sts.Name); ok {
			start := int32(0)
			if sts.Spec.Ordinals != nil {
				start = sts.Spec.Ordinals.Start
			}
			replicas := int32(1)
			if sts.Spec.Replicas != nil {
				replicas = *sts.Spec.Replicas
			}
			if ord < start || ord-start >= replicas {
				return Decision{Decommissioned, fmt.Sprintf("StatefulSet %s has %d replicas from ordinal %d, the pod is ordinal %d", sts.Name, replicas, start, ord)}
			}
		}
	}
	if rev := pod.Labels[RevisionLabel]; s.CurrentRevision != "" && rev != "" && rev != s.CurrentRevision {
		return Decision{Update, fmt.Sprintf("pod revision %s, owner's current revision %s", rev, s.CurrentRevision)}
	}
	if ref := controllerOf(pod); s.NewestReplicaSet != "" && ref != nil && ref.Kind == "ReplicaSet" && ref.Name != s.NewestReplicaSet {
		return Decision{Update, fmt.Sprintf("pod of ReplicaSet %s, the Deployment's newest is %s", ref.Name, s.NewestReplicaSet)}
	}
	return Decision{Unknown, "no signal applies"}
}

func disruptionTarget(pod *v1.Pod) *v1.PodCondition {
	for i, c := range pod.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func untoleratedNoExecute(pod *v1.Pod, node *v1.Node) bool {
	if node == nil {
		return false
	}
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != v1.TaintEffectNoExecute {
			continue
		}
		tolerated := false
		for _, tol := range pod.Spec.Tolerations {
			if tol.ToleratesTaint(klog.Background(), t, false) && tol.TolerationSeconds == nil {
				tolerated = true
			}
		}
		if !tolerated {
			return true
		}
	}
	return false
}

func controllerOf(pod *v1.Pod) *struct{ Kind, Name string } {
	for _, r := range pod.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return &struct{ Kind, Name string }{r.Kind, r.Name}
		}
	}
	return nil
}

func ownedBy(pod *v1.Pod, kind, name string) bool {
	ref := controllerOf(pod)
	return ref != nil && ref.Kind == kind && ref.Name == name
}

// ordinal is the pod's StatefulSet ordinal: its pod-index label, else the
// suffix of its name, as the StatefulSet controller names it.
func ordinal(pod *v1.Pod, set string) (int32, bool) {
	s, ok := pod.Labels[PodIndexLabel]
	if !ok {
		var found bool
		if s, found = strings.CutPrefix(pod.Name, set+"-"); !found {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return int32(n), true
}

// ValidReason checks a free-form reason: it is delivered in an environment
// variable and an HTTP header, so it must be short, printable, on one line.
func ValidReason(r string) error {
	switch {
	case strings.TrimSpace(r) == "":
		return fmt.Errorf("the reason is empty")
	case len(r) > MaxReasonLength:
		return fmt.Errorf("the reason is longer than %d bytes", MaxReasonLength)
	case r != strings.TrimSpace(r):
		return fmt.Errorf("the reason %q has leading or trailing space", r)
	}
	for _, c := range r {
		if c > unicode.MaxASCII || !unicode.IsPrint(c) {
			return fmt.Errorf("the reason %q has a character that is not printable ASCII (%U): it must fit an HTTP header", r, c)
		}
	}
	return nil
}

// Delivery is how the reason reaches the hooks of one pod.
type Delivery struct {
	// Env is the variable of command hooks, Header the header of HTTP GET
	// hooks.
	Env, Header string
}

// OptedIn reports whether the pod asks for the reason in its hooks.
func OptedIn(pod *v1.Pod) bool {
	return pod.Labels[OptInKey] == OptInEnabled || pod.Annotations[OptInKey] == OptInEnabled
}

// ValidateDelivery applies the seed's rules to an opted-in pod's overrides:
// a variable only with command hooks, a header only with HTTP GET hooks, not
// both, and a valid name. The overrides are the pod's; its preStop hooks are
// the ones they apply to, all of them, so an override is refused when any
// hook of the pod is of the other kind.
func ValidateDelivery(pod *v1.Pod) (Delivery, error) {
	d := Delivery{Env: contract.TerminationReasonEnv, Header: contract.TerminationReasonHeader}
	env, hasEnv := pod.Annotations[EnvAnnotation]
	header, hasHeader := pod.Annotations[HeaderAnnotation]
	if hasEnv && hasHeader {
		return d, fmt.Errorf("annotations %s and %s are both set: a hook receives the reason either in a variable (command hook) or in a header (HTTP GET hook), not both", EnvAnnotation, HeaderAnnotation)
	}
	var execs, gets []string
	for _, c := range allContainers(pod) {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
			continue
		}
		switch h := c.Lifecycle.PreStop; {
		case h.Exec != nil:
			execs = append(execs, c.Name)
		case h.HTTPGet != nil:
			gets = append(gets, c.Name)
		}
	}
	if hasEnv {
		if len(gets) > 0 {
			return d, fmt.Errorf("annotation %s names a variable, but the preStop hook of container(s) %s is an HTTP GET: a variable only reaches command hooks (use %s)", EnvAnnotation, strings.Join(gets, ", "), HeaderAnnotation)
		}
		if len(execs) == 0 {
			return d, fmt.Errorf("annotation %s names a variable, but no container has a command preStop hook", EnvAnnotation)
		}
		if !cIdentifier(env) {
			return d, fmt.Errorf("annotation %s=%q is not a valid environment variable name (letters, digits and '_', not starting with a digit)", EnvAnnotation, env)
		}
		d.Env = env
	}
	if hasHeader {
		if len(execs) > 0 {
			return d, fmt.Errorf("annotation %s names a header, but the preStop hook of container(s) %s is a command: a header only reaches HTTP GET hooks (use %s)", HeaderAnnotation, strings.Join(execs, ", "), EnvAnnotation)
		}
		if len(gets) == 0 {
			return d, fmt.Errorf("annotation %s names a header, but no container has an HTTP GET preStop hook", HeaderAnnotation)
		}
		if errs := validation.IsHTTPHeaderName(header); len(errs) > 0 || header == "" {
			return d, fmt.Errorf("annotation %s=%q is not a valid HTTP header name: %s", HeaderAnnotation, header, strings.Join(errs, "; "))
		}
		d.Header = header
	}
	return d, nil
}

// allContainers are the pod's containers that can have a preStop hook:
// regular ones and restartable (sidecar) init containers.
func allContainers(pod *v1.Pod) []v1.Container {
	var out []v1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return append(out, pod.Spec.Containers...)
}

// cIdentifier is the POSIX shell's rule for a variable name, stricter than
// what Kubernetes accepts in env (which allows '.' and '-'): a hook command
// run by a shell must be able to read it.
func cIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c != '_' && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
