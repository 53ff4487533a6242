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
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// boundStep is one thing that happens to node-1's record in
// TestRecordStaysBounded: a volume fenced (Fence, the fence succeeding), a
// volume cleaned by the node agent, or the request completed by the
// failover's release.
type boundStep struct {
	fence, clean string
	complete     bool
}

// churn fences and cleans n volumes named prefix0, prefix1, ... one after
// the other, as a node whose claims come and go does.
func churn(prefix string, n int) []boundStep {
	var out []boundStep
	for i := range n {
		h := fmt.Sprintf("%s%d", prefix, i)
		out = append(out, boundStep{fence: h}, boundStep{clean: h})
	}
	return out
}

// entries returns n entries named prefix0, prefix1, ..., each made by
// entry(i).
func entries(prefix string, n int, entry func(i int, v *fencingv1alpha1.FencedVolume)) []fencingv1alpha1.FencedVolume {
	out := make([]fencingv1alpha1.FencedVolume, n)
	for i := range out {
		out[i] = fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: fmt.Sprintf("%s%d", prefix, i)}
		entry(i, &out[i])
	}
	return out
}

// notCleaned is an entry that may still be quarantined on the node, of
// each kind in turn: intended (outcome unknown), fenced, refused, fenced
// with a failed cleanup.
func notCleaned(i int, v *fencingv1alpha1.FencedVolume) {
	v.StartedTime = &t0
	switch i % 4 {
	case 1:
		v.FencedTime = &t0
	case 2:
		v.FenceError = "refused"
	case 3:
		v.FencedTime, v.CleanupError = &t0, "device busy"
	}
}

// cleanedAt returns an entry maker of entries fenced and cleaned, entry i
// at t0 plus at(i) seconds.
func cleanedAt(at func(i int) int) func(int, *fencingv1alpha1.FencedVolume) {
	return func(i int, v *fencingv1alpha1.FencedVolume) {
		ct := metav1.NewTime(t0.Add(time.Duration(at(i)) * time.Second))
		v.StartedTime, v.FencedTime, v.CleanedTime = &t0, &t0, &ct
	}
}

// The record of a node must not grow without bound (etcd's object size
// limit would then refuse every write of it, and nothing more could be
// fenced there). A request that starts over forgets the volumes its last
// failure cleaned; within one failure, the record keeps at most
// MaxVolumes entries by forgetting those cleaned longest ago. An entry not
// cleaned is never forgotten (S8): when those alone fill the record, the
// intent is refused with ErrRecordFull, and nothing is sent.
func TestRecordStaysBounded(t *testing.T) {
	full := entries("pending", intentLimit, notCleaned)
	someCleaned := append(entries("pending", intentLimit-10, notCleaned),
		// Cleaned in another order than recorded: c7, c6, ... c0 go last.
		entries("c", 10, cleanedAt(func(i int) int { return 10 - i }))...)
	completed := fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseComplete,
		append(entries("last-failure", 3, cleanedAt(func(i int) int { return i })),
			// A fence recorded as the request completed (a race with the
			// release): it may be quarantined, it stays.
			entries("straggler", 1, notCleaned)...)...)
	completed.Status.NodeFence = &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendPower, ConfirmedTime: &t0}

	tests := []struct {
		name     string
		existing []fencingv1alpha1.FencedVolume
		request  *fencingv1alpha1.FencingRequest // instead of existing
		steps    []boundStep
		// refused is the step whose intent must be refused with
		// ErrRecordFull (-1: none), and every step after it too.
		refused int
		// want are handles the record must hold, gone handles it must
		// not; wantLen is its exact length (-1: at most MaxVolumes).
		want, gone []string
		wantLen    int
	}{
		{
			name:     "claims churning on a node whose request never completes",
			existing: entries("old", intentLimit-1, cleanedAt(func(i int) int { return i })),
			steps:    append([]boundStep{{fence: "kept"}}, churn("churn", 25)...),
			refused:  -1,
			want:     []string{"kept", "churn24", "churn0", "old25", "old" + fmt.Sprint(intentLimit-2)},
			gone:     []string{"old0", "old24"},
			wantLen:  intentLimit,
		},
		{
			name:    "starting over forgets what the last failure cleaned, and only that",
			request: completed,
			steps:   []boundStep{{fence: "new"}},
			refused: -1,
			want:    []string{"straggler0", "new"},
			gone:    []string{"last-failure0", "last-failure1", "last-failure2"},
			wantLen: 2,
		},
		{
			name:     "churn across failures: each failure starts from what is not cleaned",
			existing: nil,
			steps: slices.Concat(churn("first", 5), []boundStep{{complete: true}},
				churn("second", 5), []boundStep{{complete: true}}, []boundStep{{fence: "third"}}),
			refused: -1,
			want:    []string{"third"},
			gone:    []string{"first0", "first4", "second0", "second4"},
			wantLen: 1,
		},
		{
			name:     "at the bound, the entries cleaned longest ago make room",
			existing: someCleaned,
			steps:    []boundStep{{fence: "new0"}, {fence: "new1"}, {fence: "new2"}},
			refused:  -1,
			want:     []string{"new0", "new1", "new2", "pending0", "pending1", "pending2", "pending3", "c6", "c0"},
			gone:     []string{"c9", "c8", "c7"},
			wantLen:  intentLimit,
		},
		{
			name:     "full of entries not cleaned: the intent is refused, none is forgotten",
			existing: full,
			steps:    []boundStep{{fence: "new"}, {fence: "new"}},
			refused:  0,
			want:     []string{"pending0", "pending2", "pending3", fmt.Sprintf("pending%d", intentLimit-1)},
			gone:     []string{"new"},
			wantLen:  intentLimit,
		},
		{
			name:     "full, then one cleaned: it makes room for one more",
			existing: full,
			steps:    []boundStep{{clean: "pending1"}, {fence: "new"}, {fence: "newer"}},
			refused:  2,
			want:     []string{"new", "pending0", "pending2"},
			gone:     []string{"pending1", "newer"},
			wantLen:  intentLimit,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			existing := tc.request
			if existing == nil && tc.existing != nil {
				existing = fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing, tc.existing...)
			}
			var objs []*fencingv1alpha1.FencingRequest
			if existing != nil {
				objs = append(objs, existing)
			}
			dyn, c := newClient(t, objs...)
			maxLen := 0
			for i, s := range tc.steps {
				switch {
				case s.fence != "":
					sent := false
					_, err := Fence(ctx, c, "node-1", "node-not-ready", []fencingv1alpha1.FencedVolume{{Driver: drv, VolumeHandle: s.fence}},
						func(context.Context, fencingv1alpha1.FencedVolume) error {
							sent = true
							return nil
						})
					refused := tc.refused >= 0 && i >= tc.refused
					switch {
					case refused && (!errors.Is(err, ErrRecordFull) || sent):
						t.Fatalf("step %d, fence %s: err %v, fence sent %v; want ErrRecordFull and nothing sent", i, s.fence, err, sent)
					case refused && !strings.Contains(err.Error(), "node-1") || refused && !strings.Contains(err.Error(), "not cleaned up"):
						t.Errorf("step %d: the error does not say which record is full and why: %v", i, err)
					case !refused && err != nil:
						t.Fatalf("step %d, fence %s: %v", i, s.fence, err)
					}
				case s.clean != "":
					if err := RecordCleaned(ctx, c, "node-1", drv, s.clean); err != nil {
						t.Fatalf("step %d, clean %s: %v", i, s.clean, err)
					}
				case s.complete:
					complete(t, c, "node-1")
				}
				if got := stored(t, dyn); got != nil {
					maxLen = max(maxLen, len(got.Status.Volumes))
				}
			}
			got := stored(t, dyn)
			if got == nil {
				t.Fatal("no record")
			}
			for _, h := range tc.want {
				if Find(got, drv, h) == nil {
					t.Errorf("%s was forgotten", h)
				}
			}
			for _, h := range tc.gone {
				if e := Find(got, drv, h); e != nil {
					t.Errorf("%s is still recorded: %+v", h, e)
				}
			}
			if maxLen > MaxVolumes {
				t.Errorf("the record held %d entries, more than MaxVolumes (%d)", maxLen, MaxVolumes)
			}
			if tc.wantLen >= 0 && len(got.Status.Volumes) != tc.wantLen {
				t.Errorf("the record holds %d entries, want %d", len(got.Status.Volumes), tc.wantLen)
			}
			// Whatever was not cleaned before is still there (S8).
			var before []fencingv1alpha1.FencedVolume
			if existing != nil {
				before = existing.Status.Volumes
			}
			for _, v := range before {
				if v.CleanedTime == nil && !slices.Contains(cleanedBySteps(tc.steps), v.VolumeHandle) && !MayBeQuarantined(got, v.Driver, v.VolumeHandle) {
					t.Errorf("%s, not cleaned, was forgotten", v.VolumeHandle)
				}
			}
		})
	}
}

// cleanedBySteps returns the handles the steps clean.
func cleanedBySteps(steps []boundStep) []string {
	var out []string
	for _, s := range steps {
		if s.clean != "" {
			out = append(out, s.clean)
		}
	}
	return out
}

// complete does what the failover's release does to the request once the
// node is back and every volume cleaned.
func complete(t *testing.T, c *fencingv1alpha1.Client, node string) {
	t.Helper()
	ctx := context.Background()
	cur, err := c.Get(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if Pending(cur) {
		t.Fatalf("completing a request with entries not cleaned: %+v", cur.Status.Volumes)
	}
	now := metav1.Now()
	cur.Status.Phase, cur.Status.CompletionTime = fencingv1alpha1.PhaseComplete, &now
	if _, err := c.UpdateStatus(ctx, cur); err != nil {
		t.Fatal(err)
	}
}

// The last places of the record are kept for outcomes: a fence whose entry
// was cleaned and forgotten while the fence was in flight (the node agent
// ran meanwhile, then other intents filled the record) is recorded all the
// same when the driver confirms it, though intents are refused by then.
func TestOutcomeRecordedBeyondTheIntentLimit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dyn, c := newClient(t, fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing))
	vol := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "in-flight"}
	errs, err := Fence(ctx, c, "node-1", "node-not-ready", []fencingv1alpha1.FencedVolume{vol}, func(ctx context.Context, v fencingv1alpha1.FencedVolume) error {
		if err := RecordCleaned(ctx, c, "node-1", drv, v.VolumeHandle); err != nil {
			return err
		}
		if err := RecordIntent(ctx, c, "node-1", "node-not-ready", entries("other", intentLimit, func(int, *fencingv1alpha1.FencedVolume) {})...); err != nil {
			return err
		}
		if Find(stored(t, dyn), drv, v.VolumeHandle) != nil {
			t.Error("the cleaned entry was not forgotten to make room: this test tests nothing")
		}
		if err := RecordIntent(ctx, c, "node-1", "node-not-ready", fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "one-more"}); !errors.Is(err, ErrRecordFull) {
			t.Errorf("an intent beyond the intent limit: %v, want ErrRecordFull", err)
		}
		return nil
	})
	if err != nil || errs[0] != nil {
		t.Fatalf("Fence: %v %v", err, errs)
	}
	got := stored(t, dyn)
	if !IsFenced(got, drv, "in-flight") {
		t.Errorf("the confirmed fence is not recorded: %+v", Find(got, drv, "in-flight"))
	}
	if n := len(got.Status.Volumes); n != intentLimit+1 || n > MaxVolumes {
		t.Errorf("%d entries, want %d (at most MaxVolumes, %d)", n, intentLimit+1, MaxVolumes)
	}
}

// One write carries the changes of several callers; one refused for lack
// of room does not take the others down with it: at the bound, the outcome
// of a fence in flight is recorded while the intent beside it is refused.
func TestRecorderRefusesOnlyTheChangeThatDoesNotFit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dyn, c := newClient(t, fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing, entries("pending", intentLimit, notCleaned)...))
	inFlight := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "pending0"} // intended, outcome unknown
	newVol := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "new"}
	batch := []*change{
		{ctx: ctx, reason: "r", limit: intentLimit, mutate: intent([]fencingv1alpha1.FencedVolume{newVol}, "a")},
		{ctx: ctx, reason: "r", limit: MaxVolumes, mutate: outcomes([]fencingv1alpha1.FencedVolume{inFlight}, "b", []error{nil})},
	}
	NewRecorder(c).commit("node-1", batch)
	if !errors.Is(batch[0].err, ErrRecordFull) {
		t.Errorf("the intent that does not fit: %v, want ErrRecordFull", batch[0].err)
	}
	if batch[1].err != nil {
		t.Errorf("the outcome beside it: %v", batch[1].err)
	}
	got := stored(t, dyn)
	if !IsFenced(got, drv, "pending0") || Find(got, drv, "new") != nil || len(got.Status.Volumes) != intentLimit {
		t.Errorf("pending0 %+v, new %+v, %d entries; want pending0 fenced, no new, %d entries", Find(got, drv, "pending0"), Find(got, drv, "new"), len(got.Status.Volumes), intentLimit)
	}
}

// A driver's error can be long (a wrapped chain, a dump): each entry keeps
// at most MaxMessageLength of it, cut at a character, so that MaxVolumes
// entries stay far below etcd's object size limit. What it begins with,
// which says what failed, is kept.
func TestMessagesAreBounded(t *testing.T) {
	long := "rpc error: code = FailedPrecondition desc = " + strings.Repeat("é", 2*MaxMessageLength)
	check := func(t *testing.T, field, got string) {
		t.Helper()
		if len([]rune(got)) > MaxMessageLength || len(got) > MaxMessageLength || !strings.HasPrefix(got, long[:60]) || !utf8.ValidString(got) {
			t.Errorf("%s: %d bytes, %d characters, valid %v, begins %.60q; want at most %d bytes, the start kept", field, len(got), len([]rune(got)), utf8.ValidString(got), got, MaxMessageLength)
		}
	}
	vol := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1"}
	t.Run("fence error", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		dyn, c := newClient(t)
		errs, err := Fence(ctx, c, "node-1", "node-not-ready", []fencingv1alpha1.FencedVolume{vol}, func(context.Context, fencingv1alpha1.FencedVolume) error {
			return errors.New(long)
		})
		if err != nil || errs[0] == nil || errs[0].Error() != long {
			t.Fatalf("Fence: %v, %v; want the whole error returned to the caller", err, errs)
		}
		check(t, "fenceError", Find(stored(t, dyn), drv, "v1").FenceError)
	})
	t.Run("cleanup error", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		dyn, c := newClient(t, fr("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced,
			fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "v1", FencedTime: &t0}))
		if err := RecordCleanupError(ctx, c, "node-1", drv, "v1", long); err != nil {
			t.Fatal(err)
		}
		check(t, "cleanupError", Find(stored(t, dyn), drv, "v1").CleanupError)
		// The same error again is no change: no write.
		writes := 0
		dyn.PrependReactor("update", "fencingrequests", func(clienttesting.Action) (bool, runtime.Object, error) {
			writes++
			return false, nil, nil
		})
		if err := RecordCleanupError(ctx, c, "node-1", drv, "v1", long); err != nil || writes != 0 {
			t.Errorf("the same cleanup error again: %v, %d writes; want none", err, writes)
		}
	})
}
