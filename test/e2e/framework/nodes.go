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

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// KwokLabel is the label KWOK selects the nodes it simulates by. Removing it
// stops the node's heartbeat (a power cut); adding it back starts it again.
// KWOK's label selector is evaluated by the apiserver, so the removal reaches
// KWOK as a watch DELETED event and it lets go of the node at once; its
// annotation selector is client-side only and would not.
const KwokLabel = "kwok.x-k8s.io/node"

// KwokLabelValue is the value of KwokLabel on the nodes this framework makes.
const KwokLabelValue = "fake"

// Keep at least one node Ready at all times. When every node is NotReady the
// node lifecycle controller enters "master disruption mode" and stops adding
// the unreachable NoExecute taint and evicting pods (with more than two
// NotReady nodes and over 55% of a zone it slows down likewise), which is
// not the failure any test here means to simulate.

// CreateNode creates a KWOK node and, since no kubelet or node-driver-registrar
// runs, its CSINode with an entry for each driver (node ID = node name);
// no driver (or only "") creates no CSINode.
func (c *Cluster) CreateNode(ctx context.Context, name string, drivers ...string) error {
	return c.CreateLabelledNode(ctx, name, nil, drivers...)
}

// CreateLabelledNode is CreateNode with labels of the caller's besides
// KWOK's and the hostname, in the same request (a benchmark's thousand
// nodes, each placed in a pool by label).
func (c *Cluster) CreateLabelledNode(ctx context.Context, name string, labels map[string]string, drivers ...string) error {
	all := map[string]string{KwokLabel: KwokLabelValue, "kubernetes.io/hostname": name, "type": "kwok"}
	for k, v := range labels {
		all[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: all,
			Annotations: map[string]string{
				// A kubelet sets it; without it the attach/detach controller
				// ignores the node.
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"node.alpha.kubernetes.io/ttl":                           "0",
			},
		},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return err
	}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, d := range drivers {
		if d != "" {
			csiNode.Spec.Drivers = append(csiNode.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: name})
		}
	}
	if len(csiNode.Spec.Drivers) == 0 {
		return nil
	}
	_, err := c.Client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A node registering again under its name (its Node object was
		// deleted) finds the CSINode it left: nothing owns it here.
		return nil
	}
	return err
}

// CreateNodes creates n KWOK nodes named prefix-0 ... prefix-(n-1) (see
// CreateNode) and waits until all are Ready.
func (c *Cluster) CreateNodes(ctx context.Context, prefix string, n int, driver string) ([]string, error) {
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if err := c.CreateNode(ctx, name, driver); err != nil {
			return names, err
		}
		names = append(names, name)
	}
	for _, name := range names {
		if err := c.WaitNodeReady(ctx, name, true, 30*time.Second); err != nil {
			return names, err
		}
		// A new node carries node.kubernetes.io/not-ready:NoSchedule until
		// the node lifecycle controller has seen it Ready; a pod created
		// before that waits in the scheduler's backoff for seconds.
		if err := c.WaitTaint(ctx, name, corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule, false, 30*time.Second); err != nil {
			return names, err
		}
	}
	return names, nil
}

// ShutDown stops the node's heartbeat, as a power cut would: KWOK stops
// renewing its Lease, and after the node monitor grace period the node
// lifecycle controller marks it NotReady (Unknown) and taints it
// node.kubernetes.io/unreachable. What ran on the node (its mock node
// instance) is the caller's to stop.
func (c *Cluster) ShutDown(ctx context.Context, name string) error {
	return c.patchNode(ctx, name, map[string]interface{}{"metadata": map[string]interface{}{"labels": map[string]interface{}{KwokLabel: nil}}})
}

// BringBack restarts the node's heartbeat (KWOK's node-initialize stage runs
// again and the node turns Ready).
func (c *Cluster) BringBack(ctx context.Context, name string) error {
	return c.patchNode(ctx, name, map[string]interface{}{"metadata": map[string]interface{}{"labels": map[string]interface{}{KwokLabel: KwokLabelValue}}})
}

func (c *Cluster) patchNode(ctx context.Context, name string, patch interface{}) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

// NodeReady reports the node's Ready condition.
func NodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitNodeReady waits until the node's Ready condition is want.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string, want bool, timeout time.Duration) error {
	return WaitFor(ctx, timeout, fmt.Sprintf("node %s Ready=%v", name, want), func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return NodeReady(n) == want, nil
	})
}

// WaitNodeNotReady waits until the node is no longer Ready (False or
// Unknown).
func (c *Cluster) WaitNodeNotReady(ctx context.Context, name string, timeout time.Duration) error {
	return c.WaitNodeReady(ctx, name, false, timeout)
}

// HasTaint reports whether the node has a taint with key and effect.
func HasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

// WaitTaint waits until the node has (want) or has not (!want) a taint with
// key and effect.
func (c *Cluster) WaitTaint(ctx context.Context, name, key string, effect corev1.TaintEffect, want bool, timeout time.Duration) error {
	return WaitFor(ctx, timeout, fmt.Sprintf("node %s taint %s:%s present=%v", name, key, effect, want), func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return HasTaint(n, key, effect) == want, nil
	})
}

// AddTaint adds a taint to the node (no-op if its key is there). The node
// lifecycle controller and KWOK write the same Node, so a conflict is
// retried on a fresh copy.
func (c *Cluster) AddTaint(ctx context.Context, name string, taint corev1.Taint) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, t := range n.Spec.Taints {
			if t.Key == taint.Key {
				return nil
			}
		}
		n.Spec.Taints = append(n.Spec.Taints, taint)
		_, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// RemoveTaint removes every taint with key from the node.
func (c *Cluster) RemoveTaint(ctx context.Context, name, key string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var kept []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != key {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = kept
		_, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
