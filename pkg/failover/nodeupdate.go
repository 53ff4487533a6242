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

package failover

import (
	"context"
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/util/retry"
)

func (c *Controller) updateNode(ctx context.Context, name string, mutate func(*v1.Node) bool) error {
	return c.mutateNode(ctx, name, false, true, mutate)
}

func (c *Controller) updateNodeStatus(ctx context.Context, name string, mutate func(*v1.Node) bool) error {
	return c.mutateNode(ctx, name, true, true, mutate)
}

// updateNodeLive is updateNode from a live read: for a change of what this
// pass wrote itself a moment ago, which the cache may not show yet (mutate
// would find nothing to change).
func (c *Controller) updateNodeLive(ctx context.Context, name string, mutate func(*v1.Node) bool) error {
	return c.mutateNode(ctx, name, false, false, mutate)
}

// mutateNode applies mutate to a copy of the node and sends the difference
// as a strategic-merge patch (of its status subresource when status) that
// carries the copy's resourceVersion: the lists it changes (taints,
// volumesInUse) have no merge key and are replaced whole, so the patch must
// fail if anyone (the kubelet, the node lifecycle controller) wrote the node
// since. The first try starts from the cache when cached, saving a read; a
// conflict retries from a live read, as the node lifecycle controller's
// taint helpers do.
func (c *Controller) mutateNode(ctx context.Context, name string, status, cached bool, mutate func(*v1.Node) bool) error {
	nodes := c.client.CoreV1().Nodes()
	first := cached
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var n *v1.Node
		var err error
		if first {
			first = false
			if n, err = c.nodes.Get(name); err == nil {
				n = n.DeepCopy()
			}
		}
		if n == nil {
			if n, err = nodes.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		old := n.DeepCopy()
		old.ResourceVersion = ""
		if !mutate(n) {
			return nil
		}
		oldJSON, err := json.Marshal(old)
		if err != nil {
			return err
		}
		newJSON, err := json.Marshal(n)
		if err != nil {
			return err
		}
		patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Node{})
		if err != nil {
			return err
		}
		var sub []string
		if status {
			sub = []string{"status"}
		}
		_, err = nodes.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, sub...)
		return err
	})
}
