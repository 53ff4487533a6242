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

// Package array simulates the storage array behind the mock CSI driver: the
// volumes, the nodes (hosts) it knows, which nodes each volume is published to
// and with what access, and the I/O the nodes do. Its state lives in one JSON
// file guarded by an flock, so the controller instance and every node instance
// (separate processes) share it safely, and it survives their restarts.
//
// The array is also the referee of the safety invariants: it records every
// violation of S1 (a single-node volume published to a second node or
// writable from two nodes at once, or a write accepted from a node after the
// volume was published to another node or while another node can write) and
// S2 (a publish to a node where the volume is quarantined). By default it is
// a witness: it carries such publishes out, so that the CO's guards are what
// is proven. With Options.RefuseUnsafe it refuses them, as a strict driver
// would, and counts the refusals separately: a refusal is the array doing its
// job, a violation is the unsafe thing having happened.
package array

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// Access of a node to a volume, as the array's control plane records it.
const (
	// AccessGranted: published to the node; its data path is open.
	AccessGranted = "granted"
	// AccessFenced: the node's access was revoked by a fence; the volume is
	// quarantined on that node until a forced node-side cleanup.
	AccessFenced = "fenced"
	// AccessUnpublished: a plain ControllerUnpublishVolume dropped the
	// publication while the node was still using the volume, and the array
	// (like many real ones) did not cut the node's session: its data path stays
	// open until the node cleans up or goes quiet. This is the danger fencing
	// exists for; Options.PlainUnpublish chooses it.
	AccessUnpublished = "unpublished"
	// AccessDetached: a plain ControllerUnpublishVolume took the volume away
	// from a node that still held it staged or published, as a cloud detach
	// takes the disk away from the machine (PlainUnpublishDetach): the node's
	// data path is closed, reads and writes alike, and its stale mounts stay
	// until its node plugin cleans them up with plain NodeUnpublishVolume and
	// NodeUnstageVolume (there is nothing left to revoke, so no force is
	// needed). Until then a publish to that node counts as S2, as one to a
	// fenced node does: a fence by detach quarantines the volume there.
	AccessDetached = "detached"
)

// Invariants recorded by the array.
const (
	S1 = "S1"
	S2 = "S2"
)

// Kinds of refused requests (State.Refused) that S1 and S2 forbid, refused
// by an array with Options.RefuseUnsafe; a witness array carries them out and
// records the violation instead. The other kinds are the array's data path
// and fence policy doing their job.
const (
	RefusedPublishElsewhere   = "publish-elsewhere"   // S1
	RefusedPublishQuarantined = "publish-quarantined" // S2
)

// MaxViolationRecords bounds the detailed violation list; the counts are
// always complete.
const MaxViolationRecords = 200

// Publication is a volume's state on one node.
type Publication struct {
	Access    string    `json:"access"`
	ReadOnly  bool      `json:"readOnly,omitempty"`
	Since     time.Time `json:"since"`
	Staged    string    `json:"staged,omitempty"`    // staging path, if staged
	Published []string  `json:"published,omitempty"` // target paths, if published
	// NodeSide: the node plugin staged or published the volume at some point.
	// Once it has cleaned up again, its recent I/O no longer counts as use.
	NodeSide bool `json:"nodeSide,omitempty"`
	// ByNode marks a publication the node plugin granted itself (a driver
	// without a controller publish step): it ends with the node's cleanup.
	ByNode bool `json:"byNode,omitempty"`
	// Leaky marks a fence the array reported without cutting the node's data
	// path (the --broken-fence negative control).
	Leaky bool `json:"leaky,omitempty"`
	// LingerUntil is when an AccessUnpublished session expires if the node
	// holds nothing staged or published and does no more I/O; each accepted
	// I/O extends it by Linger.
	LingerUntil time.Time     `json:"lingerUntil,omitempty"`
	Linger      time.Duration `json:"linger,omitempty"`
}

// holds reports whether the node still has the volume staged or published.
func (p *Publication) holds() bool { return p.Staged != "" || len(p.Published) > 0 }

// Open reports whether the node's data path to the volume is open at now,
// whatever the control plane believes.
func (p *Publication) Open(now time.Time) bool {
	switch p.Access {
	case AccessGranted:
		return true
	case AccessFenced:
		return p.Leaky
	case AccessUnpublished:
		return p.holds() || now.Before(p.LingerUntil)
	case AccessDetached:
		return false
	}
	return false
}

// Volume is one volume of the array.
type Volume struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Capacity int64             `json:"capacity"`
	Context  map[string]string `json:"context,omitempty"`
	Created  time.Time         `json:"created"`
	// SingleNode: the volume's access mode allows one node only (RWO, RWOP);
	// these are the volumes S1 is about.
	SingleNode bool `json:"singleNode"`
	// Publications by node ID.
	Publications map[string]*Publication `json:"publications,omitempty"`
	// Owner is the node of the latest writable publication of a single-node
	// volume: a write accepted from any other node is an S1 violation.
	Owner string `json:"owner,omitempty"`
	// I/O counters by node ID. Writes counts writes of data (one per write
	// request of a file system, one per Write); Changes the other changes
	// a real data path made (Array.Change).
	Writes    map[string]int64     `json:"writes,omitempty"`
	Changes   map[string]int64     `json:"changes,omitempty"`
	Reads     map[string]int64     `json:"reads,omitempty"`
	LastWrite map[string]time.Time `json:"lastWrite,omitempty"`
	LastIO    map[string]time.Time `json:"lastIO,omitempty"`
	// Data is a monotonic counter of accepted writes, and who wrote last.
	Data       int64  `json:"data"`
	LastWriter string `json:"lastWriter,omitempty"`
}

// Node is a host the array knows, registered by the node instance of the
// driver when it starts.
type Node struct {
	ID string `json:"id"`
	// MaxVolumes is the most volumes the node may have published, 0 for no limit.
	MaxVolumes int64     `json:"maxVolumes,omitempty"`
	Registered time.Time `json:"registered"`
}

// Violation is one recorded breach of a safety invariant.
type Violation struct {
	Invariant string    `json:"invariant"` // S1 or S2
	Volume    string    `json:"volume"`
	Node      string    `json:"node"`
	Message   string    `json:"message"`
	Time      time.Time `json:"time"`
}

// State is the whole array.
type State struct {
	Volumes map[string]*Volume `json:"volumes"`
	Nodes   map[string]*Node   `json:"nodes,omitempty"`
	// Violations holds the latest MaxViolationRecords violations;
	// ViolationCounts counts them all, by invariant.
	Violations      []Violation      `json:"violations,omitempty"`
	ViolationCounts map[string]int64 `json:"violationCounts,omitempty"`
	// Refused counts requests the array refused, by kind: unsafe ones
	// ("publish-quarantined", "publish-elsewhere", "write-fenced", ...) and
	// fences it declined ("fence-refused-recent-io", "fence-unknown-recent-io").
	Refused map[string]int64 `json:"refused,omitempty"`
	// Overrides change the instances' Options at run time.
	Overrides Overrides `json:"overrides,omitempty"`
	NextID    int64     `json:"nextID"`
}

// CountViolations returns the number of violations per invariant; S1 and S2
// are always present.
func (s *State) CountViolations() map[string]int {
	out := map[string]int{S1: 0, S2: 0}
	for inv, n := range s.ViolationCounts {
		out[inv] = int(n)
	}
	return out
}

// RefusedUnsafe returns the number of refused publishes that S1 or S2
// forbid, by kind; both kinds are always present.
func (s *State) RefusedUnsafe() map[string]int64 {
	return map[string]int64{
		RefusedPublishElsewhere:   s.Refused[RefusedPublishElsewhere],
		RefusedPublishQuarantined: s.Refused[RefusedPublishQuarantined],
	}
}

// TotalViolations is the number of violations of every invariant.
func (s *State) TotalViolations() int64 {
	var n int64
	for _, c := range s.ViolationCounts {
		n += c
	}
	return n
}

func (s *State) violate(now time.Time, inv, vol, node, format string, args ...interface{}) {
	s.ViolationCounts[inv]++
	s.Violations = append(s.Violations, Violation{Invariant: inv, Volume: vol, Node: node, Message: fmt.Sprintf(format, args...), Time: now})
	if extra := len(s.Violations) - MaxViolationRecords; extra > 0 {
		s.Violations = append(s.Violations[:0], s.Violations[extra:]...)
	}
}

func (s *State) refuse(kind string) { s.Refused[kind]++ }

// sweep forgets unpublished sessions that have expired: the node let go.
func (s *State) sweep(now time.Time) {
	for _, v := range s.Volumes {
		for n, p := range v.Publications {
			if p.Access == AccessUnpublished && !p.Open(now) {
				delete(v.Publications, n)
			}
		}
	}
}

// Array is a handle on the state directory. Every operation works on the
// file under the lock, so any number of handles, in any number of processes,
// see one array. In memory it only caches the state as it last read or wrote
// the file, used while the file is still that one.
type Array struct {
	dir    string
	now    func() time.Time
	noSync bool
	// Shared with the copies WithClock and WithoutSync make.
	cache *cache
	group *group
}

// Open returns the array stored in dir, creating dir if needed.
func Open(dir string) (*Array, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Array{dir: dir, now: wallClock, cache: &cache{}, group: &group{}}, nil
}

// wallClock is time.Now without its monotonic reading, which the state file
// does not keep: a time in the cached state must compare with now as it would
// once read back from the file.
func wallClock() time.Time { return time.Now().Round(0) }

// WithClock returns a handle on the same array that reads time from now
// (tests use it to move past I/O windows without sleeping).
func (a *Array) WithClock(now func() time.Time) *Array {
	c := *a
	c.now = now
	return &c
}

// WithoutSync returns a handle that does not fsync its writes: faster, and
// still safe against process crashes (the rename is atomic), not against a
// machine crash. Benchmarks compare the two.
func (a *Array) WithoutSync() *Array {
	c := *a
	c.noSync = true
	return &c
}

// Dir is the state directory.
func (a *Array) Dir() string { return a.dir }

// StateFile is the path of the JSON state.
func (a *Array) StateFile() string { return filepath.Join(a.dir, "array.json") }

// Update runs fn on the state under an exclusive lock and saves the result
// atomically, unless fn returns an error. Other processes wait for the lock;
// this process's operations that arrive meanwhile are saved together (see
// group). fn must not keep s or anything in it: the handle caches what it
// saved. fn may run more than once (when another operation of its group
// fails), so it must assign its results, not accumulate them.
func (a *Array) Update(fn func(*State) error) error {
	return a.exclusive(func(s *State) (bool, error) {
		s.sweep(a.now())
		if err := fn(s); err != nil {
			return false, err
		}
		return true, nil
	})
}

// update is Update for operations that record refusals: fn's changes are
// saved even when it returns an error, so a refused request is counted.
func (a *Array) update(fn func(*State, time.Time) error) error {
	var opErr error
	err := a.exclusive(func(s *State) (bool, error) {
		now := a.now()
		s.sweep(now)
		opErr = fn(s, now)
		var ae *Error
		if opErr != nil && !errors.As(opErr, &ae) {
			return false, opErr // not a decision of the array: save nothing
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	return opErr
}

// View runs fn on a copy of the state under a shared lock; changes are not
// saved, and fn may keep it.
func (a *Array) View(fn func(*State) error) error {
	unlock, err := a.lock(syscall.LOCK_SH)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := a.load(false)
	if err != nil {
		return err
	}
	return fn(s)
}

// Snapshot returns a copy of the state.
func (a *Array) Snapshot() (*State, error) {
	var out *State
	err := a.View(func(s *State) error {
		out = s
		return nil
	})
	return out, err
}

// lock takes the array's lock, shared or exclusive, on a new open file
// description: flock(2) locks those, so goroutines of one process exclude
// each other as processes do.
func (a *Array) lock(how int) (unlock func(), err error) {
	lf, err := os.OpenFile(filepath.Join(a.dir, "array.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flock(lf, how); err != nil {
		lf.Close()
		return nil, fmt.Errorf("locking array state: %w", err)
	}
	return func() {
		// Closing the file releases the lock too; unlock first so that a
		// slow close does not hold others up.
		syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) //nolint:errcheck
		lf.Close()
	}, nil
}

// flock retries on EINTR, which a signal to the process can cause.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// load returns the state, from the cache if the file has not changed since:
// with own, the state itself for the caller to change; otherwise a copy, and
// what it read goes to the cache.
func (a *Array) load(own bool) (*State, error) {
	if s := a.cache.get(a.StateFile(), own); s != nil {
		return s, nil
	}
	s, f, id, err := a.read()
	if err != nil || f == nil {
		return s, err
	}
	if own {
		f.Close()
		return s, nil
	}
	out := s.clone()
	a.cache.keep(f, id, s)
	return out, nil
}

// read reads the state file, and returns it open (nil if there is none) with
// its identity as it was before the read, for the cache.
func (a *Array) read() (*State, *os.File, fileID, error) {
	s := &State{}
	f, id, err := openState(a.StateFile())
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, nil, id, err
	default:
		b, err := io.ReadAll(f)
		if err == nil {
			// A corrupt file is an error for every operation, and is never
			// overwritten: nothing is lost, and someone has to look.
			if err = json.Unmarshal(b, s); err != nil {
				err = fmt.Errorf("corrupt array state %s: %w", a.StateFile(), err)
			}
		}
		if err != nil {
			f.Close()
			return nil, nil, id, err
		}
	}
	if s.Volumes == nil {
		s.Volumes = map[string]*Volume{}
	}
	if s.Nodes == nil {
		s.Nodes = map[string]*Node{}
	}
	if s.Refused == nil {
		s.Refused = map[string]int64{}
	}
	if s.ViolationCounts == nil {
		s.ViolationCounts = map[string]int64{}
	}
	return s, f, id, nil
}

// store replaces the state file atomically: readers see the old or the new
// state, never a torn one, whatever happens to this process.
func (a *Array) store(b []byte, sync bool) error {
	tmp := a.StateFile() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, a.StateFile())
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
