// Package fencerecord keeps the durable record of which volumes were fenced
// on which node, in the status of the FencingRequest named after the node
// (DESIGN.md section 5). Whoever fences writes the record before it lets the
// detach finish, and whoever cleans up writes it when done, so that a restart
// of any component loses nothing: the attacher refuses to publish a volume to
// a node where the record says it is quarantined (invariant S2), and the node
// agent knows what to clean.
//
// Every writer goes through update, which re-reads the request and retries on
// conflicts, so the failover controller, the attachers of several drivers and
// the node agent never lose each other's entries.
package fencerecord

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// Client is the part of the FencingRequest client (fencingv1alpha1.Client)
// the record needs.
type Client interface {
	Get(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error)
	Create(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error)
	UpdateStatus(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error)
}

var _ Client = &fencingv1alpha1.Client{}

// ErrorReasonFenceFailed is the status.errorReason a failed fence leaves on
// the FencingRequest.
const ErrorReasonFenceFailed = "FenceFailed"

// conflictBackoff bounds the re-read-and-retry loop of one record update.
// Other errors are returned at once: the caller retries with its own backoff.
var conflictBackoff = wait.Backoff{Steps: 8, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: time.Second}

// Find returns the entry of (driver, volumeHandle) in fr, or nil. fr may be
// nil (the node has no FencingRequest).
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

// IsQuarantined reports whether the record says the volume was fenced on
// fr's node and not cleaned up there since: it must not be published to that
// node (invariant S2). fr may be nil.
func IsQuarantined(fr *fencingv1alpha1.FencingRequest, driver, volumeHandle string) bool {
	v := Find(fr, driver, volumeHandle)
	return v != nil && v.FencedTime != nil && v.CleanedTime == nil
}

// RecordFenced records that vol was fenced on nodeName, now. It creates the
// node's FencingRequest (origin Automatic, with reason) if there is none.
// Recording a fence that is already recorded keeps the first time; a volume
// fenced again after it was cleaned up is quarantined again.
func RecordFenced(ctx context.Context, c Client, nodeName, reason string, vol fencingv1alpha1.FencedVolume) error {
	return update(ctx, c, nodeName, reason, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		e, changed := upsert(fr, vol)
		if e.FencedTime != nil && e.CleanedTime == nil && e.FenceError == "" {
			return changed
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
// that the reason is visible on the FencingRequest. It does not undo a fence
// that is recorded and not yet cleaned up.
func RecordFenceError(ctx context.Context, c Client, nodeName, reason string, vol fencingv1alpha1.FencedVolume, msg string) error {
	return update(ctx, c, nodeName, reason, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		e, changed := upsert(fr, vol)
		if e.FencedTime != nil && e.CleanedTime == nil {
			return changed
		}
		if e.FenceError == msg && fr.Status.ErrorReason == ErrorReasonFenceFailed && fr.Status.ErrorMessage == msg {
			return changed
		}
		e.FenceError = msg
		fr.Status.ErrorReason = ErrorReasonFenceFailed
		fr.Status.ErrorMessage = msg
		if fr.Status.StartTime == nil {
			fr.Status.StartTime = &now
		}
		return true
	})
}

// RecordCleaned records that the node agent finished the forced cleanup of
// (driver, volumeHandle) on nodeName: the volume is no longer quarantined
// there. An entry that is not recorded as fenced is left alone, and a missing
// FencingRequest is not created.
func RecordCleaned(ctx context.Context, c Client, nodeName, driver, volumeHandle string) error {
	return updateExisting(ctx, c, nodeName, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		e := Find(fr, driver, volumeHandle)
		if e == nil || e.FencedTime == nil || e.CleanedTime != nil {
			return false
		}
		e.CleanedTime = &now
		e.CleanupError = ""
		return true
	})
}

// RecordCleanupError records that the cleanup of (driver, volumeHandle) on
// nodeName failed with msg; the volume stays quarantined.
func RecordCleanupError(ctx context.Context, c Client, nodeName, driver, volumeHandle, msg string) error {
	return updateExisting(ctx, c, nodeName, func(fr *fencingv1alpha1.FencingRequest, _ metav1.Time) bool {
		e := Find(fr, driver, volumeHandle)
		if e == nil || e.CleanedTime != nil || e.CleanupError == msg {
			return false
		}
		e.CleanupError = msg
		return true
	})
}

// upsert returns the entry of vol in fr, appending one if needed, and fills
// in the PV name and node ID when vol knows them. It reports whether fr
// changed.
func upsert(fr *fencingv1alpha1.FencingRequest, vol fencingv1alpha1.FencedVolume) (*fencingv1alpha1.FencedVolume, bool) {
	if e := Find(fr, vol.Driver, vol.VolumeHandle); e != nil {
		changed := false
		if vol.PersistentVolumeName != "" && e.PersistentVolumeName != vol.PersistentVolumeName {
			e.PersistentVolumeName = vol.PersistentVolumeName
			changed = true
		}
		if vol.NodeID != "" && e.NodeID != vol.NodeID {
			e.NodeID = vol.NodeID
			changed = true
		}
		return e, changed
	}
	fr.Status.Volumes = append(fr.Status.Volumes, fencingv1alpha1.FencedVolume{
		Driver:               vol.Driver,
		VolumeHandle:         vol.VolumeHandle,
		PersistentVolumeName: vol.PersistentVolumeName,
		NodeID:               vol.NodeID,
	})
	return &fr.Status.Volumes[len(fr.Status.Volumes)-1], true
}

// mutation changes fr in place and reports whether it changed anything.
type mutation func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool

// update applies mutate to the status of the node's FencingRequest, creating
// the request first if there is none, and retries on conflicts with other
// writers. A request that was complete goes back to Fencing: something on
// the node is fenced again.
func update(ctx context.Context, c Client, nodeName, reason string, mutate mutation) error {
	return retryOnConflict(func() error {
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
		if !mutate(fr, metav1.Now()) {
			return nil
		}
		switch fr.Status.Phase {
		case "", fencingv1alpha1.PhasePending, fencingv1alpha1.PhaseComplete:
			fr.Status.Phase = fencingv1alpha1.PhaseFencing
			fr.Status.CompletionTime = nil
		}
		return updateStatus(ctx, c, fr)
	})
}

// updateExisting is update for writers that must not create a request.
func updateExisting(ctx context.Context, c Client, nodeName string, mutate mutation) error {
	return retryOnConflict(func() error {
		fr, err := c.Get(ctx, nodeName)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		fr = fr.DeepCopy()
		if !mutate(fr, metav1.Now()) {
			return nil
		}
		return updateStatus(ctx, c, fr)
	})
}

func updateStatus(ctx context.Context, c Client, fr *fencingv1alpha1.FencingRequest) error {
	if _, err := c.UpdateStatus(ctx, fr); err != nil {
		return fmt.Errorf("updating the status of FencingRequest %s: %w", fr.Name, err)
	}
	return nil
}

// retryOnConflict retries fn while it fails with a conflict (a concurrent
// writer) or AlreadyExists (a concurrent creator), a bounded number of times.
func retryOnConflict(fn func() error) error {
	return retry.OnError(conflictBackoff, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, fn)
}
