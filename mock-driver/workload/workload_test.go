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

package workload

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/csi-fence/fence-attacher/mock-driver/array"

	"github.com/csi-fence/fence-attacher/internal/testpoll"
)

// waitFor waits for cond (testpoll.Until).
func waitFor(t *testing.T, what string, cond func() bool) { t.Helper(); testpoll.Until(t, what, cond) }

// A writer keeps writing through a fence: its writes are then refused, and
// counted as such.
func TestWriterThroughAFence(t *testing.T) {
	arr, err := array.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	arr = arr.WithoutSync()
	if err := arr.AddVolume("v", 1); err != nil {
		t.Fatal(err)
	}
	if err := arr.Publish("v", "n", true, false, array.Options{}); err != nil {
		t.Fatal(err)
	}
	var set Set
	set.Start(context.Background(), arr, "n", "v", time.Millisecond)
	waitFor(t, "accepted writes", func() bool { return len(set.List()) == 1 && set.List()[0].Accepted >= 3 })
	if err := arr.Unpublish("v", "n", true, array.Options{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refused writes", func() bool { return set.List()[0].Refused >= 3 })
	st, ok := set.Stop("v")
	if !ok || st.Running || st.Errors != 0 || st.LastError == "" || st.Volume != "v" || st.Node != "n" {
		t.Fatalf("final stats: %+v %v", st, ok)
	}
	if _, ok := set.Stop("v"); ok {
		t.Fatal("stopped twice")
	}
	s, _ := arr.Snapshot()
	if s.Volumes["v"].Writes["n"] != st.Accepted || s.Refused["write-fenced"] != st.Refused {
		t.Fatalf("the array counted %d writes and %d refusals, the writer %d and %d", s.Volumes["v"].Writes["n"], s.Refused["write-fenced"], st.Accepted, st.Refused)
	}
}

// Errors reading the array are told apart from refusals; Start replaces a
// running writer and StopAll stops them all.
func TestWriterErrorsAndReplace(t *testing.T) {
	dir := t.TempDir()
	arr, err := array.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var set Set
	set.Start(context.Background(), arr, "n", "missing", time.Millisecond)
	waitFor(t, "refused writes", func() bool { return set.List()[0].Refused >= 1 })
	set.Start(context.Background(), arr, "n", "missing", time.Hour)
	// The new writer starts from zero and writes once at once.
	waitFor(t, "the replacement's first write", func() bool { l := set.List(); return len(l) == 1 && l[0].Refused == 1 })
	if err := os.WriteFile(arr.StateFile(), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	set.Start(context.Background(), arr, "n", "other", time.Millisecond)
	waitFor(t, "errors", func() bool {
		for _, st := range set.List() {
			if st.Volume == "other" && st.Errors >= 1 && st.Refused == 0 {
				return true
			}
		}
		return false
	})
	set.StopAll()
	if l := set.List(); len(l) != 0 {
		t.Fatalf("after StopAll: %+v", l)
	}
}
