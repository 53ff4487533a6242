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
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// A deleted Node (`kubectl delete node` on a dead node, the classic manual
// failover, or a cloud's node controller) has no status to patch: the
// attach/detach controller keeps each volume that its last status listed in
// use counted as mounted there, and detaches it, and so lets a ReadWriteOnce
// volume attach elsewhere, only after its 6-minute wait. It forgets an
// attachment sooner only when its periodic sync of the actual state
// (--attach-detach-reconcile-sync-period, 1 minute by default) finds the
// VolumeAttachment gone. So, once a volume's attachment to a Node that is
// gone is fenced (recorded, S8) and no pod on that node uses it any more,
// its VolumeAttachment is deleted: the attacher then completes the detach
// (as a fence), and the volume moves within that minute. The record keeps
// the fence until the node, if it ever registers again, has cleaned it
// (S2, S6).

// releaseAttachmentsOfGoneNode fences this driver's attachments to a Node
// that is gone, once it is down by a live read (its heartbeat Lease gone or
// silent: a kubelet that still renews it is alive, S4), and deletes those
// that are fenced and no pod on the node uses any more. It returns the
// record read back.
func (c *Controller) releaseAttachmentsOfGoneNode(ctx context.Context, nodeName string, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx)
	vas, err := c.vasOn(nodeName)
	if err != nil {
		return fr, err
	}
	ours := false
	for _, va := range vas {
		ours = ours || va.Spec.Attacher == c.opts.DriverName
	}
	if !ours || !c.backendEnabled(fencingv1alpha1.BackendStorage) {
		return fr, nil
	}
	mode, err := c.fenceMode(ctx)
	if err != nil || !mode.Fences() {
		return fr, err
	}
	if err := c.down(ctx, nodeName); err != nil {
		logger.V(2).Info("Node deleted, but not fencing its attachments: its kubelet is alive", "why", err)
		return fr, nil
	}
	// Not admitted by the storm guard's count: the count brakes fences
	// decided from silence alone, which a partition of many nodes from the
	// control plane looks like; a deleted Node is someone's statement (an
	// admin's, a cloud's node controller finding the instance gone) and
	// no partition deletes Nodes. The admin's pause stops it all the same:
	// it stops every automatic fence. Once it is lifted, the periodic pass
	// over every node (Options.Resync) comes back here.
	if why, err := c.guard.pausedBy(ctx); err != nil || why != "" {
		if err == nil {
			logger.Info("Node deleted, but not fencing its attachments: fencing is paused", "paused", why)
		}
		return fr, err
	}
	// The Node is gone: Events name it all the same. No quarantine taint
	// (no Node to carry it): the record keeps publishes off it (S2).
	gone := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	fr, fenceErr := c.fenceNode(ctx, gone, fr, nil, false, time.Now(), mode)
	pods, err := c.podsOn(nodeName)
	if err != nil {
		return fr, errors.Join(fenceErr, err)
	}
	err = c.deleteFencedAttachments(ctx, vas, fr, usedBeside(c.volumeUsers(pods), nil), func(va *storagev1.VolumeAttachment) bool {
		return va.Spec.Attacher == c.opts.DriverName
	}, func(handle string) string {
		return fmt.Sprintf("Node %s is deleted and volume %s is fenced from it: VolumeAttachment deleted so that the volume may attach elsewhere at once", nodeName, handle)
	})
	fenceErr = errors.Join(fenceErr, err)
	return fr, fenceErr
}

// volumeUsers returns, for each PersistentVolume (by name) that pods use,
// the UIDs of the pods that use it.
func (c *Controller) volumeUsers(pods []*v1.Pod) map[string][]types.UID {
	users := map[string][]types.UID{}
	for _, p := range pods {
		for _, vol := range p.Spec.Volumes {
			claim, ok := podgc.ClaimName(p, vol)
			if !ok {
				continue
			}
			if pv, err := c.pvOf(p.Namespace, claim); err == nil {
				users[pv.Name] = append(users[pv.Name], p.UID)
			}
		}
	}
	return users
}

// usedBeside returns the volumes of users that a pod not in gone (by UID)
// uses.
func usedBeside(users map[string][]types.UID, gone map[types.UID]bool) map[string]bool {
	used := map[string]bool{}
	for pv, uids := range users {
		if slices.ContainsFunc(uids, func(uid types.UID) bool { return !gone[uid] }) {
			used[pv] = true
		}
	}
	return used
}

// deleteFencedAttachments deletes the VolumeAttachments among vas that mine
// selects, whose volume is recorded fenced and that no pod uses (used, by
// PV name): a pod still there keeps the attach/detach controller wanting the
// attachment, and it would only create it again. Each delete names the
// UID it decided about. The attachment then goes without a call to the
// driver: its only finalizer, the attacher's, is removed here at once
// (letGo), as the attacher does once it finds the volume fenced; the
// attach/detach controller's own detach then finds it gone and does not
// wait for it.
func (c *Controller) deleteFencedAttachments(ctx context.Context, vas []*storagev1.VolumeAttachment, fr *fencingv1alpha1.FencingRequest, used map[string]bool,
	mine func(*storagev1.VolumeAttachment) bool, say func(handle string) string) error {
	var errs error
	for _, va := range vas {
		pv := va.Spec.Source.PersistentVolumeName
		if pv == nil || !mine(va) || used[*pv] || va.DeletionTimestamp != nil {
			continue
		}
		driver, handle := c.pvHandle(*pv)
		if driver == "" || driver != va.Spec.Attacher || !fencerecord.IsFenced(fr, driver, handle) {
			continue
		}
		uid := va.UID
		err := c.client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = errors.Join(errs, fmt.Errorf("deleting the fenced VolumeAttachment %s of node %s: %w", va.Name, va.Spec.NodeName, err))
			continue
		}
		c.letGo(ctx, va)
		klog.FromContext(ctx).V(2).Info("Released a fenced attachment", "VolumeAttachment", va.Name, "volume", handle)
		c.recorder.Eventf(va, v1.EventTypeNormal, "AttachmentReleased", "%s", say(handle))
	}
	return errs
}

// letGo removes the attacher's finalizer of va, a VolumeAttachment of this
// driver just deleted (whose volume is recorded fenced on its node), when
// it is va's only finalizer and va was published under no other node ID
// than the one it names: what the attacher's detach of a fenced volume
// does (it calls nothing of the driver), without its informer's round
// trip and live reads: an attachment the attach/detach controller's detach
// finds still there, it polls for, the first time after 500 ms
// (docs/benchmarks-and-trials.md, "On real nodes"). The patch tests the
// finalizers and the UID it decided about; anything else, an error
// included, is left to the attacher, which removes it as before.
func (c *Controller) letGo(ctx context.Context, va *storagev1.VolumeAttachment) {
	finalizer := contract.AttacherFinalizer(va.Spec.Attacher)
	if !slices.Equal(va.Finalizers, []string{finalizer}) {
		return
	}
	if prev := va.Annotations[contract.PreviousNodeIDAnnotation]; prev != "" && prev != va.Annotations[contract.NodeIDAnnotation] {
		return // the attacher unpublishes it from the previous one
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": va.UID},
		{"op": "test", "path": "/metadata/finalizers", "value": va.Finalizers},
		{"op": "remove", "path": "/metadata/finalizers"},
	})
	if err == nil {
		_, err = c.client.StorageV1().VolumeAttachments().Patch(ctx, va.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).V(4).Info("The attacher will remove the finalizer of the fenced attachment", "VolumeAttachment", va.Name, "err", err)
	}
}

// nodeGone handles a deleted Node. Its record stays while anything in it is
// not cleaned (a re-registered node resumes the cleanup, S6); a record with
// nothing pending has no more use and goes.
func (c *Controller) nodeGone(ctx context.Context, nodeName string, fr *fencingv1alpha1.FencingRequest) error {
	c.taints.forget(nodeName)
	if fr == nil {
		return nil
	}
	remain, err := c.releaseAttachmentsOfDeletedInstance(ctx, nodeName, fr)
	if err != nil {
		return err
	}
	if remain {
		klog.FromContext(ctx).V(2).Info("Node deleted after its instance; keeping its FencingRequest until no VolumeAttachment to it remains")
		return nil
	}
	if fencerecord.Pending(fr) {
		klog.FromContext(ctx).V(2).Info("Node deleted; keeping its FencingRequest until its fenced volumes are cleaned up")
		return nil
	}
	if err := fencerecord.RemoveFinalizer(ctx, c.frClient, nodeName); err != nil {
		return err
	}
	if err := c.guard.release(ctx, nodeName); err != nil {
		return err
	}
	if fr.Spec.Origin != fencingv1alpha1.OriginAutomatic {
		return nil // an admin's request is the admin's to delete
	}
	if err := c.frClient.Delete(ctx, nodeName); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
