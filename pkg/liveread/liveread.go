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

// Package liveread shares live reads of the same object among concurrent
// callers without ever handing one a read that began before it asked.
//
// A burst of fenced detaches from one failed node makes every attacher
// worker read the same Node and the same FencingRequest live, each on its
// own request: under the client's rate limit those reads queue behind each
// other, and the writes of the fences' record behind them, until the
// fences' deadlines pass. A caller of Group.Do joins the next read of its
// key, one that has not started yet; while a read of the key is under way,
// every caller that arrives waits for the one after it, which starts when
// it ends. So there is at most one read of a key in flight, and one more
// gathering callers, and what each caller gets was read after it asked:
// as live as a read of its own (golang.org/x/sync/singleflight would hand a
// late caller the result of a read already under way when it asked).
package liveread

import (
	"context"
	"sync"
	"sync/atomic"
)

// Group coalesces the live reads of keys of one kind. Its zero value is
// ready to use; it is safe for concurrent use.
type Group[V any] struct {
	mu   sync.Mutex
	keys map[string]*key[V]
}

// key is the state of one key: whether a read is under way, and the next
// read, gathering callers until it starts.
type key[V any] struct {
	running bool
	next    *read[V]
}

// read is one read and the callers waiting for it.
type read[V any] struct {
	done    chan struct{}
	val     V
	err     error
	waiting atomic.Int64
	// rctx is the read's context: the first caller's values (its
	// logger), ended by cancel once every caller waiting for it has gone.
	rctx   context.Context
	cancel context.CancelFunc
}

// Do returns the result of a call of fetch for k that begins after Do was
// called, shared with the other callers of k that joined the same read.
// fetch runs with a context that carries the values of the read's first
// caller and ends when every caller of the read has given up. A read runs
// the fetch of its first caller: every caller of a key must pass a fetch
// that reads the same object. A caller whose ctx ends first
// returns ctx.Err().
func (g *Group[V]) Do(ctx context.Context, k string, fetch func(context.Context) (V, error)) (V, error) {
	g.mu.Lock()
	if g.keys == nil {
		g.keys = map[string]*key[V]{}
	}
	st := g.keys[k]
	if st == nil {
		st = &key[V]{}
		g.keys[k] = st
	}
	r := st.next
	if r == nil {
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r = &read[V]{done: make(chan struct{}), rctx: rctx, cancel: cancel}
		st.next = r
	}
	r.waiting.Add(1)
	start := !st.running
	if start {
		st.running, st.next = true, nil
	}
	g.mu.Unlock()
	leave := func() {
		if r.waiting.Add(-1) == 0 {
			r.cancel()
		}
	}
	stop := context.AfterFunc(ctx, leave)
	if start {
		go g.run(k, r, fetch)
	}
	select {
	case <-r.done:
		stop()
		return r.val, r.err
	case <-ctx.Done():
		if stop() {
			// leave had not started: this caller leaves here.
			leave()
		}
		var zero V
		return zero, ctx.Err()
	}
}

// Gathering returns how many callers of k wait for its next read, one that
// has not started yet.
func (g *Group[V]) Gathering(k string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.keys[k]; st != nil && st.next != nil {
		return int(st.next.waiting.Load())
	}
	return 0
}

// run performs r; then the next read of k, if callers gathered for it
// meanwhile, starts in a goroutine of its own; else the key is idle again.
// The key's state is settled before r's callers get their result, so a
// caller that asks again at once finds the key idle and starts a read,
// rather than queueing behind a read that has already ended.
func (g *Group[V]) run(k string, r *read[V], fetch func(context.Context) (V, error)) {
	r.val, r.err = fetch(r.rctx)
	r.cancel()
	g.mu.Lock()
	st := g.keys[k]
	next := st.next
	st.next = nil
	if next == nil {
		delete(g.keys, k)
	}
	g.mu.Unlock()
	close(r.done)
	if next != nil {
		go g.run(k, next, fetch)
	}
}
