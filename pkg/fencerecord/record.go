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

// Package fencerecord keeps the durable record of which volumes were fenced
// on which node, in the status of the FencingRequest named after the node
// (DESIGN.md section 5). It is the one home of invariant S8, write-ahead:
//
//  1. Fence records the intent (volume, driver, CSI node ID, start time)
//     before it calls the driver; from then on the volume may be quarantined
//     on the node, whatever happens next (success, refusal, timeout, crash);
//  2. it records the outcome after the call;
//  3. only the node agent's RecordCleaned ends the possible quarantine.
//
// While an entry is not cleaned, publishing the volume to the node is refused
// (S2), the node is not released, and every later unpublish of the volume from
// the node is fenced. A finalizer keeps the request while any entry is not
// cleaned, so that deleting it, or the Node, never skips the cleanup (S6).
//
// Every writer goes through update, which re-reads the request and retries on
// conflicts, so the failover controller, the attachers of several drivers and
// the node agent never lose each other's entries. Concurrent fences on one
// node share their writes through a Recorder (group commit, recorder.go):
// one request per node, written by every worker of a burst, would otherwise
// cost each fence two writes and a storm of conflicts. The node agent's
// concurrent cleanups of one node share theirs the same way.
//
// The record is bounded (MaxVolumes): what is cleaned is forgotten when the
// request starts over, or at the bound; what is not cleaned never is.
package fencerecord

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// Client is the part of the FencingRequest client (fencingv1alpha1.Client)
// the record needs.
type Client interface {
	Get(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error)
	Create(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error)
	Update(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error)
	UpdateStatus(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error)
}

var _ Client = &fencingv1alpha1.Client{}

// MaxVolumes bounds status.volumes (the CRD's maxItems): a record that grew
// with every claim ever fenced on its node would reach etcd's object size
// limit, and then no write of it, and so no fence there, could succeed.
//
// The record stays within it in two ways. A request that completed and
// starts over forgets the entries its last failure cleaned (they are its
// history, shown until then). Within one failure, a write that would go
// beyond the bound forgets the entries cleaned longest ago; an entry not
// cleaned is never forgotten (S8). When those alone would fill the record,
// an intent is refused with ErrRecordFull before anything is sent: nothing
// more is fenced on the node until its agent has cleaned some up.
//
// Forgetting a cleaned entry within a failure has two effects, which is
// why it waits for the bound: a volume still attached there may be fenced
// again (the failover fences a volume once per failure only while it is
// recorded), and its attachment no longer holds back the release of the
// node.
const MaxVolumes = 512

// outcomeReserve are the last places of MaxVolumes that only outcomes may
// take: a fence whose entry was cleaned and forgotten while the fence was
// in flight is recorded when the driver confirms it, even once intents are
// refused (S8: a fence that happened is never forgotten).
const outcomeReserve = 32

// intentLimit is how many entries an intent may leave in the record.
const intentLimit = MaxVolumes - outcomeReserve

// ErrRecordFull is the error of an intent that does not fit in its node's
// record: too many of the volumes it holds are not cleaned up yet.
var ErrRecordFull = errors.New("the FencingRequest cannot record more volumes")

// MaxMessageLength bounds, in bytes, the fence and cleanup errors an entry
// keeps (the CRD's maxLength): a driver's error may be long, and
// MaxVolumes entries must stay far below etcd's object size limit. The
// caller gets the whole error; the record, its beginning (bounded).
const MaxMessageLength = 512

// bounded returns msg cut to MaxMessageLength bytes, at a character, with
// an ellipsis when cut.
func bounded(msg string) string {
	if len(msg) <= MaxMessageLength {
		return msg
	}
	const ellipsis = "…"
	cut := MaxMessageLength - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + ellipsis
}

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

// MayBeQuarantined reports whether the volume may be quarantined on fr's
// node: a fence of it was intended there (write-ahead), confirmed or not, and
// the node agent has not cleaned it up since. It must not be published to
// that node (invariant S2), and any unpublish from it must be fenced. fr may
// be nil.
func MayBeQuarantined(fr *fencingv1alpha1.FencingRequest, driver, volumeHandle string) bool {
	v := Find(fr, driver, volumeHandle)
	return v != nil && v.CleanedTime == nil
}

// IsFenced reports whether the driver confirmed the fence of the volume on
// fr's node and it is not cleaned up since: the node can no longer access it,
// so what used it there may be force-deleted. fr may be nil.
func IsFenced(fr *fencingv1alpha1.FencingRequest, driver, volumeHandle string) bool {
	v := Find(fr, driver, volumeHandle)
	return v != nil && v.FencedTime != nil && v.CleanedTime == nil
}

// FencedUnderRequest reports whether the driver confirmed the fence of the
// volume on fr's node under this request, whether the node agent has cleaned
// it up since or not: nothing is published to a node while it is
// quarantined (S2), so a volume fenced there stays out of its reach after
// the cleanup, and is not fenced again. A completed request (the node
// released, its quarantine lifted) starts over. fr may be nil.
func FencedUnderRequest(fr *fencingv1alpha1.FencingRequest, driver, volumeHandle string) bool {
	v := Find(fr, driver, volumeHandle)
	return v != nil && v.FencedTime != nil && fr.Status.Phase != fencingv1alpha1.PhaseComplete
}

// Pending reports whether any entry of fr is not cleaned up: the node must
// stay quarantined and the request must stay (its finalizer).
func Pending(fr *fencingv1alpha1.FencingRequest) bool {
	if fr == nil {
		return false
	}
	for _, v := range fr.Status.Volumes {
		if v.CleanedTime == nil {
			return true
		}
	}
	return false
}

// Fence is Recorder.Fence for a caller on its own: its record writes are
// shared with no other call. Callers that fence concurrently on one node
// share a Recorder instead.
func Fence(ctx context.Context, c Client, nodeName, reason string, vols []fencingv1alpha1.FencedVolume, fence func(context.Context, fencingv1alpha1.FencedVolume) error) ([]error, error) {
	return NewRecorder(c).Fence(ctx, nodeName, reason, vols, fence)
}

// RecordIntent records, before any fence RPC, that vols are about to be
// fenced on nodeName: from now on each may be quarantined there. A volume
// whose previous quarantine was cleaned starts a new one; a volume still
// possibly quarantined keeps what it has (and its confirmed fence).
func RecordIntent(ctx context.Context, c Client, nodeName, reason string, vols ...fencingv1alpha1.FencedVolume) error {
	return update(ctx, c, nodeName, reason, intentLimit, intent(vols, ""))
}

// MaxFencesInFlight bounds an entry's FencesInFlight (the CRD's maxItems):
// only callers that die or give up between their intent and their outcome
// leave their ID there. An intent that finds the list full is not named in
// it; the entry then never goes with an unsent fence, which is the safe
// side (S8), until its next cleanup starts a new quarantine.
const MaxFencesInFlight = 8

// unknownCaller names, in FencesInFlight, the caller that started a
// quarantine and recorded neither its outcome nor itself (it wrote the
// record before FencesInFlight existed, and died): its fence may have been
// applied, so no unsent fence may remove the entry.
const unknownCaller = "unknown"

// intent is the mutation of RecordIntent for the fence call named id: every
// volume of vols is recorded as possibly quarantined, and id as one of its
// fences in flight. A volume whose previous quarantine was cleaned starts a
// new one. It can run again on a newer copy of the request (a retry after a
// conflict).
func intent(vols []fencingv1alpha1.FencedVolume, id string) mutation {
	return func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		changed := false
		for _, vol := range vols {
			// upsert's own report is not needed: changed is set for every
			// volume below.
			e, _ := upsert(fr, vol)
			if e.StartedTime == nil || e.CleanedTime != nil {
				e.StartedTime = &now
				e.FencedTime, e.CleanedTime = nil, nil
				e.FenceError, e.CleanupError = "", ""
				e.FencesInFlight = nil
			} else if len(e.FencesInFlight) == 0 && !hasOutcome(e) {
				e.FencesInFlight = []string{unknownCaller}
			}
			if id != "" && len(e.FencesInFlight) < MaxFencesInFlight && !slices.Contains(e.FencesInFlight, id) {
				e.FencesInFlight = append(e.FencesInFlight, id)
			}
			changed = true
		}
		if changed {
			started(fr, now)
		}
		return changed
	}
}

// hasOutcome reports whether a fence of e's quarantine has been answered:
// confirmed, or failed (and so possibly applied).
func hasOutcome(e *fencingv1alpha1.FencedVolume) bool {
	return e.FencedTime != nil || e.FenceError != ""
}

// newFenceID returns a fresh ID for one fence call's intents.
func newFenceID() string {
	return strconv.FormatUint(rand.Uint64(), 36)
}

// ErrNotSent tells Fence that no fence was sent for a volume.
var ErrNotSent = errors.New("no fence was sent")

// started sets the request's start time, once.
func started(fr *fencingv1alpha1.FencingRequest, now metav1.Time) {
	if fr.Status.StartTime == nil {
		fr.Status.StartTime = &now
	}
}

// outcomes is the mutation that records the result of each fence of vols
// (errs[i] of vols[i]) by the fence call named id. An entry whose fence was
// not sent goes again when no other fence of it is in flight or answered
// (unstarted).
func outcomes(vols []fencingv1alpha1.FencedVolume, id string, errs []error) mutation {
	// A write still retrying for other callers may apply this again after
	// its caller gave up and went on with errs.
	errs = slices.Clone(errs)
	return func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		changed := false
		for i, vol := range vols {
			switch {
			case errors.Is(errs[i], ErrNotSent):
				if unstarted(fr, vol, id) {
					changed = true
					continue
				}
			case errs[i] == nil:
				changed = fenced(fr, vol, now) || changed
			default:
				changed = fenceFailed(fr, vol, now, errs[i].Error()) || changed
			}
			if e := Find(fr, vol.Driver, vol.VolumeHandle); e != nil && slices.Contains(e.FencesInFlight, id) {
				e.FencesInFlight = slices.DeleteFunc(e.FencesInFlight, func(f string) bool { return f == id })
				changed = true
			}
		}
		return changed
	}
}

// unstarted removes the entry of vol when the fence call id, which did not
// send its fence after all, is the only one in flight on it and no fence of
// it was answered: nobody sent a fence of this quarantine, so none can have
// been applied. Otherwise the entry stays, as another call's fence may have
// been (S8). An entry that no longer names id (cleaned and started again
// since) is another quarantine: left as it is.
func unstarted(fr *fencingv1alpha1.FencingRequest, vol fencingv1alpha1.FencedVolume, id string) bool {
	e := Find(fr, vol.Driver, vol.VolumeHandle)
	if e == nil || hasOutcome(e) || e.CleanedTime != nil || !slices.Equal(e.FencesInFlight, []string{id}) {
		return false
	}
	fr.Status.Volumes = slices.DeleteFunc(fr.Status.Volumes, func(v fencingv1alpha1.FencedVolume) bool {
		return v.Driver == vol.Driver && v.VolumeHandle == vol.VolumeHandle
	})
	return true
}

// fenced marks vol fenced: confirmed, and quarantined until cleaned (a
// cleanup that ran while the fence was in flight does not count).
func fenced(fr *fencingv1alpha1.FencingRequest, vol fencingv1alpha1.FencedVolume, now metav1.Time) bool {
	started(fr, now)
	e, changed := upsert(fr, vol)
	if e.FencedTime != nil && e.CleanedTime == nil && e.FenceError == "" {
		return changed
	}
	if e.StartedTime == nil || e.CleanedTime != nil {
		e.StartedTime = &now
	}
	e.FencedTime = &now
	e.FenceError = ""
	e.CleanedTime = nil
	e.CleanupError = ""
	return true
}

// fenceFailed records a failed fence of vol. The entry stays: the driver may
// have applied a fence whose answer was lost.
func fenceFailed(fr *fencingv1alpha1.FencingRequest, vol fencingv1alpha1.FencedVolume, now metav1.Time, msg string) bool {
	msg = bounded(msg)
	started(fr, now)
	e, changed := upsert(fr, vol)
	if e.StartedTime == nil || e.CleanedTime != nil {
		e.StartedTime = &now
		e.CleanedTime, e.CleanupError = nil, ""
		changed = true
	}
	if e.FencedTime != nil || e.FenceError == msg {
		return changed
	}
	e.FenceError = msg
	return true
}

// RecordFenced records that vol was fenced on nodeName, now. Callers that
// call the driver use Fence, which records the intent first.
func RecordFenced(ctx context.Context, c Client, nodeName, reason string, vol fencingv1alpha1.FencedVolume) error {
	return update(ctx, c, nodeName, reason, MaxVolumes, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		return fenced(fr, vol, now)
	})
}

// RecordFenceError records that fencing vol on nodeName failed with msg. The
// entry stays until cleaned up: the fence may have been applied.
func RecordFenceError(ctx context.Context, c Client, nodeName, reason string, vol fencingv1alpha1.FencedVolume, msg string) error {
	return update(ctx, c, nodeName, reason, MaxVolumes, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		return fenceFailed(fr, vol, now, msg)
	})
}

// RecordCleaned records that the node agent finished the forced cleanup of
// (driver, volumeHandle) on nodeName: the volume is no longer quarantined
// there. A missing entry or FencingRequest is not created.
func RecordCleaned(ctx context.Context, c Client, nodeName, driver, volumeHandle string) error {
	return updateExisting(ctx, c, nodeName, cleaned(driver, volumeHandle))
}

// cleaned is the mutation of RecordCleaned.
func cleaned(driver, volumeHandle string) mutation {
	return func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		e := Find(fr, driver, volumeHandle)
		if e == nil || e.CleanedTime != nil {
			return false
		}
		e.CleanedTime = &now
		e.CleanupError = ""
		return true
	}
}

// RecordCleanupError records that the cleanup of (driver, volumeHandle) on
// nodeName failed with msg; the volume stays quarantined.
func RecordCleanupError(ctx context.Context, c Client, nodeName, driver, volumeHandle, msg string) error {
	return updateExisting(ctx, c, nodeName, cleanupFailed(driver, volumeHandle, msg))
}

// cleanupFailed is the mutation of RecordCleanupError.
func cleanupFailed(driver, volumeHandle, msg string) mutation {
	msg = bounded(msg)
	return func(fr *fencingv1alpha1.FencingRequest, _ metav1.Time) bool {
		e := Find(fr, driver, volumeHandle)
		if e == nil || e.CleanedTime != nil || e.CleanupError == msg {
			return false
		}
		e.CleanupError = msg
		return true
	}
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
// writers. The request carries the record finalizer before any entry is
// written to it. A request that was complete goes back to Fencing: something
// on the node is fenced again. The entries must fit in limit (fit); when
// they cannot, nothing is written and the error wraps ErrRecordFull.
func update(ctx context.Context, c Client, nodeName, reason string, limit int, mutate mutation) error {
	return retryOnConflict(ctx, func() error {
		fr, err := c.Get(ctx, nodeName)
		if apierrors.IsNotFound(err) {
			fr, err = c.Create(ctx, &fencingv1alpha1.FencingRequest{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, Finalizers: []string{contract.RecordFinalizer}},
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
		if fr.Status.Phase == fencingv1alpha1.PhaseComplete {
			// Starting over: the last node-level fence and the volumes
			// cleaned since are history (the node was back and released
			// since), never a fence of now.
			fr.Status.NodeFence = nil
			forgetCleaned(fr)
		}
		if !mutate(fr, metav1.Now()) {
			return nil
		}
		if _, err := fit(fr, limit); err != nil {
			return err
		}
		if !slices.Contains(fr.Finalizers, contract.RecordFinalizer) {
			// An admin's request, or one written before the finalizer
			// existed: protect it before it records anything.
			fr.Finalizers = append(fr.Finalizers, contract.RecordFinalizer)
			status := fr.Status
			if fr, err = c.Update(ctx, fr); err != nil {
				return err
			}
			fr.Status = status
		}
		switch fr.Status.Phase {
		case "", fencingv1alpha1.PhasePending, fencingv1alpha1.PhaseComplete:
			fr.Status.Phase = fencingv1alpha1.PhaseFencing
			fr.Status.CompletionTime = nil
		}
		summarizeErrors(fr)
		return updateStatus(ctx, c, fr)
	})
}

// summarizeErrors sets the request's error from its entries: the first
// fence error not yet overcome, of whichever driver; none, none. So one
// driver's success never hides another driver's failure.
func summarizeErrors(fr *fencingv1alpha1.FencingRequest) {
	for _, v := range fr.Status.Volumes {
		if v.FenceError != "" && v.FencedTime == nil && v.CleanedTime == nil {
			fr.Status.ErrorReason = ErrorReasonFenceFailed
			fr.Status.ErrorMessage = fmt.Sprintf("driver %s, volume %s: %s", v.Driver, v.VolumeHandle, v.FenceError)
			return
		}
	}
	if fr.Status.ErrorReason == ErrorReasonFenceFailed {
		fr.Status.ErrorReason, fr.Status.ErrorMessage = "", ""
	}
}

// RemoveFinalizer lets the node's FencingRequest go once every entry is
// cleaned up. It reads the request live; it does nothing while anything is
// pending or when the request is gone.
func RemoveFinalizer(ctx context.Context, c Client, nodeName string) error {
	return modifyExisting(ctx, c, nodeName, func(fr *fencingv1alpha1.FencingRequest, _ metav1.Time) bool {
		if Pending(fr) || !slices.Contains(fr.Finalizers, contract.RecordFinalizer) {
			return false
		}
		fr.Finalizers = slices.DeleteFunc(fr.Finalizers, func(f string) bool { return f == contract.RecordFinalizer })
		return true
	}, func(fr *fencingv1alpha1.FencingRequest) error {
		_, err := c.Update(ctx, fr)
		return err
	})
}

// updateExisting is update for writers that must not create a request.
// They add no entry, but a record written before the bound existed may
// hold more than MaxVolumes: its write forgets what it can (fit), so that
// the CRD's maxItems does not refuse it.
func updateExisting(ctx context.Context, c Client, nodeName string, mutate mutation) error {
	return modifyExisting(ctx, c, nodeName, mutate, func(fr *fencingv1alpha1.FencingRequest) error {
		if _, err := fit(fr, MaxVolumes); err != nil {
			return err
		}
		return updateStatus(ctx, c, fr)
	})
}

// forgetCleaned removes the entries that are cleaned: each describes a
// quarantine that is over.
func forgetCleaned(fr *fencingv1alpha1.FencingRequest) {
	fr.Status.Volumes = slices.DeleteFunc(fr.Status.Volumes, func(v fencingv1alpha1.FencedVolume) bool {
		return v.CleanedTime != nil
	})
}

// fit makes fr hold at most limit entries by forgetting cleaned ones, those
// cleaned longest ago first (MaxVolumes says what that costs), and reports
// whether it forgot any. An entry not cleaned is never forgotten: when
// those alone exceed limit, fit changes nothing and returns an error
// wrapping ErrRecordFull.
func fit(fr *fencingv1alpha1.FencingRequest, limit int) (bool, error) {
	vols := fr.Status.Volumes
	over := len(vols) - limit
	if over <= 0 {
		return false, nil
	}
	var cleaned []int
	for i, v := range vols {
		if v.CleanedTime != nil {
			cleaned = append(cleaned, i)
		}
	}
	if len(cleaned) < over {
		return false, fmt.Errorf("%w: FencingRequest %s would hold %d volumes, at most %d may be recorded here, and %d of them are not cleaned up on node %s: "+
			"none of those is ever forgotten, and nothing more is fenced there until the node agent has cleaned some up",
			ErrRecordFull, fr.Name, len(vols), limit, len(vols)-len(cleaned), fr.Name)
	}
	slices.SortStableFunc(cleaned, func(a, b int) int {
		return vols[a].CleanedTime.Time.Compare(vols[b].CleanedTime.Time)
	})
	forget := make(map[int]bool, over)
	for _, i := range cleaned[:over] {
		forget[i] = true
	}
	kept := make([]fencingv1alpha1.FencedVolume, 0, len(vols)-over)
	for i, v := range vols {
		if !forget[i] {
			kept = append(kept, v)
		}
	}
	fr.Status.Volumes = kept
	return true, nil
}

// modifyExisting applies mutate to a fresh copy of the node's request and
// writes it with write, retrying on conflicts; a request that is gone (or
// goes meanwhile) is left gone.
func modifyExisting(ctx context.Context, c Client, nodeName string, mutate mutation, write func(*fencingv1alpha1.FencingRequest) error) error {
	return retryOnConflict(ctx, func() error {
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
		if err := write(fr); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
}

func updateStatus(ctx context.Context, c Client, fr *fencingv1alpha1.FencingRequest) error {
	if _, err := c.UpdateStatus(ctx, fr); err != nil {
		return fmt.Errorf("updating the status of FencingRequest %s: %w", fr.Name, err)
	}
	return nil
}

// retryOnConflict retries fn while it fails with a conflict (a concurrent
// writer) or AlreadyExists (a concurrent creator), a bounded number of
// times with backoff; once ctx is done it neither waits nor tries again.
// Steps exhausted, it returns the last conflict.
func retryOnConflict(ctx context.Context, fn func() error) error {
	var conflict error
	err := wait.ExponentialBackoffWithContext(ctx, conflictBackoff, func(context.Context) (bool, error) {
		err := fn()
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			conflict = err
			return false, nil
		default:
			return false, err
		}
	})
	if ctx.Err() == nil && wait.Interrupted(err) && conflict != nil {
		return conflict
	}
	return err
}
