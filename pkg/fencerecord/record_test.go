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

package fencerecord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

const drv = "fence.csi.example.com"

var t0 = metav1.Unix(1000, 0)

func newClient(t *testing.T, objs ...*fencingv1alpha1.FencingRequest) (*dynamicfake.FakeDynamicClient, *fencingv1alpha1.Client) {
	t.Helper()
	var rt []runtime.Object
	for _, fr := range objs {
		u, err := fencingv1alpha1.ToUnstructured(fr)
		if err != nil {
			t.Fatal(err)
		}
		rt = append(rt, u)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"}, rt...)
	return dyn, fencingv1alpha1.NewClient(dyn)
}

func fr(node string, origin fencingv1alpha1.Origin, phase fencingv1alpha1.Phase, vols ...fencingv1alpha1.FencedVolume) *fencingv1alpha1.FencingRequest {
	return &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: node, Origin: origin, Reason: "admin"},
		Status:     fencingv1alpha1.FencingRequestStatus{Phase: phase, Volumes: vols},
	}
}

// What the record says of a volume on its node: may be quarantined there
// (publish refused, S2/S8), fenced now (what it was used by may be
// force-deleted), fenced under this request (not fenced again; counts for
// the whole-node signals while the node stays quarantined).
func TestVolumePredicates(t *testing.T) {
	entry := func(mod func(*fencingv1alpha1.FencedVolume)) fencingv1alpha1.FencedVolume {
		v := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1"}
		mod(&v)
		return v
	}
	fenced := entry(func(v *fencingv1alpha1.FencedVolume) { v.FencedTime = &t0 })
	cleaned := entry(func(v *fencingv1alpha1.FencedVolume) { v.FencedTime, v.CleanedTime = &t0, &t0 })
	tests := []struct {
		name                                  string
		fr                                    *fencingv1alpha1.FencingRequest
		quarantined, isFenced, fencedUnderReq bool
	}{
		{"no FencingRequest", nil, false, false, false},
		{"no entry", fr("n", fencingv1alpha1.OriginManual, fencingv1alpha1.PhaseFencing), false, false, false},
		{"fence intended, outcome unknown (S8)", fr("n", "", fencingv1alpha1.PhaseFencing, entry(func(v *fencingv1alpha1.FencedVolume) { v.StartedTime = &t0 })), true, false, false},
		{"fence refused: may have been applied all the same (S8)", fr("n", "", fencingv1alpha1.PhaseFencing, entry(func(v *fencingv1alpha1.FencedVolume) { v.FenceError = "refused" })), true, false, false},
		{"fenced, not cleaned", fr("n", "", fencingv1alpha1.PhaseFencing, fenced), true, true, true},
		{"cleanup failed: still quarantined", fr("n", "", fencingv1alpha1.PhaseFenced, entry(func(v *fencingv1alpha1.FencedVolume) { v.FencedTime, v.CleanupError = &t0, "busy" })), true, true, true},
		{"fenced, then cleaned on the quarantined node", fr("n", "", fencingv1alpha1.PhaseFenced, cleaned), false, false, true},
		{"fenced, cleaned, request complete: starts over", fr("n", "", fencingv1alpha1.PhaseComplete, cleaned), false, false, false},
		{"same handle, other driver", fr("n", "", "", entry(func(v *fencingv1alpha1.FencedVolume) { v.Driver, v.FencedTime = "other.csi", &t0 })), false, false, false},
		{"other handle, same driver", fr("n", "", "", entry(func(v *fencingv1alpha1.FencedVolume) { v.VolumeHandle, v.FencedTime = "v2", &t0 })), false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MayBeQuarantined(tc.fr, drv, "v1"); got != tc.quarantined {
				t.Errorf("MayBeQuarantined = %v, want %v", got, tc.quarantined)
			}
			if got := IsFenced(tc.fr, drv, "v1"); got != tc.isFenced {
				t.Errorf("IsFenced = %v, want %v", got, tc.isFenced)
			}
			if got := FencedUnderRequest(tc.fr, drv, "v1"); got != tc.fencedUnderReq {
				t.Errorf("FencedUnderRequest = %v, want %v", got, tc.fencedUnderReq)
			}
		})
	}
}

func TestRecordFenced(t *testing.T) {
	vol := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1", PersistentVolumeName: "pv1", NodeID: "id-1"}
	tests := []struct {
		name       string
		existing   *fencingv1alpha1.FencingRequest
		wantOrigin fencingv1alpha1.Origin
		wantReason string
		wantPhase  fencingv1alpha1.Phase
		wantVols   int
		// keepsTime: the entry's fencedTime must stay t0.
		keepsTime bool
	}{
		{name: "creates the request when absent", wantOrigin: fencingv1alpha1.OriginAutomatic, wantReason: "node-not-ready", wantPhase: fencingv1alpha1.PhaseFencing, wantVols: 1},
		{name: "adds to a manual request and keeps its origin", existing: fr("node-1", fencingv1alpha1.OriginManual, fencingv1alpha1.PhasePending),
			wantOrigin: fencingv1alpha1.OriginManual, wantReason: "admin", wantPhase: fencingv1alpha1.PhaseFencing, wantVols: 1},
		{name: "keeps other volumes", existing: fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced,
			fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v0", FencedTime: &t0}),
			wantOrigin: fencingv1alpha1.OriginAutomatic, wantReason: "admin", wantPhase: fencingv1alpha1.PhaseFenced, wantVols: 2},
		{name: "already recorded: idempotent, first time kept", existing: fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced,
			fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1", FencedTime: &t0}),
			wantOrigin: fencingv1alpha1.OriginAutomatic, wantReason: "admin", wantPhase: fencingv1alpha1.PhaseFenced, wantVols: 1, keepsTime: true},
		{name: "fenced again after cleanup: quarantined again, request reopened", existing: fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseComplete,
			fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1", FencedTime: &t0, CleanedTime: &t0}),
			wantOrigin: fencingv1alpha1.OriginAutomatic, wantReason: "admin", wantPhase: fencingv1alpha1.PhaseFencing, wantVols: 1},
		{name: "clears an earlier fence error", existing: fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing,
			fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1", FenceError: "refused"}),
			wantOrigin: fencingv1alpha1.OriginAutomatic, wantReason: "admin", wantPhase: fencingv1alpha1.PhaseFencing, wantVols: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var objs []*fencingv1alpha1.FencingRequest
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			_, c := newClient(t, objs...)
			if err := RecordFenced(ctx, c, "node-1", "node-not-ready", vol); err != nil {
				t.Fatal(err)
			}
			got, err := c.Get(ctx, "node-1")
			if err != nil {
				t.Fatal(err)
			}
			if got.Spec.NodeName != "node-1" || got.Spec.Origin != tc.wantOrigin || got.Spec.Reason != tc.wantReason {
				t.Errorf("spec = %+v", got.Spec)
			}
			if got.Status.Phase != tc.wantPhase || len(got.Status.Volumes) != tc.wantVols {
				t.Errorf("phase %q with %d volumes, want %q with %d", got.Status.Phase, len(got.Status.Volumes), tc.wantPhase, tc.wantVols)
			}
			if !MayBeQuarantined(got, drv, "v1") {
				t.Errorf("not quarantined after RecordFenced: %+v", got.Status.Volumes)
			}
			e := Find(got, drv, "v1")
			if e.FenceError != "" || e.CleanedTime != nil {
				t.Errorf("entry = %+v", e)
			}
			if tc.keepsTime != e.FencedTime.Equal(&t0) {
				t.Errorf("fencedTime = %v, keepsTime %v", e.FencedTime, tc.keepsTime)
			}
			if got.Status.StartTime == nil && !tc.keepsTime {
				t.Error("startTime not set")
			}
			if tc.wantVols == 1 && (e.PersistentVolumeName != "pv1" || e.NodeID != "id-1") {
				t.Errorf("entry lost the PV or node ID: %+v", e)
			}
		})
	}
}

// Other writers (the failover controller, the node agent, other drivers'
// attachers) update the same status: a conflict means re-read and retry, and
// nobody's entry is lost.
func TestRecordFencedRetriesOnConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dyn, c := newClient(t, fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing))
	var conflicts atomic.Int32
	dyn.PrependReactor("update", "fencingrequests", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts.Add(1) <= 2 {
			// Another writer got there first: add its entry, then conflict.
			other := fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing,
				fencingv1alpha1.FencedVolume{Driver: "other.csi", VolumeHandle: "x", FencedTime: &t0})
			u, _ := fencingv1alpha1.ToUnstructured(other)
			if err := dyn.Tracker().Update(fencingv1alpha1.Resource, u, ""); err != nil {
				t.Errorf("tracker update: %v", err)
			}
			return true, nil, apierrors.NewConflict(fencingv1alpha1.Resource.GroupResource(), "node-1", errors.New("stale"))
		}
		return false, nil, nil
	})
	if err := RecordFenced(ctx, c, "node-1", "quarantined", fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1"}); err != nil {
		t.Fatal(err)
	}
	got, _ := c.Get(ctx, "node-1")
	if !MayBeQuarantined(got, drv, "v1") || !MayBeQuarantined(got, "other.csi", "x") {
		t.Errorf("an entry was lost: %+v", got.Status.Volumes)
	}
	if n := conflicts.Load(); n != 3 {
		t.Errorf("%d status updates, want 3 (two conflicts, one success)", n)
	}
}

// A conflict that never ends is bounded: the caller gets the error and
// retries with its own backoff.
func TestRecordFencedGivesUpOnEndlessConflicts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dyn, c := newClient(t, fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing))
	dyn.PrependReactor("update", "fencingrequests", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(fencingv1alpha1.Resource.GroupResource(), "node-1", errors.New("stale"))
	})
	err := RecordFenced(ctx, c, "node-1", "quarantined", fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1"})
	if !apierrors.IsConflict(errors.Unwrap(err)) && !apierrors.IsConflict(err) {
		t.Errorf("err = %v, want a conflict", err)
	}
}

func TestRecordFencedCreateRace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dyn, c := newClient(t)
	dyn.PrependReactor("create", "fencingrequests", func(a clienttesting.Action) (bool, runtime.Object, error) {
		// The failover controller created it a moment earlier.
		u, _ := fencingv1alpha1.ToUnstructured(fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhasePending))
		if err := dyn.Tracker().Add(u); err != nil {
			t.Errorf("tracker add: %v", err)
		}
		return true, nil, apierrors.NewAlreadyExists(fencingv1alpha1.Resource.GroupResource(), "node-1")
	})
	if err := RecordFenced(ctx, c, "node-1", "node-deleted", fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1"}); err != nil {
		t.Fatal(err)
	}
	got, _ := c.Get(ctx, "node-1")
	if !MayBeQuarantined(got, drv, "v1") || got.Spec.Reason != "admin" {
		t.Errorf("got %+v", got)
	}
}

func TestRecordFenceError(t *testing.T) {
	tests := []struct {
		name      string
		existing  *fencingv1alpha1.FencingRequest
		wantError string
		wantQuar  bool
	}{
		{name: "creates the request with the error; the entry stays (S8)", wantError: "refused: node still writing", wantQuar: true},
		{name: "does not undo a recorded fence", existing: fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced,
			fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1", FencedTime: &t0}), wantError: "", wantQuar: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var objs []*fencingv1alpha1.FencingRequest
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			_, c := newClient(t, objs...)
			vol := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1"}
			if err := RecordFenceError(ctx, c, "node-1", "node-not-ready", vol, "refused: node still writing"); err != nil {
				t.Fatal(err)
			}
			got, err := c.Get(ctx, "node-1")
			if err != nil {
				t.Fatal(err)
			}
			e := Find(got, drv, "v1")
			if e == nil || e.FenceError != tc.wantError || MayBeQuarantined(got, drv, "v1") != tc.wantQuar {
				t.Errorf("entry = %+v", e)
			}
			if tc.wantError != "" && (got.Status.ErrorReason != ErrorReasonFenceFailed || !strings.Contains(got.Status.ErrorMessage, "refused")) {
				t.Errorf("status error = %q %q", got.Status.ErrorReason, got.Status.ErrorMessage)
			}
		})
	}
}

func TestRecordCleaned(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, c := newClient(t, fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced,
		fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1", FencedTime: &t0}))
	if err := RecordCleanupError(ctx, c, "node-1", drv, "v1", "device busy"); err != nil {
		t.Fatal(err)
	}
	got, _ := c.Get(ctx, "node-1")
	if !MayBeQuarantined(got, drv, "v1") || Find(got, drv, "v1").CleanupError != "device busy" {
		t.Fatalf("after cleanup error: %+v", got.Status.Volumes)
	}
	if err := RecordCleaned(ctx, c, "node-1", drv, "v1"); err != nil {
		t.Fatal(err)
	}
	got, _ = c.Get(ctx, "node-1")
	if MayBeQuarantined(got, drv, "v1") || Find(got, drv, "v1").CleanupError != "" {
		t.Fatalf("after cleanup: %+v", got.Status.Volumes)
	}
	// No request: nothing to clean, nothing created.
	if err := RecordCleaned(ctx, c, "node-2", drv, "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "node-2"); !apierrors.IsNotFound(err) {
		t.Errorf("RecordCleaned created a request: %v", err)
	}
}

// Fence is write-ahead: the intent is in the record before the callback
// runs; an outcome is recorded per volume; a fence not sent after all
// removes only the entry this call started.
func TestFenceWriteAhead(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pending := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "old", StartedTime: &t0, FenceError: "timed out"}
	_, c := newClient(t, fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing, pending))
	vols := []fencingv1alpha1.FencedVolume{
		{Driver: drv, VolumeHandle: "ok"}, {Driver: drv, VolumeHandle: "refused"}, {Driver: drv, VolumeHandle: "unsent"}, {Driver: drv, VolumeHandle: "old"},
	}
	errs, err := Fence(ctx, c, "node-1", "node-not-ready", vols, func(ctx context.Context, v fencingv1alpha1.FencedVolume) error {
		got, err := c.Get(ctx, "node-1")
		if err != nil || !MayBeQuarantined(got, drv, v.VolumeHandle) {
			t.Errorf("%s: the RPC runs before its intent is recorded: %v", v.VolumeHandle, err)
		}
		switch v.VolumeHandle {
		case "refused":
			return errors.New("FAILED_PRECONDITION: still writing")
		case "unsent", "old":
			return fmt.Errorf("%w: the node is alive", ErrNotSent)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] == nil || !errors.Is(errs[2], ErrNotSent) {
		t.Fatalf("errs = %v", errs)
	}
	got, err := c.Get(ctx, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		handle       string
		mayBe, fence bool
	}{
		{"ok", true, true},
		{"refused", true, false}, // refused: may have been applied all the same
		{"unsent", false, false}, // never sent: gone again
		{"old", true, false},     // an earlier fence may have been applied: kept
	}
	for _, tc := range tests {
		if MayBeQuarantined(got, drv, tc.handle) != tc.mayBe || IsFenced(got, drv, tc.handle) != tc.fence {
			t.Errorf("%s: entry %+v, want mayBeQuarantined=%v fenced=%v", tc.handle, Find(got, drv, tc.handle), tc.mayBe, tc.fence)
		}
	}
	if len(got.Finalizers) == 0 {
		t.Error("a record with pending entries has no finalizer")
	}
}

// A fence that one caller decides not to send after all must not erase the
// entry on whose strength another caller (the attacher's fence pool, with a
// Recorder of its own, or another process) sent one: the driver applied that
// fence, and until its outcome is recorded (or forever, if that caller
// dies) the entry is all that says the volume may be quarantined (S8). Only
// when no caller's fence was sent does the entry go again.
func TestUnsentFenceKeepsAConcurrentFence(t *testing.T) {
	vol := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1", NodeID: "id-1"}
	unsent := func(context.Context, fencingv1alpha1.FencedVolume) error {
		return fmt.Errorf("%w: the node is alive", ErrNotSent)
	}
	tests := []struct {
		name string
		// first runs A's Fence, fresh on an empty record, and, while A's
		// fence is undecided, B's with second as its fence.
		second func(context.Context, fencingv1alpha1.FencedVolume) error
		// bSends: B's fence reaches the driver and B's outcome is still
		// in flight when A records that it did not send.
		bSends   bool
		wantKept bool
	}{
		{name: "the other caller sent: kept", bSends: true, wantKept: true},
		{name: "neither sent: gone", second: unsent, wantKept: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			_, c := newClient(t)
			a, b := NewRecorder(c), NewRecorder(c)
			bSent, releaseB, bDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			second := tc.second
			if tc.bSends {
				second = func(ctx context.Context, _ fencingv1alpha1.FencedVolume) error {
					close(bSent)
					<-releaseB
					return nil
				}
			}
			_, err := a.Fence(ctx, "node-1", "NodeUnreachable", []fencingv1alpha1.FencedVolume{vol}, func(ctx context.Context, v fencingv1alpha1.FencedVolume) error {
				go func() {
					errs, err := b.Fence(ctx, "node-1", "NodeUnreachable", []fencingv1alpha1.FencedVolume{vol}, second)
					if err == nil {
						err = errs[0]
					}
					bDone <- err
				}()
				if tc.bSends {
					<-bSent
				} else if err := <-bDone; !errors.Is(err, ErrNotSent) {
					t.Errorf("B: %v, want ErrNotSent", err)
				}
				return unsent(ctx, v)
			})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Get(ctx, "node-1")
			if err != nil {
				t.Fatal(err)
			}
			if kept := MayBeQuarantined(got, drv, "v1"); kept != tc.wantKept {
				t.Fatalf("after A's unsent fence: may be quarantined = %v, want %v (entry %+v)", kept, tc.wantKept, Find(got, drv, "v1"))
			}
			if !tc.bSends {
				return
			}
			close(releaseB)
			if err := <-bDone; err != nil {
				t.Fatal(err)
			}
			if got, err = c.Get(ctx, "node-1"); err != nil || !IsFenced(got, drv, "v1") {
				t.Fatalf("B's fence is not recorded: %v, entry %+v", err, Find(got, drv, "v1"))
			}
		})
	}
}

// Which unsent fence removes its entry, as a script of record mutations by
// fence calls a, b, c on one volume: only the last call in flight, and only
// while no fence of the quarantine was answered.
func TestFencesInFlight(t *testing.T) {
	vol := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1"}
	unsent := fmt.Errorf("%w: the node is alive", ErrNotSent)
	tests := []struct {
		name    string
		initial *fencingv1alpha1.FencedVolume
		script  []string // "intent X", "unsent X", "fenced X", "failed X", "cleaned"
		want    bool     // may be quarantined at the end
	}{
		{name: "alone, not sent", script: []string{"intent a", "unsent a"}, want: false},
		{name: "alone, sent", script: []string{"intent a", "fenced a"}, want: true},
		{name: "another sent, outcome pending", script: []string{"intent a", "intent b", "unsent a"}, want: true},
		{name: "another sent, outcome pending, joined first", script: []string{"intent b", "intent a", "unsent a"}, want: true},
		{name: "neither sent", script: []string{"intent a", "intent b", "unsent a", "unsent b"}, want: false},
		{name: "neither sent, other order", script: []string{"intent a", "intent b", "unsent b", "unsent a"}, want: false},
		{name: "another answered", script: []string{"intent a", "intent b", "failed b", "unsent a"}, want: true},
		{name: "another fenced", script: []string{"intent a", "intent b", "fenced b", "unsent a"}, want: true},
		{name: "three, one in flight", script: []string{"intent a", "intent b", "intent c", "unsent a", "unsent c"}, want: true},
		{
			name:    "started by a caller that left no trace",
			initial: &fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1", StartedTime: &t0},
			script:  []string{"intent a", "unsent a"}, want: true,
		},
		{
			// a's intent belongs to a quarantine that was cleaned; b
			// started a new one, whose fence a's outcome says nothing of.
			name:   "cleaned and started again since",
			script: []string{"intent a", "cleaned", "intent b", "unsent a"}, want: true,
		},
		{name: "cleaned, then not sent", script: []string{"intent a", "fenced a", "cleaned", "intent b", "unsent b"}, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing)
			if tc.initial != nil {
				req.Status.Volumes = []fencingv1alpha1.FencedVolume{*tc.initial}
			}
			for _, step := range tc.script {
				op, id, _ := strings.Cut(step, " ")
				vols := []fencingv1alpha1.FencedVolume{vol}
				switch op {
				case "intent":
					intent(vols, id)(req, t0)
				case "unsent":
					outcomes(vols, id, []error{unsent})(req, t0)
				case "fenced":
					outcomes(vols, id, []error{nil})(req, t0)
				case "failed":
					outcomes(vols, id, []error{errors.New("timed out")})(req, t0)
				case "cleaned":
					Find(req, drv, "v1").CleanedTime = &t0
				}
			}
			if got := MayBeQuarantined(req, drv, "v1"); got != tc.want {
				t.Errorf("may be quarantined = %v, want %v; entry %+v", got, tc.want, Find(req, drv, "v1"))
			}
		})
	}
}
