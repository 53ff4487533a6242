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
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// release lifts the quarantine of a node that is Ready again once every
// volume fenced on it is cleaned and none is attached there; then the request
// completes and the fencing conditions go.
func (c *Controller) release(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	quarantined := nodestate.Taint(node, contract.QuarantineTaintKey) != nil
	active := fr != nil && fr.Status.Phase != fencingv1alpha1.PhaseComplete
	_, annotated := node.Annotations[contract.OutOfServiceProvenanceAnnotation]
	ownOutOfService := annotated || fencerecord.OwnOutOfServiceTaint(fr, nodestate.Taint(node, contract.OutOfServiceTaintKey))
	if !quarantined && !active && !fencerecord.Pending(fr) && !hasFencingCondition(node) && !ownOutOfService &&
		nodestate.Taint(node, contract.FencingTriagedTaintKey) == nil && nodestate.Taint(node, contract.FencingRequiredTaintKey) == nil {
		return nil
	}
	// A remediation asked of MachineHealthCheck and not acted on goes
	// first, whatever the cleanup still waits for: the node is back.
	if err := c.withdrawRemediation(ctx, node, fr); err != nil {
		return err
	}
	if fencerecord.Pending(fr) && !quarantined {
		// A node that re-registered (deleted and back) while its volumes
		// may still be quarantined, or one whose release a fence recorded
		// meanwhile interrupted: nothing is scheduled there until its
		// agent has cleaned them. Admitted first, whatever the storm
		// guard's count (its fencing only continues), so that the guard
		// counts every quarantined node.
		always := func(int) (bool, string) { return true, "" }
		if _, err := c.guard.admit(ctx, node.Name, true, always, c.admissionStale); err != nil {
			return err
		}
		if err := c.addQuarantineTaint(ctx, node); err != nil {
			return err
		}
		if err := c.guard.confirm(ctx, node.Name, always, c.admissionStale); err != nil {
			return err
		}
	}
	vas, err := c.vasOn(node.Name)
	if err != nil {
		return err
	}
	ok, why := Release(fr, quarantined, vas, c.pvHandle, func(va *storagev1.VolumeAttachment) bool {
		return c.wantedOnNode(ctx, node.Name, va)
	})
	if !ok {
		klog.FromContext(ctx).V(2).Info("Node stays quarantined", "why", why)
		return c.setConditions(ctx, node.Name, map[string]v1.ConditionStatus{contract.ConditionFencingRequired: v1.ConditionTrue}, "AwaitingCleanup", why)
	}
	// The out-of-service taint goes only if this system added it (the
	// record says so): a taint an admin or another fencer added is theirs.
	if err := c.updateNode(ctx, node.Name, func(n *v1.Node) bool {
		changed := withoutOwnOutOfServiceTaint(n, fr)
		var kept []v1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key == contract.QuarantineTaintKey || t.Key == contract.FencingTriagedTaintKey || t.Key == contract.FencingRequiredTaintKey {
				changed = true
				continue
			}
			kept = append(kept, t)
		}
		n.Spec.Taints = kept
		return changed
	}); err != nil {
		return err
	}
	if err := c.removeFencingConditions(ctx, node.Name); err != nil {
		return err
	}
	if active {
		if err := c.republishFencedAttachments(ctx, node.Name, fr, vas); err != nil {
			return err
		}
	}
	// The request's completion is the last write: until it is done, the
	// record is active and a pass after a crash anywhere above comes back
	// here, so that no admission or finalizer outlives the release. The
	// admission goes only on a live read that shows no fence recorded since
	// the cache this pass decided on (one recorded later still fails the
	// completion, and the next pass admits the node again before it
	// quarantines it).
	if active {
		cur, err := c.frClient.Get(ctx, node.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if fencerecord.Pending(cur) {
			return fmt.Errorf("a volume was recorded fenced on node %s meanwhile: its request stays open", node.Name)
		}
	}
	if err := c.guard.release(ctx, node.Name); err != nil {
		return err
	}
	if err := fencerecord.RemoveFinalizer(ctx, c.frClient, node.Name); err != nil {
		return err
	}
	if active {
		if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur, err := c.frClient.Get(ctx, node.Name)
			if err != nil {
				return err
			}
			if fencerecord.Pending(cur) {
				// A fence was recorded since the cache this pass decided
				// on: the next pass quarantines the node again.
				return fmt.Errorf("a volume was recorded fenced on node %s meanwhile: its request stays open", node.Name)
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

// republishFencedAttachments marks not attached each VolumeAttachment left
// on the released node that says attached although its volume was fenced
// there (an admin's release: Release lets such attachments stay): the
// driver's attacher then publishes it at once. Left as it is, it stays
// published in name only until external-attacher's reconciler compares it
// with the driver's ListVolumes (--reconcile-sync, a minute by default) and
// publishes it then; until then the kubelet's NodeStageVolume of it fails.
// On real nodes with the mock driver a drained pod's replacement, bound to
// the node as soon as its quarantine taint went, ran 65 s after an admin's
// release. Whether a
// pod wants it is not asked: at the release the replacement is often not
// bound yet, and publishing it is what the reconciler would do anyway (the
// attach/detach controller detaches it if nothing wants it). It runs after
// the quarantine taint went, so that the publish is not refused, and before
// the request completes: a crash in between comes back here, at worst for
// one more publish of an attachment already published again. Only while the
// request is active: a Complete one keeps its entries, and an attachment
// made since is attached for real.
func (c *Controller) republishFencedAttachments(ctx context.Context, node string, fr *fencingv1alpha1.FencingRequest, vas []*storagev1.VolumeAttachment) error {
	var errs error
	for _, va := range vas {
		if !va.Status.Attached || va.DeletionTimestamp != nil || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		driver, handle := c.pvHandle(*va.Spec.Source.PersistentVolumeName)
		if driver != va.Spec.Attacher || fencerecord.Find(fr, driver, handle) == nil {
			continue
		}
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": va.UID},
			{"op": "test", "path": "/status/attached", "value": true},
			{"op": "replace", "path": "/status/attached", "value": false},
		})
		if err == nil {
			_, err = c.client.StorageV1().VolumeAttachments().Patch(ctx, va.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status")
		}
		if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			continue // gone, or changed since: no longer this attachment
		}
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("marking the fenced VolumeAttachment %s not attached, for its driver to publish it again: %w", va.Name, err))
			continue
		}
		klog.FromContext(ctx).V(2).Info("Fenced attachment marked not attached for its driver to publish it again", "VolumeAttachment", va.Name, "volume", handle)
		c.recorder.Eventf(va, v1.EventTypeNormal, "AttachmentRepublished",
			"Node %s is released and volume %s, fenced there, is still attached to it in name: marked not attached for %s to publish it again", node, handle, driver)
	}
	return errs
}

// wantedOnNode reports whether a pod on node, not terminating, uses the
// PersistentVolume va attaches, on a live list of the node's pods (a
// release decides on it: Release). It answers false whenever it cannot
// tell (a PV it cannot read or without a claim, a list that fails): the
// node then stays quarantined until the attachment goes.
func (c *Controller) wantedOnNode(ctx context.Context, node string, va *storagev1.VolumeAttachment) bool {
	if va.Spec.Source.PersistentVolumeName == nil {
		return false
	}
	pv, err := c.pvs.Get(*va.Spec.Source.PersistentVolumeName)
	if err != nil || pv.Spec.ClaimRef == nil {
		return false
	}
	claim := pv.Spec.ClaimRef
	pods, err := c.client.CoreV1().Pods(claim.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot list the node's pods: an attachment of a fenced volume holds its release", "err", err)
		return false
	}
	if p := podgc.WantsClaim(pods.Items, node, claim.Namespace, claim.Name); p != nil {
		klog.FromContext(ctx).V(2).Info("A new attachment of a fenced volume is for a pod on the node: it waits for the release", "VolumeAttachment", va.Name, "pod", klog.KObj(p))
		return true
	}
	return false
}
