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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fixture returns a handle on a small array with something in every part of
// the state, whose cache holds it.
func fixture(t *testing.T) *Array {
	t.Helper()
	a, _ := newTestArray(t)
	for _, op := range []func() error{
		func() error { return a.AddVolumes(1, "v", "w") },
		func() error { return a.RegisterNodes(4, "n", "m") },
		func() error { return a.Publish("v", "n", true, false, Options{}) },
		func() error { return a.NodeStage("v", "n", "/staging/v") },
		func() error { return a.NodePublish("v", "n", "/target/v", "/staging/v") },
		func() error { return a.Write("v", "n") },
		func() error { return a.Publish("v", "m", true, false, Options{}) }, // S1
		func() error {
			if err := a.Write("v", "x"); err == nil {
				return errors.New("a write from a node without access was accepted")
			}
			return nil // refused, and counted
		},
		func() error { b := true; return a.SetOverrides(Overrides{BrokenFence: &b}) },
	} {
		if err := op(); err != nil {
			t.Fatal(err)
		}
	}
	mustBeCached(t, a)
	return a
}

// mustBeCached fails a test that would prove nothing without a cache.
func mustBeCached(t *testing.T, a *Array) {
	t.Helper()
	if a.cache.s == nil {
		t.Fatal("the handle has no cached state")
	}
}

// change changes every part of s a little.
func change(s *State) {
	s.Volumes["v"].Data = 99
	s.Volumes["v"].Writes["n"]++
	s.Volumes["v"].Publications["n"].Published[0] = "/elsewhere"
	delete(s.Volumes["v"].Publications, "m")
	delete(s.Volumes, "w")
	s.Volumes["u"] = &Volume{ID: "u"}
	s.Nodes["n"].MaxVolumes = 7
	s.Violations[0].Message = "changed"
	s.ViolationCounts[S2]++
	s.Refused["write-unpublished"]++
	*s.Overrides.BrokenFence = false
	s.NextID++
}

func stateJSON(t *testing.T, s *State) string {
	t.Helper()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// seen returns the state as the handle's next operations see it, the next
// Snapshot and the next Update, after checking that they agree, and that a
// new handle (reading the file) agrees too.
func seen(t *testing.T, a *Array) string {
	t.Helper()
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var upd string
	if err := a.Update(func(s *State) error {
		upd = stateJSON(t, s)
		return errors.New("only looking")
	}); err == nil {
		t.Fatal("Update did not return fn's error")
	}
	fresh, err := Open(a.Dir())
	if err != nil {
		t.Fatal(err)
	}
	file, err := fresh.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := stateJSON(t, snap)
	if upd != got {
		t.Errorf("the next Update sees\n%s\nthe next Snapshot\n%s", upd, got)
	}
	if f := stateJSON(t, file); f != got {
		t.Errorf("the file holds\n%s\nthe handle sees\n%s", f, got)
	}
	return got
}

// A handle sees what other handles saved since it cached the state (another
// handle has its own cache, as another process does), and what a writer in
// place (an editor) wrote.
func TestCacheSeesOtherWriters(t *testing.T) {
	other := func(ids ...string) func(t *testing.T, a *Array) {
		return func(t *testing.T, a *Array) {
			b, err := Open(a.Dir())
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if err := b.AddVolume(id, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	inPlace := func(t *testing.T, a *Array) {
		var s State
		b, err := os.ReadFile(a.StateFile())
		if err == nil {
			err = json.Unmarshal(b, &s)
		}
		if err != nil {
			t.Fatal(err)
		}
		s.Volumes["x"] = &Volume{ID: "x"}
		if b, err = json.Marshal(&s); err == nil {
			err = os.WriteFile(a.StateFile(), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, fill := range []struct {
		name string
		op   func(*Array) error
	}{
		{"an update", func(a *Array) error { return a.AddVolume("v", 1) }},
		{"a view", func(a *Array) error { _, err := a.Snapshot(); return err }},
	} {
		for _, write := range []struct {
			name  string
			write func(*testing.T, *Array)
			want  []string
		}{
			{"another handle's update", other("x"), []string{"v", "x"}},
			// The first store's file is freed by the second, whose inode
			// a file system may give to a third.
			{"another handle's updates", other("x", "y", "z"), []string{"v", "x", "y", "z"}},
			{"a write in place", inPlace, []string{"v", "x"}},
		} {
			t.Run(fill.name+" then "+write.name, func(t *testing.T) {
				a, err := Open(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				if err := a.AddVolume("v", 1); err != nil {
					t.Fatal(err)
				}
				if err := fill.op(a); err != nil {
					t.Fatal(err)
				}
				mustBeCached(t, a)
				write.write(t, a)
				s, err := a.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				if got := sortedKeys(s.Volumes); !reflect.DeepEqual(got, write.want) {
					t.Errorf("volumes %v, want %v", got, write.want)
				}
				seen(t, a)
			})
		}
	}
}

// An Update whose fn changes the state and fails leaves no trace, nor does
// an update whose fn fails other than by a decision of the array; a refusal
// by the array is saved.
func TestFailedUpdateLeavesNoTrace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    func(*Array) error
		saved bool
	}{
		{"Update", func(a *Array) error {
			return a.Update(func(s *State) error { change(s); return errors.New("failed") })
		}, false},
		{"update, not a decision of the array", func(a *Array) error {
			return a.update(func(s *State, _ time.Time) error { change(s); return errors.New("failed") })
		}, false},
		{"update refused by the array", func(a *Array) error {
			return a.update(func(s *State, _ time.Time) error { change(s); return errf(CodeFailedPrecondition, "refused") })
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := fixture(t)
			want, err := a.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if tc.saved {
				change(want)
			}
			if err := tc.op(a); err == nil {
				t.Fatal("the operation did not fail")
			}
			if got := seen(t, a); got != stateJSON(t, want) {
				t.Errorf("state after the operation:\n%s\nwant\n%s", got, stateJSON(t, want))
			}
		})
	}
}

// The state a Snapshot or View hands out is the caller's: changing it changes
// nothing else, and later operations do not change it.
func TestSnapshotIsACopy(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func(*Array) (*State, error)
	}{
		{"Snapshot", func(a *Array) (*State, error) {
			s, err := a.Snapshot()
			if err == nil {
				change(s)
			}
			return s, err
		}},
		{"View", func(a *Array) (*State, error) {
			var kept *State
			err := a.View(func(s *State) error { change(s); kept = s; return nil })
			return kept, err
		}},
		{"View that fails", func(a *Array) (*State, error) {
			var kept *State
			err := a.View(func(s *State) error { change(s); kept = s; return errors.New("failed") })
			if err == nil {
				return nil, errors.New("View did not return fn's error")
			}
			return kept, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := fixture(t)
			before, err := a.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			kept, err := tc.op(a)
			if err != nil {
				t.Fatal(err)
			}
			if got := seen(t, a); got != stateJSON(t, before) {
				t.Errorf("state after changing a copy:\n%s\nwant\n%s", got, stateJSON(t, before))
			}
			changed := stateJSON(t, kept)
			if err := a.Write("v", "n"); err != nil {
				t.Fatal(err)
			}
			if got := stateJSON(t, kept); got != changed {
				t.Errorf("a later operation changed the caller's copy:\n%s\nwas\n%s", got, changed)
			}
		})
	}
}

// Values the caller passes in or gets back are not the cached state's.
func TestCallerValuesNotKept(t *testing.T) {
	a, _ := newTestArray(t)
	b := true
	ctx := map[string]string{"k": "v"}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.SetOverrides(Overrides{BrokenFence: &b}))
	v, err := a.CreateVolume(CreateArgs{Name: "pvc", RequiredBytes: 1, Context: ctx})
	must(err)
	again, err := a.CreateVolume(CreateArgs{Name: "pvc", RequiredBytes: 1})
	must(err)
	mustBeCached(t, a)
	b = false
	ctx["k"] = "changed by the caller"
	v.Context["k"] = "changed in the result"
	again.Context["k"] = "changed in the existing volume's result"
	s, err := a.Snapshot()
	must(err)
	if !*s.Overrides.BrokenFence || s.Volumes[v.ID].Context["k"] != "v" {
		t.Errorf("overrides %+v, context %v: changed by the caller", s.Overrides, s.Volumes[v.ID].Context)
	}
}

// fill sets every exported field reachable from v, with one entry in every
// map and slice.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(1, 0)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	default:
		panic("fill: add " + v.Kind().String())
	}
}

// shared returns the path of a map, slice or pointer that a and b share.
func shared(path string, a, b reflect.Value) string {
	switch a.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			return path
		}
	}
	switch a.Kind() {
	case reflect.Pointer:
		if !a.IsNil() {
			return shared(path, a.Elem(), b.Elem())
		}
	case reflect.Map:
		for _, k := range a.MapKeys() {
			if p := shared(fmt.Sprintf("%s[%v]", path, k), a.MapIndex(k), b.MapIndex(k)); p != "" {
				return p
			}
		}
	case reflect.Slice:
		for i := 0; i < a.Len(); i++ {
			if p := shared(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i)); p != "" {
				return p
			}
		}
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if a.Type().Field(i).IsExported() {
				if p := shared(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i)); p != "" {
					return p
				}
			}
		}
	}
	return ""
}

// clone copies every field of the state, and shares nothing with it.
func TestCloneIsDeep(t *testing.T) {
	s := &State{}
	fill(reflect.ValueOf(s).Elem())
	c := s.clone()
	if !reflect.DeepEqual(s, c) {
		t.Errorf("clone\n%+v\nof\n%+v", c, s)
	}
	if p := shared("State", reflect.ValueOf(s), reflect.ValueOf(c)); p != "" {
		t.Errorf("the clone shares %s", p)
	}
}

// bigState is the state file of an array of 300 volumes and 100 nodes, each
// volume published, staged, published on its node and written once: about
// what the failover benchmark's controller works on. It is built once, with
// the package's own operations, and copied for each user.
var bigState = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "array-big-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	a, err := Open(dir)
	if err != nil {
		return nil, err
	}
	a = a.WithoutSync()
	nodes := make([]string, 100)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%03d", i)
	}
	vols := make([]string, 300)
	for i := range vols {
		vols[i] = fmt.Sprintf("pvc-%08d-0000-4000-8000-%012d", i, i)
	}
	if err := a.RegisterNodes(0, nodes...); err != nil {
		return nil, err
	}
	if err := a.AddVolumes(1<<30, vols...); err != nil {
		return nil, err
	}
	for i, id := range vols {
		node := nodes[i%len(nodes)]
		staging := "/var/lib/kubelet/plugins/kubernetes.io/csi/fence.csi.example/" + id + "/globalmount"
		target := "/var/lib/kubelet/pods/" + id + "/volumes/kubernetes.io~csi/" + id + "/mount"
		for _, op := range []func() error{
			func() error { return a.Publish(id, node, true, false, Options{}) },
			func() error { return a.NodeStage(id, node, staging) },
			func() error { return a.NodePublish(id, node, target, staging) },
			func() error { return a.Write(id, node) },
		} {
			if err := op(); err != nil {
				return nil, err
			}
		}
	}
	return os.ReadFile(a.StateFile())
})

// openBig returns a handle on a copy of bigState in a new directory.
func openBig(tb testing.TB) *Array {
	tb.Helper()
	b, err := bigState()
	if err != nil {
		tb.Fatal(err)
	}
	a, err := Open(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.Dir(), "array.json"), b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return a
}

// BenchmarkUpdate measures one Update of the big state by one handle, as the
// controller instance does them one after the other; without fsync, whose
// cost is the disk's and not the simulation's.
func BenchmarkUpdate(b *testing.B) {
	a := openBig(b).WithoutSync()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := a.Update(func(s *State) error {
			s.Volumes["pvc-00000007-0000-4000-8000-000000000007"].Data++
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateParallel measures Updates of the big state by ten
// goroutines sharing a handle, as the controller instance serves the
// failover's ten fences at once: the group saves those waiting together.
func BenchmarkUpdateParallel(b *testing.B) {
	a := openBig(b).WithoutSync()
	b.SetParallelism((10 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := next.Add(1) % 300
		id := fmt.Sprintf("pvc-%08d-0000-4000-8000-%012d", n, n)
		for pb.Next() {
			if err := a.Update(func(s *State) error {
				s.Volumes[id].Data++
				return nil
			}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// Goroutines of one process exclude each other as processes do: every
// operation opens the lock file anew, and flock(2) locks an open file
// description, not a process.
func TestFlockPerOpen(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name          string
		held, tried   int
		wantExclusion bool
	}{
		{"exclusive, then shared", syscall.LOCK_EX, syscall.LOCK_SH, true},
		{"shared, then exclusive", syscall.LOCK_SH, syscall.LOCK_EX, true},
		{"exclusive, then exclusive", syscall.LOCK_EX, syscall.LOCK_EX, true},
		{"shared, then shared", syscall.LOCK_SH, syscall.LOCK_SH, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fs [2]*os.File
			for i := range fs {
				f, err := os.OpenFile(filepath.Join(dir, "array.lock"), os.O_CREATE|os.O_RDWR, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				fs[i] = f
			}
			if err := flock(fs[0], tc.held); err != nil {
				t.Fatal(err)
			}
			err := flock(fs[1], tc.tried|syscall.LOCK_NB)
			if got := errors.Is(err, syscall.EWOULDBLOCK); got != tc.wantExclusion || (err != nil && !got) {
				t.Errorf("second lock: %v, want exclusion %v", err, tc.wantExclusion)
			}
		})
	}
}
