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
	"os/exec"
	"strconv"
	"sync"
	"testing"
)

// Concurrent writers lose no update: every accepted write is counted once.
// Concurrent publishes of one single-node volume to different nodes grant
// exactly one of them on a strict array (RefuseUnsafe). Run once with goroutines sharing one handle, once with
// a handle per goroutine (each opens its own lock file description, as
// separate processes do), and once with real processes.

const (
	workers     = 6
	writesEach  = 40
	helperEnv   = "ARRAY_TEST_HELPER"
	helperDir   = "ARRAY_TEST_DIR"
	helperIndex = "ARRAY_TEST_INDEX"
)

// work is what one worker does: writes to the shared multi-node volume, and
// one attempt to publish the single-node volume to its own node.
func work(a *Array, i int) (published bool, err error) {
	node := fmt.Sprintf("node-%d", i)
	if err := a.Publish("shared", node, false, false, Options{}); err != nil {
		return false, err
	}
	for j := 0; j < writesEach; j++ {
		if err := a.Write("shared", node); err != nil {
			return false, err
		}
	}
	err = a.Publish("rwo", node, true, false, Options{RefuseUnsafe: true})
	var ae *Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ae) && ae.Code == CodeFailedPrecondition:
		return false, nil
	}
	return false, err
}

func setup(t *testing.T) (string, *Array) {
	t.Helper()
	dir := t.TempDir()
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"shared", "rwo"} {
		if err := a.AddVolume(id, 1); err != nil {
			t.Fatal(err)
		}
	}
	return dir, a
}

func check(t *testing.T, a *Array, published int) {
	t.Helper()
	s, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Volumes["shared"].Data; got != workers*writesEach {
		t.Errorf("shared volume counted %d writes, want %d (lost updates)", got, workers*writesEach)
	}
	for i := 0; i < workers; i++ {
		if got := s.Volumes["shared"].Writes[fmt.Sprintf("node-%d", i)]; got != writesEach {
			t.Errorf("node-%d: %d writes, want %d", i, got, writesEach)
		}
	}
	granted := 0
	for _, p := range s.Volumes["rwo"].Publications {
		if p.Access == AccessGranted {
			granted++
		}
	}
	if published != 1 || granted != 1 {
		t.Errorf("single-node volume: %d publishes succeeded and %d nodes granted, want 1 and 1", published, granted)
	}
	if s.Refused["publish-elsewhere"] != workers-1 {
		t.Errorf("refused publish-elsewhere: %d, want %d", s.Refused["publish-elsewhere"], workers-1)
	}
	if n := s.TotalViolations(); n != 0 {
		t.Errorf("%d violations: %+v", n, s.Violations)
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	for _, ownHandle := range []bool{false, true} {
		t.Run(fmt.Sprintf("own handle %v", ownHandle), func(t *testing.T) {
			dir, shared := setup(t)
			var wg sync.WaitGroup
			var mu sync.Mutex
			published := 0
			errs := make(chan error, workers)
			for i := 0; i < workers; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a := shared
					if ownHandle {
						var err error
						if a, err = Open(dir); err != nil {
							errs <- err
							return
						}
					}
					ok, err := work(a, i)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						mu.Lock()
						published++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			check(t, shared, published)
		})
	}
}

// TestConcurrentProcesses runs the workers as separate processes (this test
// binary, re-executed as TestHelperProcess).
func TestConcurrentProcesses(t *testing.T) {
	dir, a := setup(t)
	cmds := make([]*exec.Cmd, workers)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmds[i].Env = append(os.Environ(), helperEnv+"=1", helperDir+"="+dir, helperIndex+"="+strconv.Itoa(i))
	}
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	published := 0
	for i, c := range cmds {
		err := c.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee) && ee.ExitCode() == 3:
			published++ // exit code 3 says "my publish succeeded"
		default:
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	check(t, a, published)
}

func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper of TestConcurrentProcesses")
	}
	a, err := Open(os.Getenv(helperDir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	i, _ := strconv.Atoi(os.Getenv(helperIndex))
	ok, err := work(a, i)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if ok {
		os.Exit(3)
	}
	os.Exit(0)
}

// BenchmarkWrite measures one accepted write (lock, read, decide, write,
// rename) on an array of 50 volumes, with and without fsync.
func BenchmarkWrite(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", sync), func(b *testing.B) {
			a, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			if !sync {
				a = a.WithoutSync()
			}
			for i := 0; i < 50; i++ {
				id := fmt.Sprintf("v%d", i)
				if err := a.AddVolume(id, 1); err != nil {
					b.Fatal(err)
				}
				if err := a.Publish(id, "n", true, false, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := a.Write("v7", "n"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
