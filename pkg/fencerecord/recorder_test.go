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
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// The tests of the Recorder run in a synctest bubble and write through a
// hookedClient: before each status write, synctest.Wait lets every caller
// that can queue a change do so, so that which changes a write carries is
// decided by the Recorder, not by the scheduler. The callers read the
// stored request from the fake's tracker.

const burstNode = "node-1"

func handle(i int) string { return fmt.Sprintf("v%02d", i) }

// stored is node-1's request as the "apiserver" has it, or nil.
func stored(t *testing.T, dyn *dynamicfake.FakeDynamicClient) *fencingv1alpha1.FencingRequest {
	t.Helper()
	o, err := dyn.Tracker().Get(fencingv1alpha1.Resource, "", burstNode)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	fr, err := fencingv1alpha1.FromUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

// hookedClient is the FencingRequest client of these tests. Each status
// write first asks hook for its answer (nil: write), one write at a time.
// The turns are taken outside the fake client, whose reactors run under
// its lock, so that a write waiting in hook blocks no other caller of the
// fake, and on a channel, so that a writer waiting for its turn is durably
// blocked for synctest. As the apiserver's (not the fake's), writes of a
// stale copy fail with a conflict (resource versions are kept here), and a
// write of the object leaves its status alone, a write of its status the
// rest.
type hookedClient struct {
	Client
	turn chan struct{}
	hook func(written *fencingv1alpha1.FencingRequest) error
	rv   int // the last resource version given out
	// statusWrites and conflicts count the status writes tried and those
	// answered with a conflict.
	statusWrites, conflicts int
}

func newHookedClient(c Client) *hookedClient {
	return &hookedClient{Client: c, turn: make(chan struct{}, 1), hook: func(*fencingv1alpha1.FencingRequest) error { return nil }}
}

func (c *hookedClient) Create(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error) {
	c.turn <- struct{}{}
	defer func() { <-c.turn }()
	return c.Client.Create(ctx, c.nextVersion(fr))
}

func (c *hookedClient) Update(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error) {
	c.turn <- struct{}{}
	defer func() { <-c.turn }()
	return c.write(ctx, fr, func(fr, cur *fencingv1alpha1.FencingRequest) { fr.Status = cur.Status }, c.Client.Update)
}

func (c *hookedClient) UpdateStatus(ctx context.Context, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error) {
	c.turn <- struct{}{}
	defer func() { <-c.turn }()
	c.statusWrites++
	err := c.hook(fr)
	var out *fencingv1alpha1.FencingRequest
	if err == nil {
		out, err = c.write(ctx, fr, func(fr, cur *fencingv1alpha1.FencingRequest) {
			rv := fr.ResourceVersion
			fr.ObjectMeta, fr.Spec = *cur.ObjectMeta.DeepCopy(), cur.Spec
			fr.ResourceVersion = rv
		}, c.Client.UpdateStatus)
	}
	if apierrors.IsConflict(err) {
		c.conflicts++
	}
	return out, err
}

// write writes fr with do if fr is of the stored version, keeping what the
// stored version cur has that this kind of write does not change (the
// status for a write of the object, the rest for one of its status). Its
// caller has the turn.
func (c *hookedClient) write(ctx context.Context, fr *fencingv1alpha1.FencingRequest, keep func(fr, cur *fencingv1alpha1.FencingRequest), do func(context.Context, *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error)) (*fencingv1alpha1.FencingRequest, error) {
	cur, err := c.Client.Get(ctx, fr.Name)
	if err != nil {
		return nil, err
	}
	if cur.ResourceVersion != fr.ResourceVersion {
		return nil, apierrors.NewConflict(fencingv1alpha1.Resource.GroupResource(), fr.Name, errors.New("the object has been modified"))
	}
	fr = c.nextVersion(fr)
	keep(fr, cur)
	return do(ctx, fr)
}

// nextVersion returns a copy of fr with a new resource version. Its caller
// has the turn (the hook has).
func (c *hookedClient) nextVersion(fr *fencingv1alpha1.FencingRequest) *fencingv1alpha1.FencingRequest {
	c.rv++
	fr = fr.DeepCopy()
	fr.ResourceVersion = strconv.Itoa(c.rv)
	return fr
}

// afterOthers is a hook that answers once every other goroutine of the
// bubble is blocked: every caller that can queue a change has queued it.
func afterOthers(hook func(written *fencingv1alpha1.FencingRequest) error) func(*fencingv1alpha1.FencingRequest) error {
	return func(written *fencingv1alpha1.FencingRequest) error {
		synctest.Wait()
		return hook(written)
	}
}

// carried are the volumes of this test's driver whose intent (intents) or
// outcome (outcomes) written records and stored, the request before the
// write, does not: those of the callers whose changes the write carries.
func carried(stored, written *fencingv1alpha1.FencingRequest) (intents, outcomes []string) {
	for _, v := range written.Status.Volumes {
		switch {
		case v.Driver != drv:
		case !MayBeQuarantined(stored, drv, v.VolumeHandle):
			intents = append(intents, v.VolumeHandle)
		case v.FencedTime != nil && !IsFenced(stored, drv, v.VolumeHandle):
			outcomes = append(outcomes, v.VolumeHandle)
		}
	}
	return intents, outcomes
}

// caller is what one Fence caller saw.
type caller struct {
	err      error // Fence's own error: its intent was not recorded
	fenceErr error // its volume's error
	sent     bool  // its fence was "sent"
}

// fenceAll runs one Fence caller per context at once (fenceOne, caller i
// with ctxs[i]) and returns what each saw.
func fenceAll(t *testing.T, dyn *dynamicfake.FakeDynamicClient, r *Recorder, ctxs []context.Context) []caller {
	out := make([]caller, len(ctxs))
	var wg sync.WaitGroup
	for i, ctx := range ctxs {
		wg.Go(func() { out[i] = fenceOne(t, ctx, dyn, r, i) })
	}
	wg.Wait()
	return out
}

// fenceOne fences volume handle(i) on node-1 with r and returns what the
// caller saw. Its fence checks that its intent is stored before it is sent.
func fenceOne(t *testing.T, ctx context.Context, dyn *dynamicfake.FakeDynamicClient, r *Recorder, i int) caller {
	var out caller
	vol := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: handle(i), NodeID: "node-1-id"}
	errs, err := r.Fence(ctx, burstNode, "node-not-ready", []fencingv1alpha1.FencedVolume{vol}, func(_ context.Context, v fencingv1alpha1.FencedVolume) error {
		out.sent = true
		if !MayBeQuarantined(stored(t, dyn), drv, v.VolumeHandle) {
			t.Errorf("%s: fence sent before its intent was recorded (S8)", v.VolumeHandle)
		}
		return nil
	})
	out.err = err
	if err == nil {
		out.fenceErr = errs[0]
	}
	return out
}

func contexts(ctx context.Context, n int) []context.Context {
	out := make([]context.Context, n)
	for i := range out {
		out[i] = ctx
	}
	return out
}

// A burst of fences on one node, as the attacher's workers make when a
// node with many volumes fails: every intent is stored before its fence is
// sent, every outcome is recorded, another writer's entries survive the
// conflicts it causes, and the burst costs a few writes, not two per fence.
func TestRecorderSharesWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 64
		_, ctx := ktesting.NewTestContext(t)
		dyn, fc := newClient(t)
		c := newHookedClient(fc)
		others := 0
		c.hook = afterOthers(func(*fencingv1alpha1.FencingRequest) error {
			if c.statusWrites%3 != 1 {
				return nil
			}
			// Another writer (the node agent, another driver's
			// attacher) gets there first: this write is stale.
			others++
			other := stored(t, dyn)
			other.Status.Volumes = append(other.Status.Volumes, fencingv1alpha1.FencedVolume{Driver: "other.csi", VolumeHandle: handle(others), FencedTime: &t0})
			u, err := fencingv1alpha1.ToUnstructured(c.nextVersion(other))
			if err != nil {
				t.Fatal(err)
			}
			if err := dyn.Tracker().Update(fencingv1alpha1.Resource, u, ""); err != nil {
				t.Fatal(err)
			}
			return apierrors.NewConflict(fencingv1alpha1.Resource.GroupResource(), burstNode, errors.New("the object has been modified"))
		})

		got := fenceAll(t, dyn, NewRecorder(c), contexts(ctx, n))

		for i, g := range got {
			if g.err != nil || g.fenceErr != nil || !g.sent {
				t.Errorf("%s: %+v", handle(i), g)
			}
		}
		fr := stored(t, dyn)
		for i := range n {
			if !IsFenced(fr, drv, handle(i)) {
				t.Errorf("%s not recorded fenced: %+v", handle(i), Find(fr, drv, handle(i)))
			}
		}
		for i := 1; i <= others; i++ {
			if !IsFenced(fr, "other.csi", handle(i)) {
				t.Errorf("the other writer's entry %s was lost", handle(i))
			}
		}
		t.Logf("%d fences: %d status writes, %d conflicts (%d with the other writer)", n, c.statusWrites, c.conflicts, others)
		if others == 0 || c.statusWrites > n/4 {
			t.Errorf("%d fences cost %d status writes, want at most %d (and some conflicts with the other writer: %d)", n, c.statusWrites, n/4, others)
		}
	})
}

// A write that fails fails every caller whose change it carried: none of
// those whose intent it carried sends its fence (write-ahead), those whose
// outcome it carried learn that their fence is not recorded, and the
// callers of other writes are not affected.
func TestRecorderWriteFailureReachesEveryCallerOfTheWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 16
		_, ctx := ktesting.NewTestContext(t)
		dyn, fc := newClient(t)
		var failedIntents, failedOutcomes []string
		c := newHookedClient(fc)
		c.hook = afterOthers(func(written *fencingv1alpha1.FencingRequest) error {
			intents, outcomes := carried(stored(t, dyn), written)
			if failedIntents != nil || len(intents) < 2 {
				return nil
			}
			failedIntents, failedOutcomes = intents, outcomes
			return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		})

		got := fenceAll(t, dyn, NewRecorder(c), contexts(ctx, n))

		if failedIntents == nil {
			t.Fatal("no write carried the intents of several callers")
		}
		fr := stored(t, dyn)
		for i, g := range got {
			h := handle(i)
			switch {
			case slices.Contains(failedIntents, h):
				if !apierrors.IsInternalError(g.err) || g.sent || MayBeQuarantined(fr, drv, h) {
					t.Errorf("%s, its intent in the failed write: err %v, fence sent %v, entry %+v; want the write's error, no fence, no entry", h, g.err, g.sent, Find(fr, drv, h))
				}
			case slices.Contains(failedOutcomes, h):
				if g.err != nil || !apierrors.IsInternalError(g.fenceErr) || !g.sent || !MayBeQuarantined(fr, drv, h) || IsFenced(fr, drv, h) {
					t.Errorf("%s, its outcome in the failed write: %+v, entry %+v; want the write's error as its fence's, the intent kept", h, g, Find(fr, drv, h))
				}
			case g.err != nil || g.fenceErr != nil || !g.sent || !IsFenced(fr, drv, h):
				t.Errorf("%s, not in the failed write: %+v, entry %+v", h, g, Find(fr, drv, h))
			}
		}
	})
}

// A caller that gives up while its change waits for a write leaves at
// once, its change withdrawn and its fence never sent; the others go on.
func TestRecorderCallerGivesUpWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, gaveUp = 8, 3
		_, ctx := ktesting.NewTestContext(t)
		dyn, fc := newClient(t)
		// The first status write waits at the gate while the others queue.
		gate := make(chan struct{})
		first := true
		c := newHookedClient(fc)
		c.hook = func(*fencingv1alpha1.FencingRequest) error {
			if first {
				first = false
				<-gate
			}
			return nil
		}
		r := NewRecorder(c)
		got := make([]caller, n)
		var wg sync.WaitGroup
		start := func(i int, ctx context.Context) { wg.Go(func() { got[i] = fenceOne(t, ctx, dyn, r, i) }) }
		start(0, ctx)
		synctest.Wait() // caller 0's intent is being written
		var cancel context.CancelFunc
		for i := 1; i < n; i++ {
			ctx := ctx
			if i == gaveUp {
				ctx, cancel = context.WithCancel(ctx)
			}
			start(i, ctx)
		}
		synctest.Wait() // the others' intents are queued
		cancel()
		synctest.Wait() // the one that gave up has left
		close(gate)
		wg.Wait()

		fr := stored(t, dyn)
		for i, g := range got {
			h := handle(i)
			if i == gaveUp {
				if !errors.Is(g.err, context.Canceled) || g.sent || Find(fr, drv, h) != nil {
					t.Errorf("%s gave up: err %v, fence sent %v, entry %+v; want context.Canceled, no fence, no entry", h, g.err, g.sent, Find(fr, drv, h))
				}
				continue
			}
			if g.err != nil || g.fenceErr != nil || !g.sent || !IsFenced(fr, drv, h) {
				t.Errorf("%s: %+v, entry %+v", h, g, Find(fr, drv, h))
			}
		}
	})
}

// A write whose callers all gave up stops: no retry is left running for
// nobody, and no fence is sent.
func TestRecorderWriteStopsWhenEveryCallerGaveUp(t *testing.T) {
	var c *hookedClient
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		dyn, fc := newClient(t, fr(burstNode, fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing))
		c = newHookedClient(fc)
		c.hook = afterOthers(func(*fencingv1alpha1.FencingRequest) error {
			cancel()
			return apierrors.NewConflict(fencingv1alpha1.Resource.GroupResource(), burstNode, errors.New("the object has been modified"))
		})

		got := fenceAll(t, dyn, NewRecorder(c), []context.Context{ctx})

		if !errors.Is(got[0].err, context.Canceled) || got[0].sent {
			t.Errorf("err %v, fence sent %v; want context.Canceled and no fence", got[0].err, got[0].sent)
		}
	})
	// synctest.Test returned: every goroutine of the bubble, the writer
	// too, has ended. (A writer still sleeping its backoff after the
	// caller left fails the bubble instead: its clock no longer moves.)
	if c.statusWrites != 1 {
		t.Errorf("%d status writes, want 1: the write went on with nobody waiting for it", c.statusWrites)
	}
}

// The fences of one call run concurrently: a failed node's volumes do not
// wait for each other's RPCs. Each fence here waits until every one has
// started, which one after another would never be.
func TestRecorderFencesOfOneCallRunAtOnce(t *testing.T) {
	const n = FenceConcurrency
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dyn, c := newClient(t)
	vols := make([]fencingv1alpha1.FencedVolume, n)
	for i := range vols {
		vols[i] = fencingv1alpha1.FencedVolume{Driver: "d.csi", VolumeHandle: handle(i), NodeID: "n"}
	}
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	errs, err := NewRecorder(c).Fence(ctx, "node-1", "NodeUnreachable", vols, func(ctx context.Context, _ fencingv1alpha1.FencedVolume) error {
		started.Done()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Errorf("%s: %v", vols[i].VolumeHandle, e)
		}
	}
	fr := stored(t, dyn)
	for _, v := range vols {
		if !IsFenced(fr, v.Driver, v.VolumeHandle) {
			t.Errorf("%s not recorded fenced", v.VolumeHandle)
		}
	}
}

// A fence that ctx's end left uncalled is not sent, and says why: the
// deadline, not a cancel nobody made.
func TestRecorderUncalledFencesSayWhy(t *testing.T) {
	const n = FenceConcurrency + 1
	_, ctx := ktesting.NewTestContext(t)
	_, c := newClient(t)
	vols := make([]fencingv1alpha1.FencedVolume, n)
	for i := range vols {
		vols[i] = fencingv1alpha1.FencedVolume{Driver: "d.csi", VolumeHandle: handle(i), NodeID: "n"}
	}
	// Cancelled, with a cause, once every worker is busy: the last fence
	// is never called, and says why.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopped := errors.New("the failover stopped")
	var calls atomic.Int32
	errs, err := NewRecorder(c).Fence(ctx, "node-1", "NodeUnreachable", vols, func(ctx context.Context, _ fencingv1alpha1.FencedVolume) error {
		if calls.Add(1) == FenceConcurrency {
			cancel(stopped)
		}
		<-ctx.Done() // every worker busy until then
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != FenceConcurrency {
		t.Fatalf("%d fences called, want %d", got, FenceConcurrency)
	}
	last := errs[n-1]
	if !errors.Is(last, ErrNotSent) || !errors.Is(last, stopped) {
		t.Errorf("the uncalled fence: %v; want not sent, for the cause of the cancel", last)
	}
}
