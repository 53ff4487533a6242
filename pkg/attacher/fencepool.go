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
	"errors"
	"fmt"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/csiclient"
)

// DefaultFenceWorkers is the size of the fence pool when Config leaves it
// zero: external-attacher's default --worker-threads, so that as many
// fences run at once as its workers would have run.
const DefaultFenceWorkers = 10

// fenceQueueSize bounds the fences waiting for a fence worker: beyond it a
// Detach is retried with external-attacher's backoff. It holds every
// attachment of several large nodes, so that a node failure does not spill
// over.
const fenceQueueSize = 4096

// resultTTL is how long the failure of a fence waits for the Detach that
// reports it. A VolumeAttachment whose Detach never comes back (deleted by
// someone else) must not keep its entry forever.
const resultTTL = 30 * time.Minute

// ErrFencePending is what Detach returns while the fence of the volume runs
// in the fence pool: external-attacher's handler keeps the finalizer and
// requeues the VolumeAttachment with backoff, and the pool requeues it
// again as soon as the fence is over.
var ErrFencePending = errors.New("fence in progress")

// IsFencePending reports whether err says a fence is still in progress.
func IsFencePending(err error) bool { return errors.Is(err, ErrFencePending) }

// fencePool runs the fenced unpublishes outside external-attacher's
// workers. external-attacher has one pool of workers for every
// VolumeAttachment (issue #761): a fence that takes the driver seconds
// would hold one of them for as long, and a burst of them, the failure of
// one node, would starve the attaches of the replacements, which are the
// failover's own latency. Detach hands the fence to this pool and returns
// ErrFencePending at once; the pool records and sends it (write-ahead, as
// Attacher.fence always does) and requeues the VolumeAttachment; the next
// Detach finds the fence recorded and detaches without a call.
//
// It is bounded: a fixed number of workers, a bounded queue, at most one
// fence per volume and node ID at a time (a requeue of the same detach
// never starts a second one).
type fencePool struct {
	workers int
	timeout time.Duration
	jobs    chan *fenceJob
	// fence does the work of a job (Attacher.fence).
	fence func(ctx context.Context, j *fenceJob) error

	mu sync.Mutex
	// pending holds the fences queued or running; pendingVAs their
	// VolumeAttachments.
	pending    map[fenceKey]bool
	pendingVAs map[string]bool
	// failed holds the fences that failed until a Detach reports them.
	failed map[fenceKey]fenceFailure
	// succeeded holds when each fence that succeeded started, until a
	// Detach reports it. The record says it too (IsFenced), but only until
	// the node agent of a node that is back cleans the volume, which it
	// may do before the requeued Detach comes: that Detach must then find
	// the fence done, not start another one (and another, as long as the
	// agent keeps cleaning).
	succeeded map[fenceKey]time.Time
	// requeue is told the VolumeAttachment whose fence is over.
	requeue func(vaName string)
	now     func() time.Time

	// attachesWaiting reports an attach waiting for one of
	// external-attacher's workers (Handler.attachesWaiting); nil: never.
	attachesWaiting func() bool
	// giveWayFor bounds how long the workers give way to waiting attaches
	// in one episode (giveWay).
	giveWayFor time.Duration
	// givingWaySince is when the current episode of attaches waiting
	// began to hold fences back; zero: none is. It is reset only when a
	// worker finds no attach waiting: past giveWayFor, the episode holds
	// nothing back any more.
	givingWaySince time.Time
}

// giveWayPoll is how often a worker that gives way looks again.
const giveWayPoll = 50 * time.Millisecond

type fenceKey struct{ volumeID, nodeID string }

type fenceJob struct {
	key fenceKey
	// previousNodeID, when not "", is a node ID the volume may be
	// published under too (Attacher.previousNodeID), fenced first.
	previousNodeID   string
	va               *storagev1.VolumeAttachment // nil when Detach was not called through Handler
	nodeName, reason string
	secrets          map[string]string
	logger           klog.Logger
	// fencedTime is the record's confirmation of the volume's fence on the
	// node when Detach decided (nil: none): a success of this pool counts
	// only if the record confirms that very fence, not an older one and
	// not one restarted since (a new failure of the node).
	fencedTime *time.Time
}

// eachNodeID calls send with the job's previous node ID, if any, then with
// its node ID (csiclient.EachNodeID).
func (j *fenceJob) eachNodeID(send func(nodeID string) error) error {
	return csiclient.EachNodeID(j.previousNodeID, j.key.nodeID, send)
}

type fenceFailure struct {
	err error
	at  time.Time
}

func newFencePool(workers int, timeout time.Duration, fence func(context.Context, *fenceJob) error) *fencePool {
	if workers <= 0 {
		workers = DefaultFenceWorkers
	}
	return &fencePool{
		workers: workers, timeout: timeout, fence: fence,
		jobs:    make(chan *fenceJob, fenceQueueSize),
		pending: map[fenceKey]bool{}, pendingVAs: map[string]bool{}, failed: map[fenceKey]fenceFailure{}, succeeded: map[fenceKey]time.Time{},
		now: time.Now, giveWayFor: maxDetachDeferral,
	}
}

// submit returns the failure of the job's last fence, if one is waiting to
// be reported, and otherwise queues the fence unless one runs already.
// It never blocks.
func (p *fencePool) submit(j *fenceJob) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.failed[j.key]; ok {
		// Reported once: the next Detach, after external-attacher's
		// backoff, fences again.
		delete(p.failed, j.key)
		return f.err
	}
	if started, ok := p.succeeded[j.key]; ok {
		delete(p.succeeded, j.key)
		// The record keeps whole seconds.
		if j.fencedTime != nil && !j.fencedTime.Before(started.Truncate(time.Second)) {
			return nil // the fence is done: so is the detach
		}
	}
	if p.pending[j.key] {
		return fmt.Errorf("volume %s is being fenced from node %s: %w", j.key.volumeID, j.nodeName, ErrFencePending)
	}
	p.prune()
	queued := fmt.Errorf("fencing volume %s from node %s (%s): %w", j.key.volumeID, j.nodeName, j.reason, ErrFencePending)
	if p.enqueue(j) {
		return queued
	}
	return fmt.Errorf("%d fences are queued already, volume %s will be fenced from node %s on a retry", fenceQueueSize, j.key.volumeID, j.nodeName)
}

// enqueue queues j unless the queue is full, and reports whether it did.
// Called with mu held; once queued, j is the worker's.
func (p *fencePool) enqueue(j *fenceJob) bool {
	select {
	case p.jobs <- j:
		p.pending[j.key] = true
		if j.va != nil {
			p.pendingVAs[j.va.Name] = true
		}
		return true
	default:
		return false
	}
}

// submitNew queues the job's fence and reports true only when nothing is
// known of it: no fence of it queued or running, and no outcome waiting for
// a Detach to report it (submit reports those). It never blocks.
func (p *fencePool) submitNew(j *fenceJob) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.known(j.key) {
		return false
	}
	p.prune()
	return p.enqueue(j)
}

// known reports whether a fence of key is queued or running, or has an
// outcome waiting for a Detach to report it. Called with mu held.
func (p *fencePool) known(key fenceKey) bool {
	_, failed := p.failed[key]
	_, succeeded := p.succeeded[key]
	return failed || succeeded || p.pending[key]
}

// forget drops the outcome of a fence whose detach is over without a
// Detach to report it.
func (p *fencePool) forget(key fenceKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.failed, key)
	delete(p.succeeded, key)
}

// prune drops the failures nobody came to collect. Called with mu held.
func (p *fencePool) prune() {
	for k, f := range p.failed {
		if p.now().Sub(f.at) > resultTTL {
			delete(p.failed, k)
		}
	}
	for k, at := range p.succeeded {
		if p.now().Sub(at) > resultTTL {
			delete(p.succeeded, k)
		}
	}
}

// fencing reports whether the fence of the VolumeAttachment is queued or
// running.
func (p *fencePool) fencing(vaName string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pendingVAs[vaName]
}

// setRequeue sets what is told of each fence that is over.
func (p *fencePool) setRequeue(fn func(vaName string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requeue = fn
}

// run runs the workers until ctx is done and they have returned. Queued
// fences left then are not sent; their detaches stay pending, with their
// finalizers, until the next leader fences them.
func (p *fencePool) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-p.jobs:
					p.giveWay(ctx)
					p.do(ctx, j)
				}
			}
		})
	}
	wg.Wait()
}

// setAttachesWaiting sets what tells the workers that attaches wait.
func (p *fencePool) setAttachesWaiting(fn func() bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attachesWaiting = fn
}

// giveWay holds a worker, before it starts its fence, while attaches of the
// driver wait for external-attacher's workers: as a detach gives way to
// them in the queue (Handler.deferDetach), the fences' own API requests
// (the live reads of S4, the record writes of S8, their Events) give way to
// theirs on the apiserver, which a burst of fences otherwise shares with
// them. It does not slow a failover's attaches: the attaches that wait
// are never those of the volumes whose fences wait (a replacement's
// VolumeAttachment comes once its volume's detach is over), and the same
// fences then run, deciding again on live reads, as they would have.
//
// Bounded per episode, not per fence, so that a pool of workers cannot
// multiply it: once attaches have held the fences back for giveWayFor, no
// worker gives way again until a worker finds no attach waiting. An attach
// that only looks waiting (the cache lags; an attach in upstream's backoff
// whose error could not be saved) holds the fences back once, for
// giveWayFor, not at every fence.
func (p *fencePool) giveWay(ctx context.Context) {
	p.mu.Lock()
	waitingFn := p.attachesWaiting
	p.mu.Unlock()
	if waitingFn == nil {
		return
	}
	for {
		waiting := waitingFn()
		p.mu.Lock()
		switch {
		case !waiting:
			p.givingWaySince = time.Time{}
			p.mu.Unlock()
			return
		case p.givingWaySince.IsZero():
			p.givingWaySince = p.now()
		case p.now().Sub(p.givingWaySince) >= p.giveWayFor:
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(giveWayPoll):
		}
	}
}

func (p *fencePool) do(ctx context.Context, j *fenceJob) {
	// --timeout bounds the fence as it bounds external-attacher's Detach.
	started := p.now()
	fctx, cancel := context.WithTimeout(klog.NewContext(ctx, j.logger), p.timeout)
	err := p.fence(fctx, j)
	cancel()
	p.mu.Lock()
	delete(p.pending, j.key)
	if j.va != nil {
		delete(p.pendingVAs, j.va.Name)
	}
	if err != nil {
		p.failed[j.key] = fenceFailure{err: err, at: p.now()}
	} else {
		p.succeeded[j.key] = started
	}
	requeue := p.requeue
	p.mu.Unlock()
	if requeue != nil && j.va != nil {
		requeue(j.va.Name)
	}
}
