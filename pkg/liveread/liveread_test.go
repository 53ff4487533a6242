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

package liveread

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/csi-fence/fence-attacher/internal/testpoll"
)

// reads is a fake API: each read returns its sequence number, and waits
// until released when gated.
type reads struct {
	started atomic.Int64
	gate    chan struct{}
}

func (r *reads) fetch(ctx context.Context) (int64, error) {
	n := r.started.Add(1)
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return n, nil
}

// waitFor waits for cond (testpoll.Until).
func waitFor(t *testing.T, what string, cond func() bool) { t.Helper(); testpoll.Until(t, what, cond) }

// Callers that arrive while a read is under way share the one after it:
// never the one under way, which began before they asked.
func TestCallersShareTheNextRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		callers int
	}{
		{"one", 1},
		{"a burst", 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g Group[int64]
			r := &reads{gate: make(chan struct{})}
			// A first read is under way.
			first := make(chan int64)
			go func() {
				v, _ := g.Do(context.Background(), "n1", r.fetch)
				first <- v
			}()
			waitFor(t, "the first read to start", func() bool { return r.started.Load() == 1 })
			var wg sync.WaitGroup
			got := make([]int64, tc.callers)
			for i := range got {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := g.Do(context.Background(), "n1", r.fetch)
					if err != nil {
						t.Error(err)
					}
					got[i] = v
				}()
			}
			// Every caller has joined the next read (it has not started:
			// the first one holds the key) once the gate opens.
			waitFor(t, "the callers to join", func() bool { return g.Gathering("n1") == tc.callers })
			close(r.gate)
			wg.Wait()
			if v := <-first; v != 1 {
				t.Errorf("first caller got read %d, want 1", v)
			}
			for i, v := range got {
				if v != 2 {
					t.Errorf("caller %d got read %d, want 2 (the read after the one under way when it asked)", i, v)
				}
			}
			if n := r.started.Load(); n != 2 {
				t.Errorf("%d reads for %d callers, want 2", n, tc.callers+1)
			}
		})
	}
}

// Keys do not share reads; a key idle again starts its next read at once.
func TestKeysAreIndependent(t *testing.T) {
	var g Group[int64]
	var a, b reads
	for i := int64(1); i <= 3; i++ {
		if v, err := g.Do(context.Background(), "a", a.fetch); err != nil || v != i {
			t.Fatalf("read %d of a: %d, %v", i, v, err)
		}
	}
	if v, err := g.Do(context.Background(), "b", b.fetch); err != nil || v != 1 {
		t.Fatalf("read of b: %d, %v", v, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.keys) != 0 {
		t.Errorf("idle keys kept: %v", g.keys)
	}
}

// A caller that gives up returns at once; the read ends when every caller
// of it has given up, and its error reaches nobody.
func TestCallersGiveUp(t *testing.T) {
	var g Group[int64]
	r := &reads{gate: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := g.Do(ctx, "n1", r.fetch)
		errc <- err
	}()
	waitFor(t, "the read to start", func() bool { return r.started.Load() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// The read saw its context end (it would block on the gate forever
	// otherwise) and the key is idle again.
	waitFor(t, "the key to be idle", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.keys) == 0
	})
	close(r.gate)
	if v, err := g.Do(context.Background(), "n1", r.fetch); err != nil || v != 2 {
		t.Errorf("the next read: %d, %v", v, err)
	}
}
