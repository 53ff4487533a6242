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
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// manyObjs are the objects of n volumes vol-i (PV pvi, VolumeAttachment
// vai) being detached from node-1, NotReady: each detach is a fence.
func manyObjs(n int) []runtime.Object {
	out := []runtime.Object{csiNode("node-1"), node("node-1", readyStatus(v1.ConditionUnknown)), pv("pv-ready", "vol-ready")}
	for i := range n {
		out = append(out, pv(fmt.Sprintf("pv%d", i), fmt.Sprintf("vol-%d", i)), detachingVA(fmt.Sprintf("va%d", i), fmt.Sprintf("pv%d", i), "node-1"))
	}
	return out
}

// detachVol runs Detach of vol-i from node-1 as external-attacher's
// handler calls it, once.
func (e *env) detachVol(i int) error {
	ctx, cancel := context.WithTimeout(withVolumeAttachment(e.ctx, detachingVA(fmt.Sprintf("va%d", i), fmt.Sprintf("pv%d", i), "node-1")), 2*time.Second)
	defer cancel()
	return e.a.Detach(ctx, fmt.Sprintf("vol-%d", i), "node-1-id", nil)
}

// external-attacher issue #761: a fence the driver takes long to answer
// does not hold the worker that synced its VolumeAttachment. Detach hands it
// over and returns at once; a requeue of the same detach meanwhile starts no
// second fence; once the fence is over, the next Detach finds it recorded
// and detaches without a call to the driver.
func TestDetachDoesNotWaitForTheFence(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 10)
	e := newEnv(t, envConfig{objects: manyObjs(1), timeout: time.Minute,
		unpublish: func(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) error {
			started <- req.GetVolumeId()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	returned := make(chan error, 1)
	go func() { returned <- e.detachVol(0) }()
	select {
	case err := <-returned:
		if !IsFencePending(err) {
			t.Fatalf("Detach returned %v, want the fence pending", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Detach waited for the driver's fence: it holds one of external-attacher's workers (#761)")
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the fence was not sent")
	}
	// The driver still holds the fence: a requeue is told so, and sends
	// nothing more.
	if err := e.detachVol(0); !IsFencePending(err) {
		t.Fatalf("Detach during the fence returned %v, want the fence pending", err)
	}
	if !fencerecord.MayBeQuarantined(e.getFR("node-1"), drv, "vol-0") {
		t.Errorf("the fence was sent before its intent was recorded: %+v", e.getFR("node-1"))
	}
	close(release)
	e.waitFenceDone("va0")
	if !fencerecord.IsFenced(e.getFR("node-1"), drv, "vol-0") {
		t.Fatalf("the fence is over but not recorded: %+v", e.getFR("node-1"))
	}
	if err := e.detachVol(0); err != nil {
		t.Fatalf("Detach after the recorded fence: %v", err)
	}
	if got := e.sent(); len(got) != 1 || got[0] != "unpublish vol-0 node-1-id fence" {
		t.Errorf("the driver received %q, want one fence", got)
	}
}

// The node agent of a node that is back may clean the fenced volume before
// the requeued Detach comes: the record then no longer says fenced, and
// that Detach must find the fence done, not send another (and another, as
// long as the agent keeps cleaning: seen as a livelock in the e2e test of a
// node that flaps during a slow fence).
func TestDetachAfterTheFenceWasCleaned(t *testing.T) {
	e := newEnv(t, envConfig{objects: manyObjs(1), timeout: time.Minute})
	if err := e.detachVol(0); !IsFencePending(err) {
		t.Fatalf("Detach returned %v, want the fence pending", err)
	}
	e.waitFenceDone("va0")
	if err := fencerecord.RecordCleaned(e.ctx, fencingv1alpha1.NewClient(e.dyn), "node-1", drv, "vol-0"); err != nil {
		t.Fatal(err)
	}
	if err := e.detachVol(0); err != nil {
		t.Fatalf("Detach after the fence and its cleanup: %v", err)
	}
	if got := e.sent(); len(got) != 1 {
		t.Errorf("the driver received %q, want one fence", got)
	}
}

// A fence done in an earlier failure of the node is not one of now: once
// the record starts the volume's fence over (a new intent), a Detach fences
// again, whatever the pool remembers.
func TestEarlierFenceIsNotTheDetachOfNow(t *testing.T) {
	e := newEnv(t, envConfig{objects: manyObjs(1), timeout: time.Minute})
	if err := e.detachVol(0); !IsFencePending(err) {
		t.Fatalf("Detach returned %v, want the fence pending", err)
	}
	e.waitFenceDone("va0")
	frs := fencingv1alpha1.NewClient(e.dyn)
	if err := fencerecord.RecordCleaned(e.ctx, frs, "node-1", drv, "vol-0"); err != nil {
		t.Fatal(err)
	}
	// The node fails again before the pool's success was collected.
	if err := fencerecord.RecordIntent(e.ctx, frs, "node-1", "NodeUnreachable", fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "vol-0", NodeID: "node-1-id"}); err != nil {
		t.Fatal(err)
	}
	if err := e.detachVol(0); !IsFencePending(err) {
		t.Fatalf("Detach in a new failure of the node returned %v, want a new fence pending", err)
	}
}

// Several of external-attacher's workers detach many volumes of a failed
// node at once (run with -race): each volume is fenced exactly once,
// never more fences run at once than the pool has workers, and every
// detach ends once its fence is recorded.
func TestFencePoolUnderConcurrentDetaches(t *testing.T) {
	const volumes, fenceWorkers, syncWorkers = 20, 3, 5
	var running, most atomic.Int32
	e := newEnv(t, envConfig{objects: manyObjs(volumes), fenceWorkers: fenceWorkers,
		unpublish: func(context.Context, *csi.ControllerUnpublishVolumeRequest) error {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					return nil
				}
			}
		}})
	// A queue of the volumes to sync, as external-attacher's: a pending
	// detach goes back when the pool says its fence is over.
	queue := make(chan int, volumes)
	for i := range volumes {
		queue <- i
	}
	var pending sync.Map // va name -> volume index
	var done atomic.Int32
	allDone := make(chan struct{})
	finish := func() {
		if done.Add(1) == volumes {
			close(allDone)
		}
	}
	e.a.OnFenceDone(func(va string) {
		if i, ok := pending.LoadAndDelete(va); ok {
			queue <- i.(int)
		}
	})
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range syncWorkers {
		wg.Go(func() {
			for {
				select {
				case <-allDone:
					return
				case i := <-queue:
					// Stored before the call: the fence may be over before
					// Detach returns.
					pending.Store(fmt.Sprintf("va%d", i), i)
					err := e.detachVol(i)
					switch {
					case err == nil:
						pending.Delete(fmt.Sprintf("va%d", i))
						finish()
					case !IsFencePending(err):
						t.Errorf("vol-%d: %v", i, err)
						finish()
					}
				case <-ctx.Done():
					t.Errorf("%d of %d detaches done after 30s", done.Load(), volumes)
					return
				}
			}
		})
	}
	wg.Wait()
	sent := map[string]int{}
	for _, s := range e.sent() {
		sent[s]++
	}
	for i := range volumes {
		if s := fmt.Sprintf("unpublish vol-%d node-1-id fence", i); sent[s] != 1 {
			t.Errorf("%s sent %d times, want once", s, sent[s])
		}
		if !fencerecord.IsFenced(e.getFR("node-1"), drv, fmt.Sprintf("vol-%d", i)) {
			t.Errorf("vol-%d not recorded fenced", i)
		}
	}
	if m := most.Load(); m > fenceWorkers {
		t.Errorf("%d fences ran at once, the pool has %d workers", m, fenceWorkers)
	}
}

// S4 across the fence pool's queue: a fence decided on a NotReady node
// that waited for a fence worker while the node became Ready again is not
// sent (the worker decides again on live reads); the requeued detach is a
// plain unpublish.
func TestQueuedFenceDecidesAgain(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 10)
	e := newEnv(t, envConfig{objects: manyObjs(2), fenceWorkers: 1, timeout: time.Minute,
		unpublish: func(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) error {
			started <- req.GetVolumeId()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	// vol-0's fence holds the one fence worker; vol-1's waits behind it.
	if err := e.detachVol(0); !IsFencePending(err) {
		t.Fatalf("vol-0: %v, want the fence pending", err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("vol-0's fence was not sent")
	}
	if err := e.detachVol(1); !IsFencePending(err) {
		t.Fatalf("vol-1: %v, want the fence pending", err)
	}
	// The node is back before vol-1's turn (the caches still say NotReady).
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx, node("node-1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	close(release)
	for range 2 {
		e.waitFenceDone("")
	}
	if fencerecord.MayBeQuarantined(e.getFR("node-1"), drv, "vol-1") {
		t.Errorf("vol-1 was fenced from a Ready node without a manual request (S4): %+v", e.getFR("node-1"))
	}
	if err := e.detachVol(1); err != nil {
		t.Fatalf("vol-1 after the node is back: %v", err)
	}
	want := []string{"unpublish vol-0 node-1-id fence", "unpublish vol-1 node-1-id"}
	if got := e.sent(); !slices.Equal(got, want) {
		t.Errorf("the driver received %q, want %q", got, want)
	}
}

// The fence workers give way to attaches waiting for external-attacher's
// workers, and only for a bounded time per episode of waiting, however many
// fences wait: an attach that only looks waiting holds them back once.
func TestFencesGiveWayToWaitingAttaches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fenced := make(chan string, 10)
	p := newFencePool(1, time.Second, func(_ context.Context, j *fenceJob) error {
		fenced <- j.key.volumeID
		return nil
	})
	bound := func(d time.Duration) {
		p.mu.Lock()
		p.giveWayFor = d
		p.mu.Unlock()
	}
	var waiting atomic.Bool
	asked := make(chan struct{}, 1000)
	p.setAttachesWaiting(func() bool {
		asked <- struct{}{}
		return waiting.Load()
	})
	go p.run(ctx)
	submit := func(vol string) {
		t.Helper()
		if err := p.submit(&fenceJob{key: fenceKey{volumeID: vol, nodeID: "n1"}, nodeName: "node-1", logger: klog.Background()}); !IsFencePending(err) {
			t.Fatalf("submit %s: %v", vol, err)
		}
	}
	expectFenced := func(vol string) {
		t.Helper()
		select {
		case got := <-fenced:
			if got != vol {
				t.Fatalf("fenced %s, want %s", got, vol)
			}
		case <-ctx.Done():
			t.Fatalf("%s never fenced", vol)
		}
	}
	askedTimes := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-asked:
			case <-ctx.Done():
				t.Fatal("the worker stopped asking whether attaches wait")
			}
		}
	}

	// Attaches wait: the fence waits for them, looking again and again.
	bound(time.Minute)
	waiting.Store(true)
	submit("vol-1")
	askedTimes(3)
	select {
	case v := <-fenced:
		t.Fatalf("%s fenced while attaches waited", v)
	default:
	}
	// They are taken: the fence goes.
	waiting.Store(false)
	expectFenced("vol-1")

	// An attach that looks waiting for good holds the fences back once,
	// for the bound, then never again in that episode.
	const short = 300 * time.Millisecond
	bound(short)
	waiting.Store(true)
	start := time.Now()
	submit("vol-2")
	expectFenced("vol-2")
	if took := time.Since(start); took < short {
		t.Fatalf("vol-2 fenced after %v, before the bound %v: no way given", took, short)
	}
	for len(asked) > 0 {
		<-asked
	}
	submit("vol-3")
	expectFenced("vol-3")
	if n := len(asked); n > 1 {
		t.Fatalf("vol-3 looked %d times at the attaches after the episode's bound was spent", n)
	}
	// Once no attach waits, the next episode gives way again.
	bound(time.Minute)
	waiting.Store(false)
	submit("vol-4")
	expectFenced("vol-4")
	waiting.Store(true)
	submit("vol-5")
	askedTimes(3)
	select {
	case v := <-fenced:
		t.Fatalf("%s fenced while attaches waited in a new episode", v)
	default:
	}
	waiting.Store(false)
	expectFenced("vol-5")
}

// Two VolumeAttachments of one volume on one node (a deleted one and the
// one that replaced it, synced by different workers; run with -race) race
// through the pool: one hands the fence over ahead of the sync
// (Handler.detachAhead: submitNew, then forget once the record shows it),
// the other detaches (submit). The pool never runs two fences of the volume
// on the node at once, every fence handed over is run, and once everything
// has been reported nothing of it is left queued or running.
func TestFencePoolRacingHandOversOfOneVolume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := fenceKey{volumeID: "vol-1", nodeID: "node-1-id"}
	var running, most, fences atomic.Int32
	p := newFencePool(4, time.Second, func(_ context.Context, j *fenceJob) error {
		n := running.Add(1)
		defer running.Add(-1)
		fences.Add(1)
		for m := most.Load(); n > m; m = most.Load() {
			if most.CompareAndSwap(m, n) {
				break
			}
		}
		// The RPC takes a while: long enough for the other workers to
		// be handed another fence of the volume if the pool let them.
		time.Sleep(200 * time.Microsecond)
		if fences.Load()%2 == 0 {
			return fmt.Errorf("the driver refused")
		}
		return nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(ctx)
	}()
	job := func(va string) *fenceJob {
		return &fenceJob{key: key, va: detachingVA(va, "pv1", "node-1"), nodeName: "node-1", reason: "test", logger: klog.Background()}
	}
	var handedOver atomic.Int32
	// One hand-over before the race, with nothing of the key known: it is
	// taken, so that the check below always has a handed-over fence to
	// find run (the racing ones may all find the key pending: CI saw none).
	if !p.submitNew(job("va-0")) {
		t.Fatal("a fence handed over with nothing of its volume known was refused")
	}
	handedOver.Add(1)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			va := fmt.Sprintf("va-%d", w%2)
			for i := range 300 {
				switch (w + i) % 3 {
				case 0:
					if p.submitNew(job(va)) {
						handedOver.Add(1)
					}
				case 1:
					_ = p.submit(job(va))
				default:
					p.forget(key)
				}
			}
		})
	}
	wg.Wait()
	// The fences queued last run to their end.
	if err := wait.PollUntilContextCancel(ctx, time.Millisecond, true, func(context.Context) (bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.pending[key], nil
	}); err != nil {
		t.Fatalf("a fence of %v still queued or running: %v", key, err)
	}
	cancel()
	<-done
	if m := most.Load(); m > 1 {
		t.Errorf("%d fences of one volume on one node ran at once", m)
	}
	if f, h := fences.Load(), handedOver.Load(); f < h {
		t.Errorf("%d fences ran, %d handed over: want every fence handed over run", f, h)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pendingVAs) > 0 {
		t.Errorf("VolumeAttachments still said to be fencing: %v", p.pendingVAs)
	}
}
