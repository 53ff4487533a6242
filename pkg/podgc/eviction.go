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

package podgc

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/klog/v2"
)

// LostEvictionMargin is how long after a pod's toleration of its node's
// NoExecute taints ran out, on this process's clock, the taint manager's
// eviction of it is taken for lost. kube-controller-manager's taint
// eviction controller deletes the pod when the toleration ends, but does
// not retry a delete that failed (kubernetes/kubernetes#140639: an
// apiserver restarting at that moment leaves the pod Running on the dead
// node for good, and so out of reach of any failover).
const LostEvictionMargin = 10 * time.Second

// EvictionDue decides when the taint manager should have evicted pod from
// node: the time each of the node's NoExecute taints was first seen (seen,
// on this process's clock) plus the pod's shortest toleration of them, the
// latest of these, plus LostEvictionMargin. ok is false for a pod it would
// never evict: one that tolerates every such taint forever, a mirror pod
// (the kubelet's, deleted with its node's), or a node without NoExecute
// taints. A taint the pod does not tolerate at all is due from when it was
// first seen.
func EvictionDue(pod *v1.Pod, node *v1.Node, seen func(v1.Taint) time.Time) (due time.Time, ok bool) {
	if _, mirror := pod.Annotations[v1.MirrorPodAnnotationKey]; mirror {
		return time.Time{}, false
	}
	for _, taint := range node.Spec.Taints {
		if taint.Effect != v1.TaintEffectNoExecute {
			continue
		}
		tolerated, forever := false, false
		var shortest time.Duration
		for _, tol := range pod.Spec.Tolerations {
			if !tol.ToleratesTaint(klog.Background(), &taint, false) {
				continue
			}
			if tol.TolerationSeconds == nil {
				forever = true
				continue
			}
			d := max(time.Duration(*tol.TolerationSeconds)*time.Second, 0)
			if !tolerated || d < shortest {
				shortest = d
			}
			tolerated = true
		}
		if forever && !tolerated {
			continue // tolerated for good: this taint evicts nothing
		}
		if at := seen(taint).Add(shortest + LostEvictionMargin); !ok || at.After(due) {
			due = at
		}
		ok = true
	}
	return due, ok
}

// Evict deletes pod as kube-controller-manager's taint manager would have,
// gracefully, with its DisruptionTarget reason, when the taint manager's
// eviction of it was lost (EvictionDue). It reads the node live first and
// refuses (ErrNodeAlive) unless it is down; a pod that is terminating
// already only gets the condition again (a graceful delete of it changes
// nothing). The pod then fails over as any other Terminating pod on a dead
// node.
func (g *GC) Evict(ctx context.Context, pod *v1.Pod, message string) error {
	if err := g.NodeDown(ctx, pod.Spec.NodeName); err != nil {
		return fmt.Errorf("not evicting pod %s: %w", klog.KObj(pod), err)
	}
	pods := g.Client.CoreV1().Pods(pod.Namespace)
	status := corev1apply.Pod(pod.Name, pod.Namespace).WithUID(pod.UID).
		WithStatus(corev1apply.PodStatus().
			WithConditions(corev1apply.PodCondition().
				WithType(v1.DisruptionTarget).
				WithStatus(v1.ConditionTrue).
				WithReason(DisruptionReasonTaintManager).
				WithMessage(message).
				WithLastTransitionTime(metav1.Now())))
	// Both requests name the pod's UID: one replaced under its name since
	// (a StatefulSet's) is not touched.
	if _, err := pods.ApplyStatus(ctx, status, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("marking pod %s for eviction: %w", klog.KObj(pod), err)
	}
	uid := pod.UID
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("evicting pod %s: %w", klog.KObj(pod), err)
	}
	lostEvictions.Inc()
	klog.FromContext(ctx).V(2).Info("Evicted a pod whose eviction by the taint manager was lost", "pod", klog.KObj(pod), "node", pod.Spec.NodeName)
	g.Recorder.Eventf(pod, v1.EventTypeWarning, "EvictionTakenOver", "%s", message)
	return nil
}
