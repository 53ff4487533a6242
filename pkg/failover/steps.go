package failover

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// quarantine adds the quarantine taint and the fencing conditions: from
// now on nothing new is scheduled on the node until it is cleaned.
func (c *Controller) quarantine(ctx context.Context, node *v1.Node) error {
	if Taint(node, contract.QuarantineTaintKey) == nil {
		if err := c.updateNode(ctx, node.Name, func(n *v1.Node) bool {
			if Taint(n, contract.QuarantineTaintKey) != nil {
				return false
			}
			now := metav1.Now()
			n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: contract.QuarantineTaintKey, Effect: v1.TaintEffectNoSchedule, TimeAdded: &now})
			return true
		}); err != nil {
			return fmt.Errorf("adding the quarantine taint: %w", err)
		}
		klog.FromContext(ctx).V(2).Info("Quarantined node", "taint", contract.QuarantineTaintKey)
		c.recorder.Eventf(node, v1.EventTypeWarning, "NodeQuarantined", "Node %s quarantined before fencing its volumes", node.Name)
	}
	if err := c.fencingTaints(ctx, node.Name, true); err != nil {
		return err
	}
	return c.setConditions(ctx, node.Name, map[string]v1.ConditionStatus{
		contract.ConditionFencingTriaged:  v1.ConditionTrue,
		contract.ConditionFencingRequired: v1.ConditionTrue,
	}, "NodeUnreachable", "the node is not Ready and has pods to fail over")
}

// triage marks a NotReady node FencingTriaged, and FencingRequired once it
// has been NotReady for FencingRequiredAfter.
func (c *Controller) triage(ctx context.Context, node *v1.Node) error {
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
	if conditionTrue(node, contract.ConditionFencingTriaged) && (!required || conditionTrue(node, contract.ConditionFencingRequired)) {
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
			if Taint(n, key) == nil {
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

// fenceNode fences every attachment of our driver on the node that is not
// recorded fenced yet, and returns the up-to-date record. The VA stays in
// place: the attach/detach controller deletes it once the pod is gone.
func (c *Controller) fenceNode(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx)
	vas, err := c.vasOn(node.Name)
	if err != nil {
		return fr, err
	}
	var firstErr error
	changed := false
	for _, va := range vas {
		if va.Spec.Attacher != c.opts.DriverName || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		pv, err := c.pvs.Get(*va.Spec.Source.PersistentVolumeName)
		if err != nil || pv.Spec.CSI == nil {
			continue
		}
		handle := pv.Spec.CSI.VolumeHandle
		// Fenced once under this request is done, even once cleaned up: a
		// node the admin keeps fenced must not be fenced again after each
		// cleanup. A completed request starts over.
		if e := fencerecord.Find(fr, c.opts.DriverName, handle); e != nil && e.FencedTime != nil && fr.Status.Phase != fencingv1alpha1.PhaseComplete {
			continue
		}
		nodeID := va.Annotations[contract.NodeIDAnnotation]
		if nodeID == "" {
			nodeID = node.Name
		}
		rec := fencingv1alpha1.FencedVolume{Driver: c.opts.DriverName, VolumeHandle: handle, PersistentVolumeName: pv.Name, NodeID: nodeID}
		secrets, err := csiclient.PublishSecrets(ctx, c.client, pv.Spec.CSI.ControllerPublishSecretRef)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
			err = c.csi.Detach(cctx, handle, nodeID, secrets, true)
			cancel()
		}
		if err != nil {
			fenceErrors.WithLabelValues(c.opts.DriverName).Inc()
			msg := fmt.Sprintf("fencing volume %s from node %s failed; nothing moves until the driver confirms the fence: %v", handle, node.Name, err)
			c.recorder.Event(va, v1.EventTypeWarning, "FenceFailed", msg)
			c.recorder.Event(node, v1.EventTypeWarning, "FenceFailed", msg)
			if rerr := fencerecord.RecordFenceError(ctx, c.frClient, node.Name, "NodeUnreachable", rec, err.Error()); rerr != nil {
				logger.Error(rerr, "Failed to record fence error")
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("%s", msg)
			}
			continue
		}
		if err := fencerecord.RecordFenced(ctx, c.frClient, node.Name, "NodeUnreachable", rec); err != nil {
			return fr, fmt.Errorf("volume %s fenced but not recorded: %w", handle, err)
		}
		changed = true
		logger.V(2).Info("Fenced volume", "volume", handle, "VolumeAttachment", va.Name)
		c.recorder.Eventf(va, v1.EventTypeNormal, "FencedUnpublish", "Volume %s fenced from node %s before failover", handle, node.Name)
	}
	if changed || fr == nil {
		got, err := c.frClient.Get(ctx, node.Name)
		if err == nil {
			fr = got
		} else if !apierrors.IsNotFound(err) {
			return fr, err
		}
	}
	if firstErr == nil && fr != nil {
		if err := c.markFenced(ctx, node.Name); err != nil {
			return fr, err
		}
		if err := c.setConditions(ctx, node.Name, map[string]v1.ConditionStatus{contract.ConditionFencingComplete: v1.ConditionTrue},
			"AllAttachmentsFenced", "every attachment of driver "+c.opts.DriverName+" on the node is fenced"); err != nil {
			return fr, err
		}
	}
	return fr, firstErr
}

// markFenced sets the request's phase Fenced and its Fenced condition.
func (c *Controller) markFenced(ctx context.Context, node string) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		fr, err := c.frClient.Get(ctx, node)
		if err != nil {
			return err
		}
		if fr.Status.Phase == fencingv1alpha1.PhaseFenced {
			return nil
		}
		fr.Status.Phase = fencingv1alpha1.PhaseFenced
		fr.Status.ErrorReason, fr.Status.ErrorMessage = "", ""
		setFRCondition(fr, fencingv1alpha1.ConditionFenced, metav1.ConditionTrue, "AllAttachmentsFenced", "every attachment on the node is fenced")
		if _, err = c.frClient.UpdateStatus(ctx, fr); err != nil {
			return err
		}
		if fr.Status.StartTime != nil {
			fencingDuration.Observe(time.Since(fr.Status.StartTime.Time).Seconds())
		}
		return nil
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

// forceDelete records why on the pod (DisruptionTarget condition and the
// termination reason annotation), then deletes it with grace period 0.
func (c *Controller) forceDelete(ctx context.Context, pod *v1.Pod, node *v1.Node, reason string) bool {
	logger := klog.FromContext(ctx)
	term := contract.TerminationEviction
	for _, cond := range pod.Status.Conditions {
		if cond.Type == v1.DisruptionTarget && cond.Reason == "DeletionByTaintManager" {
			term = contract.TerminationIntolerableTaint
		}
	}
	ann, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{"annotations": map[string]string{contract.TerminationReasonAnnotation: term}}})
	if _, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, ann, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		forceDeletePodErrors.WithLabelValues(reason).Inc()
		logger.Error(err, "Failed to annotate pod", "pod", klog.KObj(pod))
		return false
	}
	cond := v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "DeletionByFenceAttacher",
		Message: fmt.Sprintf("csi-fence-attacher: node %s is not Ready (%s)", node.Name, reason), LastTransitionTime: metav1.Now()}
	st, _ := json.Marshal(map[string]interface{}{"status": map[string]interface{}{"conditions": []v1.PodCondition{cond}}})
	if _, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, st, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
		logger.V(2).Info("Could not add DisruptionTarget condition", "pod", klog.KObj(pod), "err", err)
	}
	forceDeletePods.WithLabelValues(reason).Inc()
	zero := int64(0)
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		forceDeletePodErrors.WithLabelValues(reason).Inc()
		logger.Error(err, "Failed to force-delete pod", "pod", klog.KObj(pod))
		return false
	}
	logger.V(2).Info("Force-deleted pod", "pod", klog.KObj(pod), "reason", reason, "terminationReason", term)
	c.recorder.Eventf(pod, v1.EventTypeNormal, "ForceDeleted", "Force-deleted: node %s is not Ready and the pod's storage is safe to move (%s)", node.Name, reason)
	return true
}

// releaseVolumesInUse removes the fenced volumes from the dead node's
// status.volumesInUse, which no kubelet will update: the attach/detach
// controller then detaches them at once instead of after 6 minutes.
func (c *Controller) releaseVolumesInUse(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	if fr == nil || len(node.Status.VolumesInUse) == 0 {
		return nil
	}
	return c.updateNodeStatus(ctx, node.Name, func(n *v1.Node) bool {
		var kept []v1.UniqueVolumeName
		for _, u := range n.Status.VolumesInUse {
			if !fencedUnique(fr, string(u)) {
				kept = append(kept, u)
			}
		}
		if len(kept) == len(n.Status.VolumesInUse) {
			return false
		}
		n.Status.VolumesInUse = kept
		return true
	})
}

// fencedUnique matches the ADC's unique volume name "kubernetes.io/csi/<driver>^<handle>".
func fencedUnique(fr *fencingv1alpha1.FencingRequest, unique string) bool {
	for _, v := range fr.Status.Volumes {
		if v.FencedTime != nil && unique == "kubernetes.io/csi/"+v.Driver+"^"+v.VolumeHandle {
			return true
		}
	}
	return false
}

// release lifts the quarantine of a node that is Ready again once every
// volume fenced on it is cleaned and none is attached there; then the request
// completes and the fencing conditions go.
func (c *Controller) release(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	quarantined := Taint(node, contract.QuarantineTaintKey) != nil
	ours := node.Annotations[contract.OutOfServiceProvenanceAnnotation] != ""
	active := fr != nil && fr.Status.Phase != fencingv1alpha1.PhaseComplete
	if !quarantined && !active && !ours && !hasFencingCondition(node) &&
		Taint(node, contract.FencingTriagedTaintKey) == nil && Taint(node, contract.FencingRequiredTaintKey) == nil {
		return nil
	}
	vas, err := c.vasOn(node.Name)
	if err != nil {
		return err
	}
	ok, why := Release(fr, vas, c.pvHandle)
	if !ok {
		klog.FromContext(ctx).V(2).Info("Node stays quarantined", "why", why)
		return c.setConditions(ctx, node.Name, map[string]v1.ConditionStatus{contract.ConditionFencingRequired: v1.ConditionTrue}, "AwaitingCleanup", why)
	}
	if err := c.updateNode(ctx, node.Name, func(n *v1.Node) bool {
		changed := false
		var kept []v1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key == contract.QuarantineTaintKey || t.Key == contract.FencingTriagedTaintKey || t.Key == contract.FencingRequiredTaintKey ||
				(t.Key == contract.OutOfServiceTaintKey && n.Annotations[contract.OutOfServiceProvenanceAnnotation] != "") {
				changed = true
				continue
			}
			kept = append(kept, t)
		}
		n.Spec.Taints = kept
		if _, ok := n.Annotations[contract.OutOfServiceProvenanceAnnotation]; ok {
			delete(n.Annotations, contract.OutOfServiceProvenanceAnnotation)
			changed = true
		}
		return changed
	}); err != nil {
		return err
	}
	if err := c.updateNodeStatus(ctx, node.Name, func(n *v1.Node) bool {
		var kept []v1.NodeCondition
		for _, cond := range n.Status.Conditions {
			if !isFencingCondition(string(cond.Type)) {
				kept = append(kept, cond)
			}
		}
		changed := len(kept) != len(n.Status.Conditions)
		n.Status.Conditions = kept
		return changed
	}); err != nil {
		return err
	}
	if active {
		if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur, err := c.frClient.Get(ctx, node.Name)
			if err != nil {
				return err
			}
			now := metav1.Now()
			cur.Status.Phase = fencingv1alpha1.PhaseComplete
			cur.Status.CompletionTime = &now
			setFRCondition(cur, fencingv1alpha1.ConditionCleaned, metav1.ConditionTrue, "AllVolumesCleaned", "every fenced volume was cleaned up on the node")
			_, err = c.frClient.UpdateStatus(ctx, cur)
			return err
		}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	klog.FromContext(ctx).V(2).Info("Node released from quarantine")
	c.recorder.Eventf(node, v1.EventTypeNormal, "NodeReleased", "Node %s is back and cleaned: quarantine lifted", node.Name)
	return nil
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

// setConditions sets node conditions of the Node Fencing KEP.
func (c *Controller) setConditions(ctx context.Context, node string, want map[string]v1.ConditionStatus, reason, msg string) error {
	return c.updateNodeStatus(ctx, node, func(n *v1.Node) bool {
		changed := false
		now := metav1.Now()
		for t, s := range want {
			found := false
			for i := range n.Status.Conditions {
				cond := &n.Status.Conditions[i]
				if string(cond.Type) != t {
					continue
				}
				found = true
				if cond.Status != s || cond.Reason != reason || cond.Message != msg {
					if cond.Status != s {
						cond.LastTransitionTime = now
					}
					cond.Status, cond.Reason, cond.Message, cond.LastHeartbeatTime = s, reason, msg, now
					changed = true
				}
			}
			if !found {
				n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: v1.NodeConditionType(t), Status: s, Reason: reason, Message: msg, LastTransitionTime: now, LastHeartbeatTime: now})
				changed = true
			}
		}
		return changed
	})
}

func (c *Controller) updateNode(ctx context.Context, name string, mutate func(*v1.Node) bool) error {
	return c.mutateNode(ctx, name, false, mutate)
}

func (c *Controller) updateNodeStatus(ctx context.Context, name string, mutate func(*v1.Node) bool) error {
	return c.mutateNode(ctx, name, true, mutate)
}

// mutateNode applies mutate to a fresh copy of the node and writes it (its
// status subresource when status), retrying on conflicts with the kubelet,
// the node lifecycle controller and other drivers' controllers.
func (c *Controller) mutateNode(ctx context.Context, name string, status bool, mutate func(*v1.Node) bool) error {
	nodes := c.client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !mutate(n) {
			return nil
		}
		if status {
			_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		} else {
			_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		}
		return err
	})
}

func (c *Controller) vasOn(node string) ([]*storagev1.VolumeAttachment, error) {
	all, err := c.vas.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*storagev1.VolumeAttachment
	for _, va := range all {
		if va.Spec.NodeName == node {
			out = append(out, va)
		}
	}
	return out, nil
}
