// Package fencerecord keeps the durable record of which volumes were fenced
// on which node, in the FencingRequest named after the node (DESIGN.md
// section 5). Every component that fences or cleans up writes here, so that a
// restart of any of them loses nothing and the node agent knows what to clean.
package fencerecord

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// Client is the part of the FencingRequest client the record needs.
type Client interface {
	Get(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error)
	Create(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error)
	UpdateStatus(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error)
}

// Find returns the entry of (driver, volumeHandle) in fr, or nil.
func Find(fr *fencingv1alpha1.FencingRequest, driver, volumeHandle string) *fencingv1alpha1.FencedVolume {
	if fr == nil {
		return nil
	}
	for i := range fr.Status.Volumes {
		v := &fr.Status.Volumes[i]
		if v.Driver == driver && v.VolumeHandle == volumeHandle {
			return v
		}
	}
	return nil
}

// IsQuarantined reports whether the volume is fenced on fr's node and not yet
// cleaned up there: it must not be published to that node (invariant S2).
func IsQuarantined(fr *fencingv1alpha1.FencingRequest, driver, volumeHandle string) bool {
	v := Find(fr, driver, volumeHandle)
	return v != nil && v.FencedTime != nil && v.CleanedTime == nil
}

// RecordFenced records that vol was fenced on nodeName now, creating the
// node's FencingRequest (origin Automatic, with reason) if there is none. A
// volume fenced again after an earlier cleanup is quarantined again.
func RecordFenced(ctx context.Context, c Client, nodeName, reason string, vol fencingv1alpha1.FencedVolume) error {
	now := metav1.Now()
	return update(ctx, c, nodeName, reason, func(fr *fencingv1alpha1.FencingRequest) bool {
		e := upsert(fr, vol)
		if e.FencedTime != nil && e.CleanedTime == nil && e.FenceError == "" {
			return false // already recorded: keep the first time
		}
		e.FencedTime = &now
		e.FenceError = ""
		e.CleanedTime = nil
		e.CleanupError = ""
		if fr.Status.StartTime == nil {
			fr.Status.StartTime = &now
		}
		return true
	})
}

// RecordFenceError records that fencing vol on nodeName failed with msg, so
// that the reason is visible on the FencingRequest.
func RecordFenceError(ctx context.Context, c Client, nodeName, reason string, vol fencingv1alpha1.FencedVolume, msg string) error {
	return update(ctx, c, nodeName, reason, func(fr *fencingv1alpha1.FencingRequest) bool {
		e := upsert(fr, vol)
		if e.FencedTime != nil && e.CleanedTime == nil {
			return false // fenced already; a later error does not undo that
		}
		changed := e.FenceError != msg || fr.Status.ErrorMessage != msg
		e.FenceError = msg
		fr.Status.ErrorReason = "FenceFailed"
		fr.Status.ErrorMessage = msg
		return changed
	})
}

// upsert returns the entry of vol in fr, appending one if needed.
func upsert(fr *fencingv1alpha1.FencingRequest, vol fencingv1alpha1.FencedVolume) *fencingv1alpha1.FencedVolume {
	if e := Find(fr, vol.Driver, vol.VolumeHandle); e != nil {
		if vol.PersistentVolumeName != "" {
			e.PersistentVolumeName = vol.PersistentVolumeName
		}
		if vol.NodeID != "" {
			e.NodeID = vol.NodeID
		}
		return e
	}
	fr.Status.Volumes = append(fr.Status.Volumes, fencingv1alpha1.FencedVolume{
		Driver:               vol.Driver,
		VolumeHandle:         vol.VolumeHandle,
		PersistentVolumeName: vol.PersistentVolumeName,
		NodeID:               vol.NodeID,
	})
	return &fr.Status.Volumes[len(fr.Status.Volumes)-1]
}

// update applies mutate to the node's FencingRequest status, creating the
// request if needed and retrying on conflicts with other writers.
func update(ctx context.Context, c Client, nodeName, reason string, mutate func(*fencingv1alpha1.FencingRequest) bool) error {
	backoff := wait.Backoff{Steps: 10, Duration: 10e6, Factor: 2, Jitter: 0.1, Cap: 2e9}
	return retry.OnError(backoff, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		fr, err := c.Get(ctx, nodeName)
		if apierrors.IsNotFound(err) {
			fr, err = c.Create(ctx, &fencingv1alpha1.FencingRequest{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName},
				Spec: fencingv1alpha1.FencingRequestSpec{
					NodeName: nodeName,
					Origin:   fencingv1alpha1.OriginAutomatic,
					Reason:   reason,
				},
			})
		}
		if err != nil {
			return err
		}
		fr = fr.DeepCopy()
		if !mutate(fr) {
			return nil
		}
		if fr.Status.Phase == "" || fr.Status.Phase == fencingv1alpha1.PhasePending || fr.Status.Phase == fencingv1alpha1.PhaseComplete {
			fr.Status.Phase = fencingv1alpha1.PhaseFencing
			fr.Status.CompletionTime = nil
		}
		if _, err := c.UpdateStatus(ctx, fr); err != nil {
			return fmt.Errorf("updating FencingRequest %s: %w", nodeName, err)
		}
		return nil
	})
}
