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
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
)

// quarantine admits the node through the storm guard (S5), makes sure its
// record exists (fencerecord.RecordQuarantine), then adds the quarantine
// taint: before any fence, so that nothing new is scheduled there while its
// volumes may be fenced; then it confirms the admission, which a prune may
// have dropped meanwhile (confirmQuarantine).
func (c *Controller) quarantine(ctx context.Context, node *v1.Node) error {
	limit, confirmed, err := c.admit(ctx, node)
	if err != nil {
		return err
	}
	if nodestate.Taint(node, contract.QuarantineTaintKey) == nil {
		// Write-ahead: the record the release will read, before the
		// taint it lifts.
		if err := fencerecord.RecordQuarantine(ctx, c.frClient, node.Name, "NodeUnreachable"); err != nil {
			return fmt.Errorf("recording the quarantine: %w", err)
		}
	}
	if err := c.addQuarantineTaint(ctx, node); err != nil {
		return err
	}
	if confirmed {
		return nil
	}
	return c.confirmQuarantine(ctx, node, limit)
}

// admit is the storm guard (S5): fencing one more node must stay within
// --max-fenced-nodes and --max-fenced-node-percent, counted on the shared
// admission Lease (stormguard.go), not on a cache. A node quarantined already
// is continuing and never refused. It returns the limit it admitted under
// and whether the node's quarantine is confirmed already (confirmQuarantine).
func (c *Controller) admit(ctx context.Context, node *v1.Node) (limit func(int) (bool, string), confirmed bool, err error) {
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, false, err
	}
	quarantined := nodestate.Taint(node, contract.QuarantineTaintKey) != nil
	limits := c.registry.limits(klog.FromContext(ctx), guardLimits{maxNodes: c.opts.MaxFencedNodes, maxPercent: c.opts.MaxFencedNodePercent})
	limit = func(admitted int) (bool, string) {
		return StormGuard(admitted, len(all), limits.maxNodes, limits.maxPercent, false)
	}
	confirmed, err = c.guard.admit(ctx, node.Name, quarantined, limit, c.admissionStale)
	if err != nil {
		c.deferred(ctx, node, err)
	}
	return limit, confirmed, err
}

// deferred says why a node is not fenced now: the storm guard refused it.
func (c *Controller) deferred(ctx context.Context, node *v1.Node, err error) {
	stormGuardDeferrals.Inc()
	c.recorder.Eventf(node, v1.EventTypeWarning, "FencingDeferred", "Not fencing node %s: %v", node.Name, err)
	klog.FromContext(ctx).V(2).Info("Not fencing", "why", err)
}

// addQuarantineTaint adds the quarantine taint unless the node has it.
func (c *Controller) addQuarantineTaint(ctx context.Context, node *v1.Node) error {
	if nodestate.Taint(node, contract.QuarantineTaintKey) != nil {
		return nil
	}
	if err := c.updateNode(ctx, node.Name, func(n *v1.Node) bool {
		if nodestate.Taint(n, contract.QuarantineTaintKey) != nil {
			return false
		}
		now := metav1.Now()
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: contract.QuarantineTaintKey, Effect: v1.TaintEffectNoSchedule, TimeAdded: &now})
		return true
	}); err != nil {
		return fmt.Errorf("adding the quarantine taint: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Quarantined node", "taint", contract.QuarantineTaintKey)
	c.recorder.Eventf(node, v1.EventTypeWarning, "NodeQuarantined", "Node %s quarantined: volumes may be fenced on it until its node agent has cleaned them up", node.Name)
	return nil
}

// confirmQuarantine confirms the node's admission once its quarantine
// taint is on (stormGuard.confirm). When the admission was dropped
// meanwhile and the limit refuses it again, the taint this pass added is
// taken back and the node is not fenced now.
func (c *Controller) confirmQuarantine(ctx context.Context, node *v1.Node, limit func(int) (bool, string)) error {
	err := c.guard.confirm(ctx, node.Name, limit, c.admissionStale)
	if err == nil {
		return nil
	}
	c.deferred(ctx, node, err)
	if uerr := c.updateNodeLive(ctx, node.Name, func(n *v1.Node) bool {
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == contract.QuarantineTaintKey })
		return len(n.Spec.Taints) != before
	}); uerr != nil {
		return errors.Join(err, fmt.Errorf("taking back the quarantine of a node the storm guard refused: %w", uerr))
	}
	return err
}

// admissionStale reads a node and its record live and says whether its
// storm-guard admission holds a slot for nothing (AdmissionStale).
func (c *Controller) admissionStale(ctx context.Context, name string) (bool, error) {
	node, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node = nil
	case err != nil:
		return false, err
	}
	fr, err := c.frClient.Get(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		fr = nil
	case err != nil:
		return false, err
	}
	return AdmissionStale(node, fr), nil
}
