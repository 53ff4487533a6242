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
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// Recorder writes the record of concurrent fences on one node together
// (group commit). Each node has one FencingRequest, so the attacher's
// workers, each fencing one VolumeAttachment of a failed node, would
// otherwise all read-modify-write the same object: every fence two writes,
// most of them conflicts, some giving up (and their volumes fenced again).
//
// A caller's change (its intent, later its outcome) joins the node's queue;
// one writer per node applies every queued change to a fresh copy of the
// request in one update, retried as a whole on conflicts, and tells each
// caller the result of the write that carried its change. Changes queued
// while a write is under way go in the next one, so the more callers
// compete, the more each write carries. Write-ahead holds for every caller
// alone: none proceeds before the write carrying its intent succeeded, and
// a failed write fails every caller it carried.
//
// A Recorder is safe for concurrent use; its zero value is not usable.
type Recorder struct {
	c Client

	mu sync.Mutex
	// queues holds the changes waiting for the next write of each node
	// that has a writer running; a node without one has no entry.
	queues map[string][]*change
}

// change is one caller's mutation of a node's record, waiting for the write
// that carries it.
type change struct {
	ctx    context.Context
	reason string
	limit  int // how many entries the record may hold after it
	mutate mutation
	done   chan struct{} // closed once err is the write's result
	err    error
	// refused is why the write left this change out, nil when it carried
	// it: the change did not fit in its limit.
	refused error
	// existing: the change must not create the request (a cleanup's).
	existing bool
	// read: the change only reads (Read); it goes before the changes
	// queued, so that it sees none of them.
	read bool
}

// FenceConcurrency is how many fences of one Fence call run at once: a
// failed node's hundred volumes, one RPC after another, would wait for each
// other as long as the driver takes for each, times a hundred.
const FenceConcurrency = 10

// NewRecorder returns a Recorder writing through c.
func NewRecorder(c Client) *Recorder {
	return &Recorder{c: c, queues: map[string][]*change{}}
}

// Fence fences vols on nodeName, write-ahead: one write records the intent
// for all of them, then fence is called for each, up to FenceConcurrency at
// once (it must be safe for concurrent use), then one write records the
// outcomes; both writes are shared with the other callers fencing on the
// node at the time. It returns each volume's fence error (nil: fenced and
// recorded), or an error alone when the intent could not be recorded, in
// which case nothing was called. An error recording the outcomes is returned
// for every volume that was fenced: the caller must not act on an unrecorded
// fence (its retry fences again, which is idempotent).
//
// fence returns an error wrapping ErrNotSent when it decided, before sending
// anything to the driver, not to fence after all: the entry is then removed
// again when no other call's fence of it is in flight or answered, as no
// fence of it can have happened.
func (r *Recorder) Fence(ctx context.Context, nodeName, reason string, vols []fencingv1alpha1.FencedVolume, fence func(context.Context, fencingv1alpha1.FencedVolume) error) ([]error, error) {
	id := newFenceID()
	if err := r.write(ctx, nodeName, reason, intentLimit, intent(vols, id)); err != nil {
		return nil, fmt.Errorf("recording the intent to fence before fencing: %w", err)
	}
	errs := make([]error, len(vols))
	called := make([]bool, len(vols))
	workqueue.ParallelizeUntil(ctx, FenceConcurrency, len(vols), func(i int) {
		called[i] = true
		errs[i] = fence(ctx, vols[i])
	})
	for i := range errs {
		if !called[i] {
			// Only ctx's end leaves one uncalled: it is not fenced.
			cause := context.Cause(ctx)
			if cause == nil {
				cause = context.Canceled
			}
			errs[i] = fmt.Errorf("%w: %w", ErrNotSent, cause)
		}
	}
	if err := r.write(ctx, nodeName, reason, MaxVolumes, outcomes(vols, id, errs)); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("volume %s was fenced but the fence could not be recorded: %w", vols[i].VolumeHandle, err)
			}
		}
	}
	return errs, nil
}

// write queues mutate for the node's next record write and waits for the
// result of the write that carries it, or until ctx is done. The record
// must hold at most limit entries after it (fit). A change still queued
// when its caller gives up is withdrawn; one already being written may land
// all the same, as any request in flight may.
func (r *Recorder) write(ctx context.Context, nodeName, reason string, limit int, mutate mutation) error {
	return r.queue(ctx, nodeName, &change{ctx: ctx, reason: reason, limit: limit, mutate: mutate})
}

// writeExisting is write for a change that must not create the request:
// when none of its write's changes may, a missing request stays missing.
func (r *Recorder) writeExisting(ctx context.Context, nodeName string, mutate mutation) error {
	return r.queue(ctx, nodeName, &change{ctx: ctx, limit: MaxVolumes, mutate: mutate, existing: true})
}

// queue queues ch for the node's next record write and waits for the
// result of the write that carries it (write).
func (r *Recorder) queue(ctx context.Context, nodeName string, ch *change) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ch.done = make(chan struct{})
	r.mu.Lock()
	queue, writing := r.queues[nodeName]
	if ch.read {
		r.queues[nodeName] = append([]*change{ch}, queue...)
	} else {
		r.queues[nodeName] = append(queue, ch)
	}
	r.mu.Unlock()
	if !writing {
		go r.writeQueued(nodeName)
	}
	select {
	case <-ch.done:
		return ch.err
	case <-ctx.Done():
		r.withdraw(nodeName, ch)
		return ctx.Err()
	}
}

// withdraw removes ch from the node's queue if no write has taken it yet.
func (r *Recorder) withdraw(nodeName string, ch *change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	queue := r.queues[nodeName]
	for i, c := range queue {
		if c == ch {
			r.queues[nodeName] = append(queue[:i:i], queue[i+1:]...)
			return
		}
	}
}

// writeQueued is the node's writer: it writes what is queued, one write at
// a time, until the queue is empty, and then ends. A change queued after
// that starts a new writer.
func (r *Recorder) writeQueued(nodeName string) {
	for {
		r.mu.Lock()
		batch := r.queues[nodeName]
		if len(batch) == 0 {
			delete(r.queues, nodeName)
			r.mu.Unlock()
			return
		}
		r.queues[nodeName] = nil
		r.mu.Unlock()
		// A caller that gave up meanwhile acts on nothing this write could
		// record: leave its change out.
		batch = slices.DeleteFunc(batch, func(ch *change) bool {
			if ch.ctx.Err() == nil {
				return false
			}
			ch.err = ch.ctx.Err()
			close(ch.done)
			return true
		})
		if len(batch) == 0 {
			continue
		}
		r.commit(nodeName, batch)
		for _, ch := range batch {
			close(ch.done)
		}
	}
}

// commit applies every change of batch, in order, in one update of the
// node's request, retried as a whole on conflicts (each retry applies them
// all again, to the fresh copy), and sets each change's err. A change that
// leaves more entries than its limit is left out, alone (its err wraps
// ErrRecordFull): at the bound, the outcomes of fences in flight are
// recorded while the intents beside them are refused. The request is
// created with the first change's reason when there is none. The write
// goes on while any caller of the batch still waits for it and stops when
// all have given up.
func (r *Recorder) commit(nodeName string, batch []*change) {
	// The first caller's context gives the write its logger and values,
	// not its lifetime.
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	for _, ch := range batch {
		stop := context.AfterFunc(ch.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	if len(batch) > 1 {
		klog.FromContext(ctx).V(5).Info("Writing the fence record changes of several callers at once", "node", nodeName, "changes", len(batch))
	}
	err := store(ctx, r.c, nodeName, batch, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		changed := false
		for _, ch := range batch {
			ch.refused = nil
			// The record's mutations assign what they change in the
			// status and its entries, and change nothing else: a copy
			// of the status with its own entries undoes one.
			before := fr.Status
			before.Volumes = slices.Clone(fr.Status.Volumes)
			mutated := ch.mutate(fr, now)
			forgot, err := fit(fr, ch.limit)
			if err != nil {
				fr.Status = before
				ch.refused = err
				continue
			}
			changed = mutated || forgot || changed
		}
		return changed
	})
	for _, ch := range batch {
		ch.err = err
		if err == nil {
			ch.err = ch.refused
		}
	}
}

// store writes mutate, the changes of batch, through update, which creates
// the request (with the reason of the first change that may create it),
// or, when none may, through updateExisting, which leaves a missing request
// missing.
func store(ctx context.Context, c Client, nodeName string, batch []*change, mutate mutation) error {
	for _, ch := range batch {
		if !ch.existing {
			return update(ctx, c, nodeName, ch.reason, MaxVolumes, mutate)
		}
	}
	return updateExisting(ctx, c, nodeName, mutate)
}

// RecordCleaned is RecordCleaned through the node's queue: the node agent's
// workers, each cleaning one volume of a node that came back, record their
// cleanups together, as the attacher's record their fences. The caller has
// finished the cleanup (the entry is marked cleaned only after it, S8); a
// nil error means the write carrying it succeeded, an error that it is not
// recorded (and the cleanup must be done and recorded again). A missing
// request or entry is not created.
func (r *Recorder) RecordCleaned(ctx context.Context, nodeName, driver, volumeHandle string) error {
	return r.writeExisting(ctx, nodeName, cleaned(driver, volumeHandle))
}

// RecordCleanupError is RecordCleanupError through the node's queue, as
// RecordCleaned.
func (r *Recorder) RecordCleanupError(ctx context.Context, nodeName, driver, volumeHandle, msg string) error {
	return r.writeExisting(ctx, nodeName, cleanupFailed(driver, volumeHandle, msg))
}

// Read returns the node's request as a read that started after the call
// finds it: a fresh read, for a caller that must see its own last writes
// (the node agent, before it cleans a volume, as its cache may be behind).
// It is the read of the node's next write, shared with the changes and the
// other reads queued with it, and sees none of those changes: only what is
// stored (or, when one of them creates the request or starts it over, the
// request as that write finds it). A request that is gone is NotFound; none
// is created.
func (r *Recorder) Read(ctx context.Context, nodeName string) (*fencingv1alpha1.FencingRequest, error) {
	var got *fencingv1alpha1.FencingRequest
	ch := &change{ctx: ctx, limit: MaxVolumes, existing: true, read: true,
		mutate: func(fr *fencingv1alpha1.FencingRequest, _ metav1.Time) bool {
			got = fr.DeepCopy()
			return false
		}}
	err := r.queue(ctx, nodeName, ch)
	select {
	case <-ch.done:
	default:
		return nil, err // gave up: the writer may still be at it
	}
	switch {
	case got != nil:
		// Read before any change of its write: what is stored, whatever
		// became of the write.
		return got, nil
	case err != nil:
		return nil, err
	}
	return nil, apierrors.NewNotFound(fencingv1alpha1.Resource.GroupResource(), nodeName)
}
