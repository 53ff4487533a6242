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
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fencemode"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// fenceStorage fences every attachment of this driver on the node but those
// of pods that stay, write-ahead, once the node is quarantined (by whichever
// controller owns it): when a candidate uses this driver, an admin asked,
// or a fence of this driver is unsettled in the record. It returns the
// record read back.
func (c *Controller) fenceStorage(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, t triage, manual, quarantined bool, aliveChecked time.Time) (*fencingv1alpha1.FencingRequest, error) {
	ours := slices.ContainsFunc(t.candidates, func(cand candidate) bool {
		return slices.ContainsFunc(cand.vols, func(v podgc.Volume) bool { return v.Driver == c.opts.DriverName })
	})
	if !quarantined || !(ours || manual || unsettled(fr, c.opts.DriverName)) || !c.backendEnabled(fencingv1alpha1.BackendStorage) || fencerecord.NodeFenced(fr, node) {
		return fr, nil
	}
	mode, err := c.fenceMode(ctx)
	if err != nil {
		return fr, err
	}
	if !mode.Fences() {
		klog.FromContext(ctx).V(2).Info("Not fencing: the driver does not advertise UNPUBLISH_FENCE and its CSIDriver does not declare that its unpublish revokes access",
			"annotation", contract.UnpublishRevokesAccessAnnotation)
		return fr, nil
	}
	return c.fenceNode(ctx, node, fr, t.staying, manual, aliveChecked, mode)
}

// fenceMode is how this driver's attachments are fenced now, for a step
// that fences (fencemode): the fence field when the driver advertises
// UNPUBLISH_FENCE, else a plain unpublish when its CSIDriver, read live,
// declares that one revokes access. The live read is what lets a volume
// move on a plain unpublish: a cache could still show a declaration its
// owner withdrew. An error (a read that may pass) fences nothing now: the
// node's sync is retried with its backoff.
func (c *Controller) fenceMode(ctx context.Context) (fencemode.Mode, error) {
	mode, err := c.declaration.Mode(ctx, c.opts.CanFence)
	if err != nil {
		return fencemode.None, fmt.Errorf("not fencing: %w", err)
	}
	return mode, nil
}

// cachedFenceMode is fenceMode from the CSIDriver cache, for the steps that
// only decide whether to wait for this driver's storage fence or to try
// another backend, and for the driver's registration: a stale answer there
// delays a failover (the fence itself reads live and sends nothing unless
// the declaration holds), it moves nothing.
func (c *Controller) cachedFenceMode() fencemode.Mode {
	d, err := c.drivers.Get(c.opts.DriverName)
	if err != nil {
		d = nil
	}
	return fencemode.OfDriver(d, c.opts.CanFence) // a bad value is said where it is read
}

// unsettled reports whether the record holds an entry of driver (any driver
// if "") that is not cleaned and whose fence is not confirmed: a fence was
// intended and its outcome is unknown or failed, so it must be retried.
func unsettled(fr *fencingv1alpha1.FencingRequest, driver string) bool {
	if fr == nil {
		return false
	}
	for _, v := range fr.Status.Volumes {
		if (driver == "" || v.Driver == driver) && v.CleanedTime == nil && v.FencedTime == nil {
			return true
		}
	}
	return false
}

// defaultLiveReadValidity is how long a live read finding the node down
// stands for the next step that needs it down (the next fence RPC of a
// batch, the signals after a slow fence): later steps read it again.
const defaultLiveReadValidity = time.Second

// fenceNode fences the attachments of our driver on the node, write-ahead
// through the record, except those of volumes a pod that stays on the node
// uses (unless an admin asked for the node). Unless the node was asked for,
// each RPC follows a live read finding it down (aliveChecked: the last one).
// mode says how (fenceMode): with fence=true, or with the plain unpublish
// the driver's owner declared revokes access, recorded all the same, so
// that it is sticky, refuses publishes there until cleaned and counts for
// FencingComplete as a fence does (S2, S8, S9). An unpublish that fails or
// outlasts --timeout is no fence either way: its error is recorded and
// nothing moves on it. It returns the record read back.
func (c *Controller) fenceNode(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, staying map[string]bool, manual bool, aliveChecked time.Time, mode fencemode.Mode) (*fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx)
	vas, err := c.vasOn(node.Name)
	if err != nil {
		return fr, err
	}
	var todo []fencingv1alpha1.FencedVolume
	pvs := map[string]*v1.PersistentVolume{}
	var vaOf = map[string]*storagev1.VolumeAttachment{}
	var firstErr error
	for _, va := range vas {
		if va.Spec.Attacher != c.opts.DriverName || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		pv, err := c.pvs.Get(*va.Spec.Source.PersistentVolumeName)
		if err != nil || pv.Spec.CSI == nil {
			continue
		}
		handle := pv.Spec.CSI.VolumeHandle
		if staying[c.opts.DriverName+"^"+handle] && !manual {
			continue
		}
		// Fenced once under this request is done, even once cleaned up: a
		// node the admin keeps fenced must not be fenced again after each
		// cleanup.
		if fencerecord.FencedUnderRequest(fr, c.opts.DriverName, handle) {
			continue
		}
		nodeID, err := c.nodeID(va, node.Name)
		if err != nil {
			c.recorder.Event(va, v1.EventTypeWarning, "FenceFailed", err.Error())
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		todo = append(todo, fencingv1alpha1.FencedVolume{Driver: c.opts.DriverName, VolumeHandle: handle, PersistentVolumeName: pv.Name, NodeID: nodeID})
		pvs[handle], vaOf[handle] = pv, va
	}
	if len(todo) > 0 {
		// The fences run concurrently (fencerecord.FenceConcurrency).
		var aliveMu sync.Mutex
		stillDown := func(ctx context.Context) error {
			aliveMu.Lock()
			defer aliveMu.Unlock()
			if manual || time.Since(aliveChecked) <= c.liveReadValidity {
				return nil
			}
			// A node not explicitly requested is fenced only while it is
			// down by a live read.
			if err := c.down(ctx, node.Name); err != nil {
				return err
			}
			aliveChecked = time.Now()
			return nil
		}
		errs, err := c.records.Fence(ctx, node.Name, "NodeUnreachable", todo, func(ctx context.Context, v fencingv1alpha1.FencedVolume) error {
			if err := stillDown(ctx); err != nil {
				return fmt.Errorf("%w: %w", fencerecord.ErrNotSent, err)
			}
			secrets, err := csiclient.PublishSecrets(ctx, c.client, pvs[v.VolumeHandle].Spec.CSI.ControllerPublishSecretRef)
			if err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
			defer cancel()
			backendAttempts.WithLabelValues(fencingv1alpha1.BackendStorage).Inc()
			start := time.Now()
			err = c.fenceVolume(cctx, v, vaOf[v.VolumeHandle], secrets, mode)
			backendDuration.WithLabelValues(fencingv1alpha1.BackendStorage).Observe(time.Since(start).Seconds())
			if err != nil {
				backendFailures.WithLabelValues(fencingv1alpha1.BackendStorage).Inc()
			}
			return err
		})
		if err != nil {
			return fr, err
		}
		for i, v := range todo {
			va := vaOf[v.VolumeHandle]
			if errs[i] != nil {
				fenceErrors.WithLabelValues(c.opts.DriverName).Inc()
				msg := fmt.Sprintf("fencing volume %s from node %s failed; nothing moves until the driver confirms the fence: %v", v.VolumeHandle, node.Name, errs[i])
				c.recorder.Event(va, v1.EventTypeWarning, "FenceFailed", msg)
				c.recorder.Event(node, v1.EventTypeWarning, "FenceFailed", msg)
				if firstErr == nil {
					firstErr = errors.New(msg)
				}
				continue
			}
			logger.V(2).Info("Fenced volume", "volume", v.VolumeHandle, "VolumeAttachment", va.Name, "nodeID", v.NodeID, "fenceMode", mode)
			if mode.SendsFenceField() {
				c.recorder.Eventf(va, v1.EventTypeNormal, "FencedUnpublish", "Volume %s fenced from node %s before failover", v.VolumeHandle, node.Name)
			} else {
				c.recorder.Eventf(va, v1.EventTypeNormal, "FencedUnpublish", "Volume %s fenced from node %s before failover: unpublished, which its CSIDriver declares revokes access (%s)",
					v.VolumeHandle, node.Name, contract.UnpublishRevokesAccessAnnotation)
			}
		}
	}
	got, err := c.frClient.Get(ctx, node.Name)
	switch {
	case err == nil:
		fr = got
	case !apierrors.IsNotFound(err):
		return fr, err
	}
	return fr, firstErr
}

// fenceVolume fences v from its node ID and, first, from the previous one
// its VolumeAttachment still records (contract.PreviousNodeIDAnnotation):
// the attacher's unpublish of that one failed or never came (a crash), and
// the volume may still be published under it, out of reach of a fence of
// any other ID (S1). The record names v.NodeID, as the attacher's does.
// The fence field is sent only in mode FenceField (UNPUBLISH_FENCE); a
// driver that does not advertise it gets the stock request.
func (c *Controller) fenceVolume(ctx context.Context, v fencingv1alpha1.FencedVolume, va *storagev1.VolumeAttachment, secrets map[string]string, mode fencemode.Mode) error {
	return csiclient.EachNodeID(va.Annotations[contract.PreviousNodeIDAnnotation], v.NodeID, func(nodeID string) error {
		return c.csi.Detach(ctx, v.VolumeHandle, nodeID, secrets, mode.SendsFenceField())
	})
}

// nodeID is the CSI node ID the volume was published to: the one the
// attacher wrote on the VolumeAttachment, else the driver's entry in the
// node's CSINode. Never a guess: fencing another ID fences nothing.
func (c *Controller) nodeID(va *storagev1.VolumeAttachment, nodeName string) (string, error) {
	if id := va.Annotations[contract.NodeIDAnnotation]; id != "" {
		return id, nil
	}
	if cn, err := c.csinodes.Get(nodeName); err == nil {
		for _, d := range cn.Spec.Drivers {
			if d.Name == c.opts.DriverName && d.NodeID != "" {
				return d.NodeID, nil
			}
		}
	}
	return "", fmt.Errorf("cannot fence VolumeAttachment %s: no CSI node ID of driver %s for node %s (no %s annotation, no CSINode entry)",
		va.Name, c.opts.DriverName, nodeName, contract.NodeIDAnnotation)
}

// markFenced sets the request's phase Fenced and its Fenced condition when
// fenced, and takes both back to Fencing when not (the node is not fenced as
// a whole any more). It leaves the request's error alone: that is the
// record's summary of every driver's entries.
func (c *Controller) markFenced(ctx context.Context, node string, fenced bool) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		fr, err := c.frClient.Get(ctx, node)
		if apierrors.IsNotFound(err) && !fenced {
			return nil
		}
		if err != nil {
			return err
		}
		if (fr.Status.Phase == fencingv1alpha1.PhaseFenced) == fenced {
			return nil
		}
		if fenced {
			fr.Status.Phase = fencingv1alpha1.PhaseFenced
			setFRCondition(fr, fencingv1alpha1.ConditionFenced, metav1.ConditionTrue, reasonAllAttachmentsFenced, "every attachment of every driver on the node is fenced")
		} else {
			fr.Status.Phase = fencingv1alpha1.PhaseFencing
			setFRCondition(fr, fencingv1alpha1.ConditionFenced, metav1.ConditionFalse, "NotFencedAsAWhole", "the node is not fenced as a whole any more")
		}
		if _, err = c.frClient.UpdateStatus(ctx, fr); err != nil {
			return err
		}
		if fenced && fr.Status.StartTime != nil {
			fencingDuration.Observe(time.Since(fr.Status.StartTime.Time).Seconds())
		}
		return nil
	})
}
