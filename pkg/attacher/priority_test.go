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

package attacher

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	testingclock "k8s.io/utils/clock/testing"
)

// The objects of the priority tests: va1 of vol-1 detached from node-1
// (Ready: a plain detach), and what else the case adds.
func priorityObjs(more ...runtime.Object) []runtime.Object {
	return append([]runtime.Object{node("node-1"), node("node-2"), csiNode("node-1"), csiNode("node-2"),
		pv("pv1", "vol-1"), pv("pv2", "vol-2"), detachingVA("va1", "pv1", "node-1")}, more...)
}

func attachError(v *storagev1.VolumeAttachment) {
	v.Status.AttachError = &storagev1.VolumeError{Message: "refused"}
}

// syncItem does what external-attacher's worker does with the next item of
// queue (syncVA) and returns it.
func (e *env) syncItem(h *Handler, queue workqueue.TypedRateLimitingInterface[string]) string {
	e.t.Helper()
	name, quit := queue.Get()
	if quit {
		return ""
	}
	defer queue.Done(name)
	e.syncVA(h, name)
	return name
}

// syncVA syncs the VolumeAttachment name through h, then does what the
// informer would: the cache gets the object as the sync left it.
func (e *env) syncVA(h *Handler, name string) *storagev1.VolumeAttachment {
	e.t.Helper()
	va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Error(err)
		return nil
	}
	h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va)
	return e.refreshCache(name)
}

// refreshCache puts the API's VolumeAttachment name in the cache and
// returns it.
func (e *env) refreshCache(name string) *storagev1.VolumeAttachment {
	e.t.Helper()
	va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Error(err)
		return nil
	}
	if err := e.factory.Storage().V1().VolumeAttachments().Informer().GetIndexer().Update(va); err != nil {
		e.t.Error(err)
	}
	return va
}

// drain returns what queue holds now, in order.
func drain(queue workqueue.TypedRateLimitingInterface[string]) []string {
	var got []string
	for queue.Len() > 0 {
		item, _ := queue.Get()
		got = append(got, item)
		queue.Done(item)
	}
	return got
}

func (h *Handler) bookkeeping() (attaching, deferred int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.attaching), len(h.deferred)
}

// A detach's sync gives way to an attach of this driver that waits for a
// worker: it goes back in the queue, behind the attach, with no API request,
// no call to the driver and no backoff. An attach that failed (in backoff),
// is done, is another driver's or is itself being deleted does not wait.
func TestDetachGivesWayToWaitingAttaches(t *testing.T) {
	other := func(v *storagev1.VolumeAttachment) { v.Spec.Attacher = "other" }
	tests := []struct {
		name       string
		vb         *storagev1.VolumeAttachment // queued after va1; nil: none
		givesWay   bool
		wantQueued []string
	}{
		{name: "attach waiting", vb: va("vb", "pv2", "node-2"), givesWay: true, wantQueued: []string{"vb", "va1"}},
		{name: "attach failed", vb: va("vb", "pv2", "node-2", attachError), wantQueued: []string{"vb"}},
		{name: "attached", vb: attachedVA("vb", "pv2", "node-2"), wantQueued: []string{"vb"}},
		{name: "another driver's attach", vb: va("vb", "pv2", "node-2", other), wantQueued: []string{"vb"}},
		{name: "deleted before attached", vb: va("vb", "pv2", "node-2", deleted), wantQueued: []string{"vb"}},
		{name: "no attach"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var more []runtime.Object
			if tc.vb != nil {
				more = append(more, tc.vb)
			}
			e := newEnv(t, envConfig{objects: priorityObjs(more...)})
			h, queue := e.handler()
			queue.Add("va1")
			if tc.vb != nil {
				queue.Add("vb")
			}
			item, _ := queue.Get()
			if item != "va1" {
				t.Fatalf("took %q, want va1", item)
			}
			va1, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			e.client.ClearActions()
			h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va1)
			queue.Done(item)
			sent, calls := e.sent(), actions(e.client.Actions())
			if tc.givesWay {
				if len(sent) != 0 || len(calls) != 0 || queue.NumRequeues("va1") != 0 {
					t.Errorf("a detach giving way sent %q, made API calls %q and %d requeues, want none", sent, calls, queue.NumRequeues("va1"))
				}
			} else if !slices.Equal(sent, []string{"unpublish vol-1 node-1-id"}) {
				t.Errorf("the driver received %q, want the detach's unpublish", sent)
			}
			if got := drain(queue); !slices.Equal(got, tc.wantQueued) {
				t.Errorf("queued %q after the sync, want %q", got, tc.wantQueued)
			}
		})
	}
}

// An attach being synced holds a worker already: a detach does not give way
// to it.
func TestDetachDoesNotGiveWayToAnAttachUnderWay(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	e := newEnv(t, envConfig{objects: priorityObjs(va("vb", "pv2", "node-2")), timeout: time.Minute,
		publish: func(ctx context.Context, _ *csi.ControllerPublishVolumeRequest) {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}})
	h, queue := e.handler()
	queue.Add("vb")
	queue.Add("va1")
	attached := make(chan struct{})
	go func() {
		defer close(attached)
		e.syncItem(h, queue)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the attach of vb did not reach the driver in 10s")
	}
	if item := e.syncItem(h, queue); item != "va1" {
		t.Fatalf("synced %q, want va1", item)
	}
	if sent := e.sent(); !slices.Contains(sent, "unpublish vol-1 node-1-id") {
		t.Errorf("the driver received %q during the attach, want the detach's unpublish", sent)
	}
	close(release)
	select {
	case <-attached:
	case <-time.After(10 * time.Second):
		t.Fatal("the attach of vb is not over 10s after its publish was released")
	}
	if attaching, deferred := h.bookkeeping(); attaching != 0 || deferred != 0 {
		t.Errorf("left %d attaches under way and %d detaches giving way, want none", attaching, deferred)
	}
}

// recordingQueue records how the Handler puts items back.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	mu    sync.Mutex
	calls []string
}

func (q *recordingQueue) Add(item string) {
	q.record("Add " + item)
	q.TypedRateLimitingInterface.Add(item)
}

func (q *recordingQueue) AddAfter(item string, d time.Duration) {
	q.record(fmt.Sprintf("AddAfter %s %v", item, d))
	q.TypedRateLimitingInterface.AddAfter(item, d)
}

func (q *recordingQueue) record(s string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls = append(q.calls, s)
}

func (q *recordingQueue) took() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.calls
	q.calls = nil
	return out
}

// A detach gives way for at most maxDetachDeferral from its first time,
// then runs, even if an attach still looks waiting (here one the cache
// shows unattached for ever, as it might lag); the times after the first it
// comes back after detachRetryDelay, not at once, so that it does not spin.
func TestDetachGivesWayForABoundedTime(t *testing.T) {
	e := newEnv(t, envConfig{objects: priorityObjs(va("vb", "pv2", "node-2"))})
	h, queue := e.handler()
	clk := testingclock.NewFakePassiveClock(time.Now())
	h.clock = clk
	rq := &recordingQueue{TypedRateLimitingInterface: queue}
	h.vaQueue = rq
	va1, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va1)
	if got := rq.took(); !slices.Equal(got, []string{"Add va1"}) {
		t.Errorf("first time: %q, want Add va1", got)
	}
	if item := next(t, queue, 10*time.Second); item != "va1" {
		t.Fatalf("queued %q, want va1", item)
	}
	clk.SetTime(clk.Now().Add(maxDetachDeferral - time.Millisecond))
	h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va1)
	if got, want := rq.took(), []string{fmt.Sprintf("AddAfter va1 %v", detachRetryDelay)}; !slices.Equal(got, want) {
		t.Errorf("again within the bound: %q, want %q", got, want)
	}
	if item := next(t, queue, 10*time.Second); item != "va1" {
		t.Fatalf("queued %q, want va1", item)
	}
	if sent := e.sent(); len(sent) != 0 {
		t.Fatalf("the driver received %q within the bound, want nothing", sent)
	}

	clk.SetTime(clk.Now().Add(time.Millisecond))
	h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va1)
	if got := rq.took(); len(got) != 0 {
		t.Errorf("past the bound: %q, want the detach synced, not queued", got)
	}
	if sent := e.sent(); !slices.Equal(sent, []string{"unpublish vol-1 node-1-id"}) {
		t.Errorf("past the bound the driver received %q, want the detach's unpublish", sent)
	}
	if _, deferred := h.bookkeeping(); deferred != 0 {
		t.Errorf("%d detaches left giving way once the detach ran, want none", deferred)
	}
}

// A VolumeAttachment deleted while its detach gives way is forgotten.
func TestDeletedDetachIsForgotten(t *testing.T) {
	e := newEnv(t, envConfig{objects: priorityObjs(va("vb", "pv2", "node-2"))})
	h, _ := e.handler()
	va1, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va1)
	if _, deferred := h.bookkeeping(); deferred != 1 {
		t.Fatalf("%d detaches giving way, want va1", deferred)
	}
	h.vaDeleted(va1)
	if _, deferred := h.bookkeeping(); deferred != 0 {
		t.Errorf("%d detaches giving way after va1 was deleted, want none", deferred)
	}
}

// Several workers on one queue holding detaches, then attaches, as in a fence
// burst with attaches arriving: no detach reaches the driver before every
// attach has been taken by a worker, every attach and detach ends, and the
// Handler keeps nothing of them (run with -race).
func TestAttachesGoFirstWithSeveralWorkers(t *testing.T) {
	const n, workers = 20, 4
	var attachesTaken atomic.Int32
	var early atomic.Int32 // unpublishes before every attach was taken
	objects := []runtime.Object{node("node-1"), node("node-2"), csiNode("node-1"), csiNode("node-2")}
	var detaches, attaches []string
	for i := range n {
		d, a := fmt.Sprintf("d%02d", i), fmt.Sprintf("a%02d", i)
		objects = append(objects, pv("pv-"+d, "vol-"+d), detachingVA(d, "pv-"+d, "node-1"),
			pv("pv-"+a, "vol-"+a), va(a, "pv-"+a, "node-2"))
		detaches, attaches = append(detaches, d), append(attaches, a)
	}
	e := newEnv(t, envConfig{objects: objects, timeout: time.Minute,
		unpublish: func(context.Context, *csi.ControllerUnpublishVolumeRequest) error {
			if attachesTaken.Load() < n {
				early.Add(1)
			}
			return nil
		}})
	h, queue := e.handler()
	for _, d := range detaches {
		queue.Add(d)
	}
	for _, a := range attaches {
		queue.Add(a)
	}

	var (
		mu          sync.Mutex
		taken, done = map[string]bool{}, map[string]bool{}
		allDone     = make(chan struct{})
		wg          sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				name, quit := queue.Get()
				if quit {
					return
				}
				if name[0] == 'a' {
					mu.Lock()
					if !taken[name] {
						taken[name] = true
						attachesTaken.Add(1)
					}
					mu.Unlock()
				}
				va := e.syncVA(h, name)
				queue.Done(name)
				if va == nil || va.DeletionTimestamp != nil && slices.Contains(va.Finalizers, fin) || va.DeletionTimestamp == nil && !va.Status.Attached {
					continue
				}
				mu.Lock()
				if !done[name] {
					if done[name] = true; len(done) == 2*n {
						close(allDone)
					}
				}
				mu.Unlock()
			}
		})
	}
	select {
	case <-allDone:
	case <-time.After(30 * time.Second):
		t.Errorf("not all attached and detached after 30s: the driver received %q", e.sent())
	}
	queue.ShutDown()
	wg.Wait()
	if got := early.Load(); got != 0 {
		t.Errorf("%d detaches reached the driver before every attach was taken by a worker, want none", got)
	}
	if attaching, deferred := h.bookkeeping(); attaching != 0 || deferred != 0 {
		t.Errorf("left %d attaches under way and %d detaches giving way, want none", attaching, deferred)
	}
}
