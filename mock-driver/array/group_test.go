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
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// held starts an Update whose function blocks until the returned release is
// called, so that the operations started meanwhile queue behind it.
func held(t *testing.T, a *Array) (release func(), done <-chan error) {
	t.Helper()
	started, unblock := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- a.Update(func(s *State) error {
			close(started)
			<-unblock
			s.Volumes["v"].Data++
			return nil
		})
	}()
	<-started
	return func() { close(unblock) }, errc
}

// queued waits until n operations wait in the group behind its leader.
func queued(t *testing.T, a *Array, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.group.mu.Lock()
		got := len(a.group.queue)
		a.group.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d operations queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
}

// fileNow is the identity of the state file as an operation sees it.
func fileNow(a *Array) fileID {
	fi, err := os.Stat(a.StateFile())
	if err != nil {
		return fileID{}
	}
	return identity(fi)
}

// Operations that wait while another of the process holds the array are
// saved by one write: each sees the file as the one before it left it. Every
// store renames a new file into place while the cache pins the old one, so
// two operations saved one after the other always see different files.
func TestGroupSavesWaitingOperationsInOneWrite(t *testing.T) {
	a, _ := newTestArray(t)
	if err := a.AddVolumes(1, "v"); err != nil {
		t.Fatal(err)
	}
	release, leader := held(t, a)
	const waiting = 5
	seen := make([]fileID, waiting)
	var wg sync.WaitGroup
	errs := make([]error, waiting)
	for i := range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.Update(func(s *State) error {
				seen[i] = fileNow(a)
				s.Volumes["v"].Data++
				return nil
			})
		}()
	}
	queued(t, a, waiting)
	release()
	wg.Wait()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
		if seen[i] != seen[0] {
			t.Errorf("operation %d saw the file %+v, operation 0 %+v: saved in separate writes", i, seen[i], seen[0])
		}
	}
	if seen[0] == (fileID{}) {
		t.Fatal("no file identity seen")
	}
	s, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Volumes["v"].Data; got != waiting+1 {
		t.Errorf("data %d, want %d: an operation of the group was lost", got, waiting+1)
	}
}

// An operation of a group that fails without saving leaves no trace, even
// after it changed the state; the others before and after it are saved, and
// a refusal by the array (saved with its error) is not a failure.
func TestGroupFailedOperationLeavesNoTrace(t *testing.T) {
	a, _ := newTestArray(t)
	if err := a.AddVolumes(1, "v"); err != nil {
		t.Fatal(err)
	}
	release, leader := held(t, a)
	var before atomic.Int32
	ops := []struct {
		name    string
		fn      func(*State) error
		wantErr bool
	}{
		{"before", func(s *State) error {
			before.Add(1)
			s.Volumes["v"].Data += 10
			return nil
		}, false},
		{"failing", func(s *State) error {
			s.Volumes["v"].Data += 1000
			s.Volumes["w"] = &Volume{ID: "w"}
			return errors.New("failed after changing the state")
		}, true},
		{"refused by the array", func(s *State) error {
			s.Volumes["v"].Data += 100
			return errf(CodeFailedPrecondition, "refused")
		}, true},
		{"after", func(s *State) error {
			s.Volumes["v"].Data += 10000
			return nil
		}, false},
	}
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// update saves a refusal with its error, as the array's
			// operations do; Update saves nothing on any error.
			if i == 2 {
				errs[i] = a.update(func(s *State, _ time.Time) error { return op.fn(s) })
				return
			}
			errs[i] = a.Update(op.fn)
		}()
		queued(t, a, i+1) // in this order
	}
	release()
	wg.Wait()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	for i, op := range ops {
		if (errs[i] != nil) != op.wantErr {
			t.Errorf("%s: error %v, want an error: %v", op.name, errs[i], op.wantErr)
		}
	}
	s, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Volumes["v"].Data, int64(1+10+100+10000); got != want {
		t.Errorf("data %d, want %d", got, want)
	}
	if _, ok := s.Volumes["w"]; ok {
		t.Error("the failed operation's volume was saved")
	}
	// The operation before the failed one ran again on the state reread
	// from the file: proof that the group did start again.
	if n := before.Load(); n != 2 {
		t.Errorf("the operation before the failed one ran %d times, want 2", n)
	}
}

// Many goroutines of one process, some of whose operations fail after
// changing the state, others reading it: every operation that succeeded is
// saved exactly once and none that failed is (run it with -race).
func TestGroupUnderConcurrentFailures(t *testing.T) {
	a, _ := newTestArray(t)
	if err := a.AddVolumes(1, "v"); err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 30
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				fail := (g+i)%3 == 0
				err := a.Update(func(s *State) error {
					s.Volumes["v"].Data++
					s.Volumes["v"].Writes = map[string]int64{fmt.Sprint(g): int64(i)}
					if fail {
						return errors.New("failed")
					}
					return nil
				})
				switch {
				case fail && err == nil:
					t.Error("a failing operation succeeded")
				case !fail && err != nil:
					t.Error(err)
				case !fail:
					ok.Add(1)
				}
				if i%5 == 0 {
					if _, err := a.Snapshot(); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	s, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Volumes["v"].Data; got != ok.Load() {
		t.Errorf("data %d, want %d, the operations that succeeded", got, ok.Load())
	}
}
