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
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Gather reads the signals of a pod that is being deleted: the pod itself,
// then, only when the pod's own record does not tell, its node and its
// owner's desired state. Every read is bounded by ctx; a read that fails
// (no permission, timeout, gone) leaves its signal empty, so that Decide
// falls back towards Unknown instead of guessing. It returns an error only
// when the pod itself cannot be read.
func Gather(ctx context.Context, client kubernetes.Interface, namespace, name string) (Signals, error) {
	logger := klog.FromContext(ctx)
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Signals{}, err
	}
	s := Signals{Pod: pod}
	if d := Decide(s); d.Reason != Unknown {
		return s, nil // the pod's own record decides: read nothing more
	}
	if c := disruptionTarget(pod); c != nil && c.Reason == DisruptionPodGC && pod.Spec.NodeName != "" {
		if s.Node, err = client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{}); err != nil {
			logger.V(2).Info("Cannot read the pod's node", "node", pod.Spec.NodeName, "err", err)
			s.Node = nil
		}
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return s, nil
	}
	apps := client.AppsV1()
	switch ref.Kind {
	case "StatefulSet":
		sts, err := apps.StatefulSets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil || sts.UID != ref.UID {
			logger.V(2).Info("Cannot read the pod's StatefulSet", "statefulSet", ref.Name, "err", err)
			return s, nil
		}
		s.StatefulSet = sts
		// The controller creates the new revision before it deletes the
		// first old pod, and writes status.updateRevision only after: the
		// newest ControllerRevision is the one to compare with.
		if rev := newestRevision(ctx, client, namespace, sts.UID, sts.Spec.Selector); rev != nil {
			s.CurrentRevision = rev.Name
		} else {
			s.CurrentRevision = sts.Status.UpdateRevision
		}
	case "DaemonSet":
		ds, err := apps.DaemonSets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil || ds.UID != ref.UID {
			logger.V(2).Info("Cannot read the pod's DaemonSet", "daemonSet", ref.Name, "err", err)
			return s, nil
		}
		// A DaemonSet's pods carry the hash alone, which its
		// ControllerRevisions carry as a label.
		if rev := newestRevision(ctx, client, namespace, ds.UID, ds.Spec.Selector); rev != nil {
			s.CurrentRevision = rev.Labels[RevisionLabel]
		}
	case "ReplicaSet":
		rs, err := apps.ReplicaSets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil || rs.UID != ref.UID {
			logger.V(2).Info("Cannot read the pod's ReplicaSet", "replicaSet", ref.Name, "err", err)
			return s, nil
		}
		dep := metav1.GetControllerOf(rs)
		if dep == nil || dep.Kind != "Deployment" {
			return s, nil
		}
		s.NewestReplicaSet = newestReplicaSet(ctx, client, namespace, dep.UID, rs.Spec.Selector)
	}
	return s, nil
}

func newestRevision(ctx context.Context, client kubernetes.Interface, namespace string, owner types.UID, sel *metav1.LabelSelector) *appsv1.ControllerRevision {
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil
	}
	list, err := client.AppsV1().ControllerRevisions(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot list ControllerRevisions", "err", err)
		return nil
	}
	var newest *appsv1.ControllerRevision
	for i := range list.Items {
		r := &list.Items[i]
		if ref := metav1.GetControllerOf(r); ref == nil || ref.UID != owner {
			continue
		}
		if newest == nil || r.Revision > newest.Revision {
			newest = r
		}
	}
	return newest
}

// newestReplicaSet is the name of the Deployment's ReplicaSet with the
// highest revision annotation: the one the Deployment rolls towards.
func newestReplicaSet(ctx context.Context, client kubernetes.Interface, namespace string, deployment types.UID, sel *metav1.LabelSelector) string {
	// A Deployment's ReplicaSets differ in pod-template-hash only: drop it
	// from the selector to list them all.
	s := sel.DeepCopy()
	delete(s.MatchLabels, appsv1.DefaultDeploymentUniqueLabelKey)
	selector, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return ""
	}
	list, err := client.AppsV1().ReplicaSets(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot list ReplicaSets", "err", err)
		return ""
	}
	newest, best := "", int64(-1)
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref == nil || ref.UID != deployment {
			continue
		}
		if n, err := strconv.ParseInt(rs.Annotations[DeploymentRevision], 10, 64); err == nil && n > best {
			newest, best = rs.Name, n
		}
	}
	return newest
}
