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
	"fmt"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
)

// signalFencing sets the Node Fencing KEP's signals of a node under
// fencing: its optional taints, FencingTriaged and FencingRequired, and,
// when every attachment of every driver on it is recorded fenced (S9),
// FencingComplete and the request's phase Fenced. A FencingComplete of its
// own that is no longer true is taken back (takeBackFencingComplete).
func (c *Controller) signalFencing(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	if err := c.fencingTaints(ctx, node.Name, true); err != nil {
		return err
	}
	want := map[string]v1.ConditionStatus{
		contract.ConditionFencingTriaged:  v1.ConditionTrue,
		contract.ConditionFencingRequired: v1.ConditionTrue,
	}
	complete, reason, msg, err := c.wholeNode(node, fr)
	if err != nil {
		return err
	}
	switch {
	case complete:
		if err := c.markFenced(ctx, node.Name, true); err != nil {
			return err
		}
		want[contract.ConditionFencingComplete] = v1.ConditionTrue
	case ownFencingComplete(node):
		if err := c.markFenced(ctx, node.Name, false); err != nil {
			return err
		}
		want[contract.ConditionFencingComplete] = v1.ConditionFalse
	}
	return c.setConditions(ctx, node.Name, want, reason, msg)
}

// The reasons of the FencingComplete=True this system sets, each naming
// what fenced the whole node (S9). A FencingComplete with another reason is
// someone else's: honoured, never taken back.
const (
	reasonPoweredOff           = "PoweredOff"
	reasonInstanceDeleted      = "InstanceDeleted"
	reasonAllAttachmentsFenced = "AllAttachmentsFenced"
)

// ownFencingComplete reports whether the node has FencingComplete=True set
// by this system.
func ownFencingComplete(n *v1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if string(cond.Type) == contract.ConditionFencingComplete {
			return cond.Status == v1.ConditionTrue &&
				slices.Contains([]string{reasonPoweredOff, reasonInstanceDeleted, reasonAllAttachmentsFenced}, cond.Reason)
		}
	}
	return false
}

// wholeNode decides whether the node is fenced as a whole now (S9), from
// its record and the caches, and says why in a condition's reason and
// message either way.
func (c *Controller) wholeNode(node *v1.Node, fr *fencingv1alpha1.FencingRequest) (complete bool, reason, msg string, err error) {
	if fencerecord.NodeFenced(fr, node) {
		if fr.Status.NodeFence.Backend == fencingv1alpha1.BackendMachine {
			return true, reasonInstanceDeleted, "the node's Cluster API Machine is deleted and its infrastructure provider reports the instance gone", nil
		}
		return true, reasonPoweredOff, "the node is confirmed powered off by its fence agent", nil
	}
	vas, err := c.vasOn(node.Name)
	if err != nil {
		return false, "", "", err
	}
	if fr == nil || !wholeNodeFenced(fr, vas, c.pvHandle) {
		return false, "NodeUnreachable", "the node is not Ready and has pods to fail over", nil
	}
	if why := c.unattachedStorage(node.Name, vas, fr); why != "" {
		// Every attachment is fenced, but storage that reaches the node
		// without one is not: only a power fence vouches for it.
		return false, "StorageWithoutAttachment", "every attachment on the node is fenced, but " + why, nil
	}
	return true, reasonAllAttachmentsFenced, "every attachment of every driver on the node is fenced", nil
}

// wholeNodeFenced reports whether every attachment on the node, of every
// driver, is recorded fenced: what FencingComplete means (S9). Attachments
// detached since their fence count as fenced (they are in the record). An
// attachment the record cannot name (an inline volume) is not fenced, and
// neither is a node with a fence intended and not confirmed.
func wholeNodeFenced(fr *fencingv1alpha1.FencingRequest, vas []*storagev1.VolumeAttachment, pvHandle func(pv string) (driver, handle string)) bool {
	if len(vas) == 0 && len(fr.Status.Volumes) == 0 {
		return false // nothing was attached, nothing fenced
	}
	for _, v := range fr.Status.Volumes {
		if v.CleanedTime == nil && v.FencedTime == nil {
			return false // a fence intended, by any driver, not confirmed
		}
	}
	for _, va := range vas {
		if va.Spec.Source.PersistentVolumeName == nil {
			return false
		}
		// Cleaned up since its fence or not: the node is quarantined
		// (its callers quarantine it first), so the volume is not
		// published to it again (fencerecord.FencedUnderRequest).
		d, h := pvHandle(*va.Spec.Source.PersistentVolumeName)
		if d == "" || !fencerecord.FencedUnderRequest(fr, d, h) {
			return false
		}
	}
	return true
}

// unattachedStorage is UnattachedStorage for the pods on the node, from the
// caches: it decides what to signal, never what to delete. A volume fr
// records fenced there is covered whether its attachment is still there or
// not: the pod GC deletes a fenced attachment right after the pod that used
// it, and the caches, one watch each, may show the attachment gone before
// the pod (fr nil: only the attachments cover).
func (c *Controller) unattachedStorage(node string, vas []*storagev1.VolumeAttachment, fr *fencingv1alpha1.FencingRequest) string {
	pods, err := c.podsOn(node)
	if err != nil {
		return err.Error()
	}
	attached := map[string]bool{}
	for _, va := range vas {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
			attached[*pv] = true
		}
	}
	return UnattachedStorage(pods, c.pvOf, func(pv string) bool {
		if attached[pv] {
			return true
		}
		d, h := c.pvHandle(pv)
		return d != "" && fencerecord.FencedUnderRequest(fr, d, h)
	})
}

// takeBackFencingComplete sets this system's FencingComplete on the node
// False when the node is not fenced as a whole any more: since it was set,
// the node came back and got storage no fence covers (a pod that tolerates
// the quarantine, or sets spec.nodeName), or a new fence is in flight. It
// runs before the signals are honoured, on the node read live, so that a
// FencingComplete of an earlier failure frees no pod of this one (S3, S9).
// It returns the node to honour the signals of.
func (c *Controller) takeBackFencingComplete(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) (*v1.Node, error) {
	if !ownFencingComplete(node) {
		// The signals are honoured from this cached node: without it,
		// its FencingComplete frees nothing.
		return node, nil
	}
	live, err := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %s before honouring its signals: %w", node.Name, err)
	}
	if !ownFencingComplete(live) {
		return live, nil
	}
	complete, reason, msg, err := c.wholeNode(live, fr)
	if err != nil || complete {
		return live, err
	}
	klog.FromContext(ctx).V(2).Info("Taking back FencingComplete: the node is not fenced as a whole any more", "why", msg)
	if err := c.markFenced(ctx, node.Name, false); err != nil {
		return nil, err
	}
	if err := c.patchConditions(ctx, node.Name, []v1.NodeCondition{{Type: contract.ConditionFencingComplete, Status: v1.ConditionFalse,
		Reason: reason, Message: msg, LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}); err != nil {
		return nil, err
	}
	c.recorder.Eventf(live, v1.EventTypeWarning, "FencingCompleteTakenBack", "Node %s is not fenced as a whole any more: %s", node.Name, msg)
	return c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
}

// signalIdle is the owner's pass over a node that is not Ready with nothing
// to fail over now. The Node Fencing KEP's timeline: triaged as soon as the
// node is seen unreachable, required once it stays so; a kubelet that
// reports its node not Ready itself (a node registering, a runtime down) is
// alive: nothing to fence, nothing to signal.
func (c *Controller) signalIdle(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	if nodehealth.Unreachable(node) {
		// With volumes fenced on it, the node's signals are derived from
		// the record here too: the pass that force-deleted the last pod
		// may have ended before it set them.
		signal := c.signalTriage
		if fencerecord.Pending(fr) || fencerecord.NodeFenced(fr, node) {
			signal = func(ctx context.Context, node *v1.Node) error { return c.signalFencing(ctx, node, fr) }
		}
		if err := signal(ctx, node); err != nil {
			return err
		}
		if fencerecord.NodeFenced(fr, node) {
			// Confirmed off in a pass that ended before its taint.
			if err := c.addOutOfServiceTaint(ctx, node); err != nil {
				return err
			}
		}
	}
	return c.releaseVolumesInUse(ctx, node.Name, fr)
}

// signalTriage marks a NotReady node FencingTriaged, and FencingRequired once it
// has been NotReady for FencingRequiredAfter.
func (c *Controller) signalTriage(ctx context.Context, node *v1.Node) error {
	want := map[string]v1.ConditionStatus{contract.ConditionFencingTriaged: v1.ConditionTrue}
	required := false
	if d := c.opts.FencingRequiredAfter; d > 0 {
		for _, cond := range node.Status.Conditions {
			if cond.Type == v1.NodeReady && cond.Status != v1.ConditionTrue && time.Since(cond.LastTransitionTime.Time) >= d {
				want[contract.ConditionFencingRequired] = v1.ConditionTrue
				required = true
			}
		}
	}
	if nodestate.ConditionTrue(node, contract.ConditionFencingTriaged) && (!required || nodestate.ConditionTrue(node, contract.ConditionFencingRequired)) {
		return nil
	}
	if err := c.fencingTaints(ctx, node.Name, required); err != nil {
		return err
	}
	return c.setConditions(ctx, node.Name, want, "NodeNotReady", "the node is not Ready")
}

// fencingTaints adds the optional Node Fencing taints (when enabled):
// fencingtriaged always, fencingrequired when required.
func (c *Controller) fencingTaints(ctx context.Context, node string, required bool) error {
	if !c.opts.FencingTaints {
		return nil
	}
	return c.updateNode(ctx, node, func(n *v1.Node) bool {
		changed := false
		add := func(key string, effect v1.TaintEffect) {
			if nodestate.Taint(n, key) == nil {
				now := metav1.Now()
				n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Effect: effect, TimeAdded: &now})
				changed = true
			}
		}
		add(contract.FencingTriagedTaintKey, v1.TaintEffectPreferNoSchedule)
		if required {
			add(contract.FencingRequiredTaintKey, v1.TaintEffectNoSchedule)
		}
		return changed
	})
}

func setFRCondition(fr *fencingv1alpha1.FencingRequest, t string, s metav1.ConditionStatus, reason, msg string) {
	now := metav1.Now()
	for i := range fr.Status.Conditions {
		if fr.Status.Conditions[i].Type == t {
			if fr.Status.Conditions[i].Status != s {
				fr.Status.Conditions[i].LastTransitionTime = now
			}
			fr.Status.Conditions[i].Status, fr.Status.Conditions[i].Reason, fr.Status.Conditions[i].Message = s, reason, msg
			return
		}
	}
	fr.Status.Conditions = append(fr.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: now})
}

func isFencingCondition(t string) bool {
	return t == contract.ConditionFencingTriaged || t == contract.ConditionFencingRequired || t == contract.ConditionFencingComplete
}

func hasFencingCondition(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if isFencingCondition(string(c.Type)) {
			return true
		}
	}
	return false
}

// setConditions sets Node Fencing KEP conditions on the node by one
// strategic-merge patch of status.conditions (merged by type), so that the
// kubelet's and the node lifecycle controller's conditions are never written
// back. A condition the cache shows as wanted already is not written again;
// a condition whose status is unchanged keeps its transition time.
func (c *Controller) setConditions(ctx context.Context, node string, want map[string]v1.ConditionStatus, reason, msg string) error {
	cached, err := c.nodes.Get(node)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	now := metav1.Now()
	var conds []v1.NodeCondition
	for _, t := range slices.Sorted(maps.Keys(want)) {
		s := want[t]
		var cur *v1.NodeCondition
		if cached != nil {
			for i := range cached.Status.Conditions {
				if string(cached.Status.Conditions[i].Type) == t {
					cur = &cached.Status.Conditions[i]
				}
			}
		}
		if cur != nil && cur.Status == s && cur.Reason == reason && cur.Message == msg {
			continue
		}
		transition := now
		if cur != nil && cur.Status == s {
			transition = cur.LastTransitionTime
		}
		conds = append(conds, v1.NodeCondition{Type: v1.NodeConditionType(t), Status: s, Reason: reason, Message: msg,
			LastTransitionTime: transition, LastHeartbeatTime: now})
	}
	if len(conds) == 0 {
		return nil
	}
	return c.patchConditions(ctx, node, conds)
}

// removeFencingConditions deletes the Node Fencing KEP's conditions from the
// node, by one strategic-merge patch (a condition that is not there is no
// error), whatever the cache shows.
func (c *Controller) removeFencingConditions(ctx context.Context, node string) error {
	var del []map[string]string
	for _, t := range []string{contract.ConditionFencingTriaged, contract.ConditionFencingRequired, contract.ConditionFencingComplete} {
		del = append(del, map[string]string{"type": t, "$patch": "delete"})
	}
	return c.patchConditions(ctx, node, del)
}

func (c *Controller) patchConditions(ctx context.Context, node string, conds interface{}) error {
	patch, err := json.Marshal(map[string]interface{}{"status": map[string]interface{}{"conditions": conds}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patching the fencing conditions of node %s: %w", node, err)
	}
	return nil
}
