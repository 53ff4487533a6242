package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// KwokLabel is the label KWOK selects the nodes it simulates by. Removing it
// stops the node's heartbeat (a power cut); adding it back starts it again.
const KwokLabel = "kwok.x-k8s.io/node"

// CreateNode creates a KWOK node and, since no kubelet or node-driver-registrar
// runs, its CSINode with an entry for driver (node ID = node name).
func (c *Cluster) CreateNode(ctx context.Context, name, driver string) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{KwokLabel: "fake", "kubernetes.io/hostname": name, "type": "kwok"},
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
	if driver != "" {
		csiNode := &storagev1.CSINode{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: name}}},
		}
		if _, err := c.Client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// ShutDown stops the node's heartbeat, as a power cut or a partition would.
func (c *Cluster) ShutDown(ctx context.Context, name string) error {
	return c.patchNode(ctx, name, map[string]interface{}{"metadata": map[string]interface{}{"labels": map[string]interface{}{KwokLabel: nil}}})
}

// BringBack restarts the node's heartbeat.
func (c *Cluster) BringBack(ctx context.Context, name string) error {
	return c.patchNode(ctx, name, map[string]interface{}{"metadata": map[string]interface{}{"labels": map[string]interface{}{KwokLabel: "fake"}}})
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

// AddTaint adds a taint to the node (no-op if its key is there).
func (c *Cluster) AddTaint(ctx context.Context, name string, taint corev1.Taint) error {
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
}

// RemoveTaint removes every taint with key from the node.
func (c *Cluster) RemoveTaint(ctx context.Context, name, key string) error {
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
	n.Spec.Taints = kept
	_, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return err
}
