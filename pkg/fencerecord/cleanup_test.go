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
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// fencedOn is node-1's request with n volumes of drv fenced.
func fencedOn(n int) *fencingv1alpha1.FencingRequest {
	r := fr(burstNode, fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing)
	r.Finalizers = []string{contract.RecordFinalizer}
	for i := range n {
		r.Status.Volumes = append(r.Status.Volumes, fencingv1alpha1.FencedVolume{
			Driver: drv, VolumeHandle: handle(i), NodeID: "node-1-id", StartedTime: &t0, FencedTime: &t0,
		})
	}
	return r
}

// cleanAll records the cleanup of volumes handle(0..n-1) on node-1 through
// r, one caller each, all at once; caller i fails its cleanup when
// failed(i), and records the error instead. It returns each caller's error.
func cleanAll(ctx context.Context, r *Recorder, n int, failed func(int) bool) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if failed(i) {
				errs[i] = r.RecordCleanupError(ctx, burstNode, drv, handle(i), "NodeUnstageVolume: device busy")
				return
			}
			errs[i] = r.RecordCleaned(ctx, burstNode, drv, handle(i))
		})
	}
	wg.Wait()
	return errs
}

// A node agent's workers cleaning the volumes of a node that came back
// record their cleanups together: a few writes, not one (and its conflicts)
// per volume. Every cleanup and cleanup error is recorded, and another
// writer's change that makes a write stale survives the retry.
func TestRecorderSharesCleanupWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 12
		_, ctx := ktesting.NewTestContext(t)
		dyn, fc := newClient(t, fencedOn(n))
		c := newHookedClient(fc)
		conflicted := false
		c.hook = afterOthers(func(*fencingv1alpha1.FencingRequest) error {
			if conflicted {
				return nil
			}
			// The controller writes the request first: this write is stale.
			conflicted = true
			other := stored(t, dyn)
			other.Status.ErrorReason, other.Status.ErrorMessage = "Other", "written by another writer"
			u, err := fencingv1alpha1.ToUnstructured(c.nextVersion(other))
			if err != nil {
				t.Fatal(err)
			}
			if err := dyn.Tracker().Update(fencingv1alpha1.Resource, u, ""); err != nil {
				t.Fatal(err)
			}
			return apierrors.NewConflict(fencingv1alpha1.Resource.GroupResource(), burstNode, errors.New("the object has been modified"))
		})
		failed := func(i int) bool { return i%5 == 4 }

		errs := cleanAll(ctx, NewRecorder(c), n, failed)

		got := stored(t, dyn)
		for i, err := range errs {
			v := Find(got, drv, handle(i))
			switch {
			case err != nil:
				t.Errorf("%s: %v", handle(i), err)
			case failed(i) && (v.CleanedTime != nil || v.CleanupError == ""):
				t.Errorf("%s: cleanup error not recorded: %+v", handle(i), v)
			case !failed(i) && (v.CleanedTime == nil || v.CleanupError != ""):
				t.Errorf("%s: cleanup not recorded: %+v", handle(i), v)
			}
		}
		if got.Status.ErrorReason != "Other" {
			t.Errorf("the other writer's change was lost: %+v", got.Status)
		}
		t.Logf("%d cleanups: %d status writes, %d conflicts", n, c.statusWrites, c.conflicts)
		// The first write carries what was queued when it started, its
		// retry and one more write the rest.
		if c.statusWrites > 3 {
			t.Errorf("%d cleanups cost %d status writes, want at most 3", n, c.statusWrites)
		}
	})
}

// A write that fails fails every cleanup it carried, none of which is
// recorded (the agent cleans again and records on its retry: write-ahead,
// S8); the cleanups of other writes are not affected.
func TestRecorderCleanupWriteFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 10
		_, ctx := ktesting.NewTestContext(t)
		dyn, fc := newClient(t, fencedOn(n))
		c := newHookedClient(fc)
		var inFailed []string
		c.hook = afterOthers(func(written *fencingv1alpha1.FencingRequest) error {
			before := stored(t, dyn)
			var carried []string
			for _, v := range written.Status.Volumes {
				if v.CleanedTime != nil && !Find(before, drv, v.VolumeHandle).CleanedTime.Equal(v.CleanedTime) {
					carried = append(carried, v.VolumeHandle)
				}
			}
			if inFailed != nil || len(carried) < 2 {
				return nil
			}
			inFailed = carried
			return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		})

		errs := cleanAll(ctx, NewRecorder(c), n, func(int) bool { return false })

		if inFailed == nil {
			t.Fatal("no write carried the cleanups of several callers")
		}
		got := stored(t, dyn)
		for i, err := range errs {
			h := handle(i)
			v := Find(got, drv, h)
			if slices.Contains(inFailed, h) {
				if !apierrors.IsInternalError(err) || v.CleanedTime != nil {
					t.Errorf("%s, in the failed write: err %v, entry %+v; want the write's error, not cleaned", h, err, v)
				}
				continue
			}
			if err != nil || v.CleanedTime == nil {
				t.Errorf("%s, not in the failed write: err %v, entry %+v", h, err, v)
			}
		}
	})
}

// The node agent never creates a request: a cleanup of a request that is
// gone writes nothing, as RecordCleaned alone does.
func TestRecorderCleanupCreatesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		dyn, fc := newClient(t)
		c := newHookedClient(fc)
		errs := cleanAll(ctx, NewRecorder(c), 3, func(i int) bool { return i == 1 })
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s: %v", handle(i), err)
			}
		}
		if got := stored(t, dyn); got != nil {
			t.Errorf("a cleanup created the request: %+v", got)
		}
		creates := 0
		for _, a := range dyn.Actions() {
			if a.GetVerb() == "create" {
				creates++
			}
		}
		if creates != 0 || c.statusWrites != 0 {
			t.Errorf("%d creates, %d status writes; want none", creates, c.statusWrites)
		}
	})
}

// getCounter counts the reads of the request, each answered once every
// other goroutine of the bubble is blocked (as afterOthers): every caller
// that can queue has queued.
type getCounter struct {
	*hookedClient
	gets atomic.Int64
}

func (c *getCounter) Get(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error) {
	synctest.Wait()
	c.gets.Add(1)
	return c.hookedClient.Get(ctx, name)
}

// The node agent's workers each read the request afresh before they clean
// (the cache may not have seen their own last writes): the reads queued
// while a write is under way share the next one's read, and each sees what
// is stored, never a change queued beside it that its write may yet fail to
// store. A read queued after a write returned sees it.
func TestRecorderReadsShareWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 12
		_, ctx := ktesting.NewTestContext(t)
		dyn, fc := newClient(t, fencedOn(n))
		c := &getCounter{hookedClient: newHookedClient(fc)}
		c.hook = afterOthers(func(*fencingv1alpha1.FencingRequest) error {
			// Every change of the first shared write is refused.
			return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		})
		r := NewRecorder(c)

		// Half the callers read, the other half record a cleanup, at once.
		read := make([]*fencingv1alpha1.FencingRequest, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if i%2 == 0 {
					read[i], errs[i] = r.Read(ctx, burstNode)
					return
				}
				errs[i] = r.RecordCleaned(ctx, burstNode, drv, handle(i))
			})
		}
		wg.Wait()

		for i := range n {
			if i%2 == 1 {
				if !apierrors.IsInternalError(errs[i]) {
					t.Errorf("%s: cleanup recorded despite the failed write: %v", handle(i), errs[i])
				}
				continue
			}
			if errs[i] != nil {
				t.Errorf("read %d: %v", i, errs[i])
				continue
			}
			for j := range n {
				if v := Find(read[i], drv, handle(j)); v == nil || v.CleanedTime != nil {
					t.Errorf("read %d saw %s as %+v, which is not stored", i, handle(j), v)
				}
			}
		}
		t.Logf("%d reads beside %d cleanups: %d reads of the API", n/2, n/2, c.gets.Load())
		if got := c.gets.Load(); got > 3 {
			t.Errorf("%d reads and %d cleanups read the request %d times, want at most 3", n/2, n/2, got)
		}

		// Once the write stores a cleanup, a read sees it.
		c.hook = func(*fencingv1alpha1.FencingRequest) error { return nil }
		if err := r.RecordCleaned(ctx, burstNode, drv, handle(1)); err != nil {
			t.Fatal(err)
		}
		after, err := r.Read(ctx, burstNode)
		if err != nil || Find(after, drv, handle(1)).CleanedTime == nil {
			t.Errorf("a read after the write: %v, %+v", err, Find(after, drv, handle(1)))
		}
		if got := stored(t, dyn); Find(got, drv, handle(1)).CleanedTime == nil {
			t.Errorf("cleanup not stored: %+v", Find(got, drv, handle(1)))
		}
	})
}

// A read of a request that is gone is NotFound, and creates nothing.
func TestRecorderReadNotFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		dyn, fc := newClient(t)
		r := NewRecorder(newHookedClient(fc))
		if got, err := r.Read(ctx, burstNode); !apierrors.IsNotFound(err) {
			t.Errorf("Read: %+v, %v; want NotFound", got, err)
		}
		if got := stored(t, dyn); got != nil {
			t.Errorf("a read created the request: %+v", got)
		}
	})
}
