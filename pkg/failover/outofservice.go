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
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// outOfServiceBackend adds KEP-2268's out-of-service taint to a node every
// attachment of which is of a driver that fences on it or fences storage
// (outOfServiceFences). It always takes the node.
type outOfServiceBackend struct{ c *Controller }

func (b outOfServiceBackend) configured(node *v1.Node) bool { return b.c.outOfServiceFences(node.Name) }

func (b outOfServiceBackend) fence(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, why string) (*fencingv1alpha1.FencingRequest, bool, error) {
	c := b.c
	if !fencerecord.OwnOutOfServiceTaint(fr, nodestate.Taint(node, contract.OutOfServiceTaintKey)) && nodestate.Taint(node, contract.OutOfServiceTaintKey) == nil {
		// The taint lets every pod GC delete the node's pods and the
		// attach/detach controller detach everything: like a power off,
		// only on a node down by a live read now, not as it was before a
		// storage fence that may have been slow (S3, S4).
		if err := c.down(ctx, node.Name); err != nil {
			return fr, true, fmt.Errorf("not adding the out-of-service taint: %w", err)
		}
		klog.FromContext(ctx).V(2).Info("Escalating to the out-of-service taint: the drivers fence on it", "why", why)
		c.recorder.Eventf(node, v1.EventTypeWarning, "FenceEscalated", "Node %s: %s; every attachment on it is of a driver that fences on the out-of-service taint or fences storage: adding the taint", node.Name, why)
		// The step in the record, before the taint: the fences themselves
		// are the attachers' entries, one per volume.
		if err := fencerecord.RecordNodeFenceIntent(ctx, c.frClient, node.Name, "NodeUnreachable", fencingv1alpha1.BackendOutOfService, "", ""); err != nil {
			return fr, true, fmt.Errorf("recording the out-of-service step: %w", err)
		}
	}
	backendAttempts.WithLabelValues(fencingv1alpha1.BackendOutOfService).Inc()
	return fr, true, c.addOutOfServiceTaint(ctx, node)
}

// fencesOnOutOfService reports whether the out-of-service backend is on
// and driver's CSIDriver declares that it fences on the taint.
func (c *Controller) fencesOnOutOfService(driver string) bool {
	if !c.backendEnabled(fencingv1alpha1.BackendOutOfService) {
		return false
	}
	d, err := c.drivers.Get(driver)
	return err == nil && d.Annotations[contract.FencesOnOutOfServiceAnnotation] == "true"
}

// outOfServiceFences reports whether the out-of-service taint fences the
// node: every attachment on it is of a driver that fences on the taint or
// fences storage (the attach/detach controller detaches them all once the
// taint is there, and each detach is then a fence), and one at least is of
// the first kind. An attachment the record cannot name (an inline volume)
// is of no known driver: then it does not, and neither does a pod's storage
// that reaches the node without an attachment (UnattachedStorage): the
// taint would let the pod GCs delete its pod, and no detach would cut it.
func (c *Controller) outOfServiceFences(node string) bool {
	vas, err := c.vasOn(node)
	if err != nil {
		return false
	}
	driverOf := func(pv string) string {
		d, _ := c.pvHandle(pv)
		return d
	}
	return protection.OutOfServiceFences(vas, driverOf, c.fencesOnOutOfService, c.storageFences, c.unattachedStorage(node, vas, nil))
}

// addOutOfServiceTaint adds KEP-2268's out-of-service taint to a node
// confirmed fenced as a whole. Whose taint it is lives in the record,
// written first (its timeAdded, fencerecord.RecordOutOfServiceTaint), so
// that release removes it and only it; the annotation in the same patch
// only tells a person. A taint someone else added is left as it is, and
// never taken for this system's.
func (c *Controller) addOutOfServiceTaint(ctx context.Context, node *v1.Node) error {
	if nodestate.Taint(node, contract.OutOfServiceTaintKey) != nil {
		return nil
	}
	if err := c.stillOwner(); err != nil {
		return err
	}
	timeAdded, err := fencerecord.RecordOutOfServiceTaint(ctx, c.frClient, node.Name)
	if err != nil {
		return fmt.Errorf("recording the out-of-service taint: %w", err)
	}
	added := false
	err = c.updateNode(ctx, node.Name, func(n *v1.Node) bool {
		if nodestate.Taint(n, contract.OutOfServiceTaintKey) != nil {
			return false
		}
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: contract.OutOfServiceTaintKey, Value: contract.OutOfServiceTaintValue,
			Effect: v1.TaintEffectNoExecute, TimeAdded: &timeAdded})
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[contract.OutOfServiceProvenanceAnnotation] = c.opts.DriverName
		added = true
		return true
	})
	if err != nil {
		return fmt.Errorf("adding the out-of-service taint: %w", err)
	}
	if added {
		klog.FromContext(ctx).V(2).Info("Node out of service", "taint", contract.OutOfServiceTaintKey)
		c.recorder.Eventf(node, v1.EventTypeWarning, "OutOfServiceTaintAdded",
			"Node %s is confirmed fenced as a whole: out-of-service taint added, removed once the node is back and clean", node.Name)
	}
	return nil
}

// withoutOwnOutOfServiceTaint removes from n the out-of-service taint that
// this system added for the fence fr records (its timeAdded), and the
// annotation that tells a person so. Any other out-of-service taint is
// someone else's and stays, whatever annotation the Node carries.
func withoutOwnOutOfServiceTaint(n *v1.Node, fr *fencingv1alpha1.FencingRequest) bool {
	changed := false
	if _, ok := n.Annotations[contract.OutOfServiceProvenanceAnnotation]; ok {
		delete(n.Annotations, contract.OutOfServiceProvenanceAnnotation)
		changed = true
	}
	if fencerecord.OwnOutOfServiceTaint(fr, nodestate.Taint(n, contract.OutOfServiceTaintKey)) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == contract.OutOfServiceTaintKey })
		changed = true
	}
	return changed
}
