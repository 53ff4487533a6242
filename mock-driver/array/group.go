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

package array

import (
	"encoding/json"
	"sync"
	"syscall"
)

// group commits the exclusive operations of one process together: those that
// arrive while another of its operations holds the array run in the next
// lock holding, one after the other on one state, and one write saves them
// all. The state file is the whole array, so one write costs the same for one
// operation as for many; without the group, a controller instance serving
// ten fences at once wrote it ten times, and at thousands of volumes that
// write (marshalling and fsync of megabytes) was most of each fence.
//
// To other processes a group is one operation under the flock, so they see
// each operation whole or not at all, as before. An operation that fails
// without saving (save false and an error) may have changed the state before
// it failed: the group then starts again from the file, which nobody can have
// changed under the lock, without the failed one. So an operation's function
// may run more than once, and must assign its results rather than accumulate
// them (Update says so).
type group struct {
	mu      sync.Mutex
	queue   []*groupOp
	leading bool // an operation of the process holds, or is taking, the lock
}

// groupOp is one exclusive operation waiting in a group.
type groupOp struct {
	fn   func(*State) (bool, error)
	sync bool
	err  error
	// wake is closed when the operation is done, or when it is to lead the
	// next group (lead set).
	wake chan struct{}
	lead bool
}

// exclusive runs fn in a group commit: the caller either leads a group,
// taking the lock for every operation queued by then, or waits while a
// leader runs its fn.
func (a *Array) exclusive(fn func(*State) (bool, error)) error {
	g := a.group
	op := &groupOp{fn: fn, sync: !a.noSync, wake: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, op)
	if g.leading {
		g.mu.Unlock()
		<-op.wake
		if !op.lead {
			return op.err
		}
		g.mu.Lock()
	}
	g.leading = true
	batch := g.queue // op is in it: it is the first, or was queued before the leader left
	g.queue = nil
	g.mu.Unlock()

	a.commit(batch)

	g.mu.Lock()
	var next *groupOp
	if len(g.queue) > 0 {
		next = g.queue[0]
		next.lead = true
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	for _, o := range batch {
		if o != op {
			close(o.wake)
		}
	}
	if next != nil {
		close(next.wake)
	}
	return op.err
}

// commit runs the batch's functions in order under one exclusive lock and
// saves the state once, if any of them asked to. Every operation's err is
// set.
func (a *Array) commit(batch []*groupOp) {
	unlock, err := a.lock(syscall.LOCK_EX)
	if err != nil {
		setErr(batch, nil, err)
		return
	}
	defer unlock()

	// The cached state itself: the cache forgets it, since it is changed here
	// and may then not be saved.
	s, err := a.load(true)
	if err != nil {
		setErr(batch, nil, err)
		return
	}
	failed := map[*groupOp]bool{}
	var saved []*groupOp
	for {
		saved = saved[:0]
		again := false
		for _, o := range batch {
			if failed[o] {
				continue
			}
			save, err := o.fn(s)
			o.err = err
			if !save && err != nil {
				failed[o] = true
				again = true
				break
			}
			if save {
				saved = append(saved, o)
			}
		}
		if !again {
			break
		}
		if len(failed) == len(batch) {
			return // nothing left to run, nothing to save
		}
		// Start again, without the failed operation's changes.
		if s, err = a.reread(); err != nil {
			setErr(batch, failed, err)
			return
		}
	}
	if len(saved) == 0 {
		return
	}
	sync := false
	for _, o := range saved {
		sync = sync || o.sync
	}
	out, err := json.Marshal(s)
	if err != nil {
		setErr(saved, nil, err)
		return
	}
	if err := a.store(out, sync); err != nil {
		setErr(saved, nil, err)
		return
	}
	// Still under the lock: the file is the one just renamed into place.
	if f, id, err := openState(a.StateFile()); err == nil {
		a.cache.keep(f, id, s)
	}
}

// setErr gives err to every operation of ops except those that failed on
// their own, whose own error stands.
func setErr(ops []*groupOp, failed map[*groupOp]bool, err error) {
	for _, o := range ops {
		if !failed[o] {
			o.err = err
		}
	}
}

// reread reads the state file again, for the caller to change.
func (a *Array) reread() (*State, error) {
	s, f, _, err := a.read()
	if f != nil {
		f.Close()
	}
	return s, err
}
