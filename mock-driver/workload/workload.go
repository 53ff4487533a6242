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

// Package workload plays an application on a node: a writer that keeps
// writing to a volume through the array every interval until it is stopped,
// whatever the array answers, as a node cut off from the control plane keeps
// doing.
package workload

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
)

// Stats count a writer's writes.
type Stats struct {
	Volume   string `json:"volume"`
	Node     string `json:"node"`
	Accepted int64  `json:"accepted"`
	// Refused: the array said no (fenced, not published, ...).
	Refused int64 `json:"refused"`
	// Errors: the array's state could not be read or written.
	Errors    int64  `json:"errors"`
	LastError string `json:"lastError,omitempty"`
	Running   bool   `json:"running"`
}

// Writer writes to one volume as one node.
type Writer struct {
	mu     sync.Mutex
	stats  Stats
	cancel context.CancelFunc
	done   chan struct{}
}

// Start starts a writer of node on volume: a first write at once, then one
// every interval.
func Start(ctx context.Context, arr *array.Array, node, volume string, interval time.Duration) *Writer {
	ctx, cancel := context.WithCancel(ctx)
	w := &Writer{stats: Stats{Volume: volume, Node: node, Running: true}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			w.record(arr.Write(volume, node))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *Writer) record(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ae *array.Error
	switch {
	case err == nil:
		w.stats.Accepted++
		return
	case errors.As(err, &ae):
		w.stats.Refused++
	default:
		w.stats.Errors++
	}
	w.stats.LastError = err.Error()
}

// Stats returns the writer's counts so far.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Stop stops the writer, waits for it and returns its final counts.
func (w *Writer) Stop() Stats {
	w.cancel()
	<-w.done
	w.mu.Lock()
	w.stats.Running = false
	w.mu.Unlock()
	return w.Stats()
}

// Set holds the writers of one node instance, one per volume.
type Set struct {
	mu sync.Mutex
	m  map[string]*Writer
}

// Start starts a writer on volume, replacing (stopping) a running one.
func (s *Set) Start(ctx context.Context, arr *array.Array, node, volume string, interval time.Duration) Stats {
	s.mu.Lock()
	old := s.m[volume]
	w := Start(ctx, arr, node, volume, interval)
	if s.m == nil {
		s.m = map[string]*Writer{}
	}
	s.m[volume] = w
	s.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	return w.Stats()
}

// Stop stops the writer on volume and returns its final counts.
func (s *Set) Stop(volume string) (Stats, bool) {
	s.mu.Lock()
	w := s.m[volume]
	delete(s.m, volume)
	s.mu.Unlock()
	if w == nil {
		return Stats{}, false
	}
	return w.Stop(), true
}

// List returns the counts of every running writer, by volume.
func (s *Set) List() []Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Stats, 0, len(s.m))
	for _, w := range s.m {
		out = append(out, w.Stats())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Volume < out[j].Volume })
	return out
}

// StopAll stops every writer.
func (s *Set) StopAll() {
	s.mu.Lock()
	ws := s.m
	s.m = nil
	s.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}
