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

package termreason

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

const ns = "ns"

func ownerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}
}

type podOpt func(*v1.Pod)

func pod(name string, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}, Annotations: map[string]string{}}}
	p.Spec.NodeName = "n1"
	for _, o := range opts {
		o(p)
	}
	return p
}

func annotated(k, v string) podOpt { return func(p *v1.Pod) { p.Annotations[k] = v } }
func labeled(k, v string) podOpt   { return func(p *v1.Pod) { p.Labels[k] = v } }
func owned(kind, name string, uid types.UID) podOpt {
	return func(p *v1.Pod) { p.OwnerReferences = append(p.OwnerReferences, ownerRef(kind, name, uid)) }
}
func disrupted(reason string, status v1.ConditionStatus) podOpt {
	return func(p *v1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.DisruptionTarget, Status: status, Reason: reason})
	}
}
func tolerating(key string, seconds *int64) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: seconds})
	}
}

func statefulSet(name string, replicas int32, start int32) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: "sts-uid"}}
	s.Spec.Replicas = ptr.To(replicas)
	if start != 0 {
		s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: start}
	}
	return s
}

func taintedNode(key string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: key, Effect: v1.TaintEffectNoExecute}}}}
}

func TestDecide(t *testing.T) {
	web := func(i string, opts ...podOpt) *v1.Pod {
		return pod("web-"+i, append([]podOpt{owned("StatefulSet", "web", "sts-uid"), labeled(PodIndexLabel, i), labeled(RevisionLabel, "web-old")}, opts...)...)
	}
	for _, tc := range []struct {
		name       string
		s          Signals
		want       string
		wantSource string
	}{
		{name: "no signal: Unknown, never a guess", s: Signals{Pod: pod("p")}, want: Unknown},
		{name: "the deleter's free-form annotation", s: Signals{Pod: pod("p", annotated(ReasonAnnotation, "Rebalance to rack B"))}, want: "Rebalance to rack B"},
		{name: "this system's pod GC annotation wins over its own DisruptionTarget", s: Signals{Pod: pod("p", annotated(ReasonAnnotation, IntolerableTaint), disrupted(DisruptionPodGC, v1.ConditionTrue))}, want: IntolerableTaint, wantSource: "annotation"},
		{name: "annotation wins over the owner's state", s: Signals{Pod: web("3", annotated(ReasonAnnotation, "Maintenance")), StatefulSet: statefulSet("web", 1, 0)}, want: "Maintenance"},
		{name: "an invalid annotation is no signal", s: Signals{Pod: pod("p", annotated(ReasonAnnotation, "two\nlines"))}, want: Unknown},
		{name: "an empty annotation is no signal", s: Signals{Pod: pod("p", annotated(ReasonAnnotation, ""), disrupted(DisruptionEvictionAPI, v1.ConditionTrue))}, want: Eviction},
		{name: "eviction API", s: Signals{Pod: pod("p", disrupted(DisruptionEvictionAPI, v1.ConditionTrue))}, want: Eviction},
		{name: "preemption", s: Signals{Pod: pod("p", disrupted(DisruptionPreemption, v1.ConditionTrue))}, want: Eviction},
		{name: "kubelet (node pressure)", s: Signals{Pod: pod("p", disrupted(DisruptionKubelet, v1.ConditionTrue))}, want: Eviction},
		{name: "taint manager", s: Signals{Pod: pod("p", disrupted(DisruptionTaintManager, v1.ConditionTrue))}, want: IntolerableTaint},
		{name: "a DisruptionTarget that is not True is no signal", s: Signals{Pod: pod("p", disrupted(DisruptionEvictionAPI, v1.ConditionFalse))}, want: Unknown},
		{name: "an unknown DisruptionTarget reason is no signal", s: Signals{Pod: pod("p", disrupted("SomethingNew", v1.ConditionTrue))}, want: Unknown},
		{name: "pod GC on a node tainted out-of-service", s: Signals{Pod: pod("p", disrupted(DisruptionPodGC, v1.ConditionTrue)), Node: taintedNode("node.kubernetes.io/out-of-service")}, want: IntolerableTaint},
		{name: "pod GC of an orphan (node gone): Unknown", s: Signals{Pod: pod("p", disrupted(DisruptionPodGC, v1.ConditionTrue))}, want: Unknown},
		{name: "pod GC, the taint tolerated forever: Unknown", s: Signals{Pod: pod("p", disrupted(DisruptionPodGC, v1.ConditionTrue), tolerating("node.kubernetes.io/out-of-service", nil)), Node: taintedNode("node.kubernetes.io/out-of-service")}, want: Unknown},
		{name: "pod GC, the taint tolerated for a while: IntolerableTaint", s: Signals{Pod: pod("p", disrupted(DisruptionPodGC, v1.ConditionTrue), tolerating("node.kubernetes.io/out-of-service", ptr.To[int64](30))), Node: taintedNode("node.kubernetes.io/out-of-service")}, want: IntolerableTaint},
		{name: "StatefulSet scaled below the ordinal", s: Signals{Pod: web("2"), StatefulSet: statefulSet("web", 2, 0)}, want: Decommissioned},
		{name: "StatefulSet ordinal within replicas", s: Signals{Pod: web("1"), StatefulSet: statefulSet("web", 2, 0)}, want: Unknown},
		{name: "StatefulSet scaled to zero", s: Signals{Pod: web("0"), StatefulSet: statefulSet("web", 0, 0)}, want: Decommissioned},
		{name: "StatefulSet with a start ordinal, within", s: Signals{Pod: web("5"), StatefulSet: statefulSet("web", 2, 5)}, want: Unknown},
		{name: "StatefulSet with a start ordinal, above", s: Signals{Pod: web("7"), StatefulSet: statefulSet("web", 2, 5)}, want: Decommissioned},
		{name: "StatefulSet ordinal from the name without the label", s: Signals{Pod: pod("web-4", owned("StatefulSet", "web", "sts-uid")), StatefulSet: statefulSet("web", 2, 0)}, want: Decommissioned},
		{name: "another StatefulSet's object says nothing", s: Signals{Pod: web("4"), StatefulSet: statefulSet("db", 1, 0)}, want: Unknown},
		{name: "decommission wins over update", s: Signals{Pod: web("3"), StatefulSet: statefulSet("web", 2, 0), CurrentRevision: "web-new"}, want: Decommissioned},
		{name: "StatefulSet rolling update", s: Signals{Pod: web("1"), StatefulSet: statefulSet("web", 2, 0), CurrentRevision: "web-new"}, want: Update},
		{name: "StatefulSet pod at the current revision", s: Signals{Pod: web("1"), StatefulSet: statefulSet("web", 2, 0), CurrentRevision: "web-old"}, want: Unknown},
		{name: "DaemonSet rolling update", s: Signals{Pod: pod("ds-x", owned("DaemonSet", "ds", "ds-uid"), labeled(RevisionLabel, "aaa")), CurrentRevision: "bbb"}, want: Update},
		{name: "DaemonSet pod at the current revision", s: Signals{Pod: pod("ds-x", owned("DaemonSet", "ds", "ds-uid"), labeled(RevisionLabel, "bbb")), CurrentRevision: "bbb"}, want: Unknown},
		{name: "revision unknown: no signal", s: Signals{Pod: pod("ds-x", owned("DaemonSet", "ds", "ds-uid"), labeled(RevisionLabel, "aaa"))}, want: Unknown},
		{name: "Deployment rolling: the pod's ReplicaSet is not the newest", s: Signals{Pod: pod("d-1-x", owned("ReplicaSet", "d-1", "rs1")), NewestReplicaSet: "d-2"}, want: Update},
		{name: "Deployment scaled down: the pod's ReplicaSet is the newest", s: Signals{Pod: pod("d-2-x", owned("ReplicaSet", "d-2", "rs2")), NewestReplicaSet: "d-2"}, want: Unknown},
		{name: "eviction during a rolling update is an eviction", s: Signals{Pod: web("1", disrupted(DisruptionEvictionAPI, v1.ConditionTrue)), StatefulSet: statefulSet("web", 2, 0), CurrentRevision: "web-new"}, want: Eviction},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.s)
			if d.Reason != tc.want {
				t.Fatalf("reason %q (from %s), want %q", d.Reason, d.Source, tc.want)
			}
			if !strings.Contains(d.Source, tc.wantSource) {
				t.Errorf("source %q, want it to mention %q", d.Source, tc.wantSource)
			}
		})
	}
}

func TestValidReason(t *testing.T) {
	for _, tc := range []struct {
		reason string
		ok     bool
	}{
		{"Eviction", true},
		{"Moving to rack B (ticket 42)", true},
		{"", false},
		{"   ", false},
		{" padded", false},
		{"line\nbreak", false},
		{"cr\rlf", false},
		{"tab\there", false},
		{"ünicode", false},
		{strings.Repeat("x", MaxReasonLength), true},
		{strings.Repeat("x", MaxReasonLength+1), false},
	} {
		if err := ValidReason(tc.reason); (err == nil) != tc.ok {
			t.Errorf("ValidReason(%q) = %v, want ok=%v", tc.reason, err, tc.ok)
		}
	}
}

func execHook(c string) v1.Container {
	return v1.Container{Name: c, Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"/bin/stop"}}}}}
}

func httpHook(c string) v1.Container {
	return v1.Container{Name: c, Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/stop"}}}}
}

func TestValidateDelivery(t *testing.T) {
	withContainers := func(cs ...v1.Container) podOpt { return func(p *v1.Pod) { p.Spec.Containers = cs } }
	for _, tc := range []struct {
		name    string
		pod     *v1.Pod
		want    Delivery
		wantErr string
	}{
		{name: "defaults", pod: pod("p", withContainers(execHook("a"), httpHook("b"))), want: Delivery{"KUBE_POD_TERM_REASON", "KUBE-POD-TERM-REASON"}},
		{name: "env override with command hooks", pod: pod("p", withContainers(execHook("a"), v1.Container{Name: "nohook"}), annotated(EnvAnnotation, "WHY_2")), want: Delivery{"WHY_2", "KUBE-POD-TERM-REASON"}},
		{name: "header override with HTTP hooks", pod: pod("p", withContainers(httpHook("a")), annotated(HeaderAnnotation, "X-Why")), want: Delivery{"KUBE_POD_TERM_REASON", "X-Why"}},
		{name: "not both", pod: pod("p", withContainers(execHook("a")), annotated(EnvAnnotation, "WHY"), annotated(HeaderAnnotation, "X-Why")), wantErr: "not both"},
		{name: "env only with command hooks", pod: pod("p", withContainers(execHook("a"), httpHook("web")), annotated(EnvAnnotation, "WHY")), wantErr: "web is an HTTP GET"},
		{name: "env without any command hook", pod: pod("p", withContainers(v1.Container{Name: "a"}), annotated(EnvAnnotation, "WHY")), wantErr: "no container has a command"},
		{name: "header only with HTTP hooks", pod: pod("p", withContainers(execHook("db"), httpHook("b")), annotated(HeaderAnnotation, "X-Why")), wantErr: "db is a command"},
		{name: "header without any HTTP hook", pod: pod("p", annotated(HeaderAnnotation, "X-Why")), wantErr: "no container has an HTTP GET"},
		{name: "invalid variable name: digit first", pod: pod("p", withContainers(execHook("a")), annotated(EnvAnnotation, "1WHY")), wantErr: "not a valid environment variable name"},
		{name: "invalid variable name: dash", pod: pod("p", withContainers(execHook("a")), annotated(EnvAnnotation, "TERM-REASON")), wantErr: "not a valid environment variable name"},
		{name: "invalid variable name: empty", pod: pod("p", withContainers(execHook("a")), annotated(EnvAnnotation, "")), wantErr: "not a valid environment variable name"},
		{name: "invalid header name", pod: pod("p", withContainers(httpHook("a")), annotated(HeaderAnnotation, "X Why")), wantErr: "not a valid HTTP header name"},
		{name: "empty header name", pod: pod("p", withContainers(httpHook("a")), annotated(HeaderAnnotation, "")), wantErr: "not a valid HTTP header name"},
		{name: "sidecar init container hooks count", pod: pod("p", func(p *v1.Pod) {
			c := httpHook("side")
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
			p.Spec.InitContainers = []v1.Container{c}
			p.Spec.Containers = []v1.Container{execHook("a")}
		}, annotated(EnvAnnotation, "WHY")), wantErr: "side is an HTTP GET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ValidateDelivery(tc.pod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || d != tc.want {
				t.Fatalf("got %+v, %v; want %+v", d, err, tc.want)
			}
		})
	}
}

func TestOptedIn(t *testing.T) {
	for _, tc := range []struct {
		pod  *v1.Pod
		want bool
	}{
		{pod("p"), false},
		{pod("p", labeled(OptInKey, OptInEnabled)), true},
		{pod("p", annotated(OptInKey, OptInEnabled)), true},
		{pod("p", labeled(OptInKey, "yes")), false},
	} {
		if got := OptedIn(tc.pod); got != tc.want {
			t.Errorf("OptedIn(%v %v) = %v", tc.pod.Labels, tc.pod.Annotations, got)
		}
	}
}

// Gather reads the owner's current revision as its controller writes it
// before deleting old pods, and leaves a signal it cannot read empty.
func TestGather(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	sts := statefulSet("web", 3, 0)
	sts.Spec.Selector = sel
	sts.Status.UpdateRevision = "web-old" // not yet written by the controller
	rev := func(name string, n int64, owner types.UID, hash string) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "web", RevisionLabel: hash},
			OwnerReferences: []metav1.OwnerReference{ownerRef("X", "x", owner)}}, Revision: n}
	}
	webPod := pod("web-1", owned("StatefulSet", "web", "sts-uid"), labeled("app", "web"), labeled(RevisionLabel, "web-old"))
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ds", Namespace: ns, UID: "ds-uid"}, Spec: appsv1.DaemonSetSpec{Selector: sel}}
	dsPod := pod("ds-x", owned("DaemonSet", "ds", "ds-uid"), labeled(RevisionLabel, "h1"))
	dep := ownerRef("Deployment", "d", "dep-uid")
	rs := func(name, hash, revision string) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name), Labels: map[string]string{"app": "web", "pod-template-hash": hash},
			Annotations: map[string]string{DeploymentRevision: revision}, OwnerReferences: []metav1.OwnerReference{dep}},
			Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "pod-template-hash": hash}}}}
	}
	depPod := pod("d-1-x", owned("ReplicaSet", "d-1", "d-1"))
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		pod     string
		want    string
		wantErr bool
	}{
		{name: "pod gone", pod: "web-1", wantErr: true},
		{name: "StatefulSet: the newest ControllerRevision, not the stale status", pod: "web-1",
			objects: []runtime.Object{webPod, sts, rev("web-old", 1, "sts-uid", "old"), rev("web-new", 2, "sts-uid", "new"), rev("web-other", 9, "other-uid", "x")}, want: Update},
		{name: "StatefulSet without revisions falls back to its status", pod: "web-1", objects: []runtime.Object{webPod, sts}, want: Unknown},
		{name: "StatefulSet replaced under the same name: no signal", pod: "web-1", objects: []runtime.Object{webPod, func() *appsv1.StatefulSet {
			s := statefulSet("web", 0, 0)
			s.UID = "new-uid"
			return s
		}()}, want: Unknown},
		{name: "StatefulSet scaled down", pod: "web-1", objects: []runtime.Object{webPod, statefulSet("web", 1, 0)}, want: Decommissioned},
		{name: "DaemonSet: the newest revision's hash", pod: "ds-x", objects: []runtime.Object{dsPod, ds, rev("ds-h1", 1, "ds-uid", "h1"), rev("ds-h2", 2, "ds-uid", "h2")}, want: Update},
		{name: "DaemonSet at its newest revision", pod: "ds-x", objects: []runtime.Object{dsPod, ds, rev("ds-h1", 3, "ds-uid", "h1"), rev("ds-h2", 2, "ds-uid", "h2")}, want: Unknown},
		{name: "Deployment: a newer ReplicaSet", pod: "d-1-x", objects: []runtime.Object{depPod, rs("d-1", "h1", "1"), rs("d-2", "h2", "2")}, want: Update},
		{name: "Deployment: the pod's ReplicaSet is the newest", pod: "d-1-x", objects: []runtime.Object{depPod, rs("d-1", "h1", "3"), rs("d-2", "h2", "2")}, want: Unknown},
		{name: "pod GC with the node read", pod: "p", objects: []runtime.Object{pod("p", disrupted(DisruptionPodGC, v1.ConditionTrue)), taintedNode("node.kubernetes.io/out-of-service")}, want: IntolerableTaint},
		{name: "pod GC, node gone", pod: "p", objects: []runtime.Object{pod("p", disrupted(DisruptionPodGC, v1.ConditionTrue))}, want: Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := Gather(ctx, fake.NewClientset(tc.objects...), ns, tc.pod)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if d := Decide(s); d.Reason != tc.want {
				t.Fatalf("reason %q (%s), want %q", d.Reason, d.Source, tc.want)
			}
		})
	}
}
