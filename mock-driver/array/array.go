// Package array simulates the storage array behind the mock CSI driver: the
// volumes, which nodes each is published to and with what access, and the I/O
// the nodes do. Its state lives in one JSON file guarded by an flock, so the
// controller instance and every node instance (separate processes) share it
// safely and it survives their restarts.
//
// The array is also the referee of the safety invariants: it records every
// violation of S1 (a single-node volume writable from two nodes, or a write
// accepted from a node after the volume was published elsewhere) and S2 (a
// publish to a node where the volume is quarantined).
package array

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// Access of a node to a volume.
const (
	AccessGranted = "granted"
	// AccessFenced: the node's access was revoked by a fence; the volume is
	// quarantined on that node until a forced node-side cleanup.
	AccessFenced = "fenced"
)

// Publication is a volume's state on one node.
type Publication struct {
	Access    string    `json:"access"`
	ReadOnly  bool      `json:"readOnly,omitempty"`
	Since     time.Time `json:"since"`
	Staged    string    `json:"staged,omitempty"`    // staging path, if staged
	Published []string  `json:"published,omitempty"` // target paths, if published
}

// Volume is one volume of the array.
type Volume struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Capacity   int64  `json:"capacity"`
	SingleNode bool   `json:"singleNode"`
	// Publications by node ID.
	Publications map[string]*Publication `json:"publications,omitempty"`
	// Writes and LastWrite by node ID.
	Writes    map[string]int64     `json:"writes,omitempty"`
	LastWrite map[string]time.Time `json:"lastWrite,omitempty"`
	// Data is a monotonic counter of accepted writes, and who wrote last.
	Data       int64  `json:"data"`
	LastWriter string `json:"lastWriter,omitempty"`
}

// Violation is one recorded breach of a safety invariant.
type Violation struct {
	Invariant string    `json:"invariant"` // "S1" or "S2"
	Volume    string    `json:"volume"`
	Node      string    `json:"node"`
	Message   string    `json:"message"`
	Time      time.Time `json:"time"`
}

// State is the whole array.
type State struct {
	Volumes    map[string]*Volume `json:"volumes"`
	Violations []Violation        `json:"violations,omitempty"`
	// Refused counts unsafe requests the array refused, by kind
	// (e.g. "publish-quarantined", "write-fenced"): the system asked for
	// something unsafe, the array said no.
	Refused map[string]int64 `json:"refused,omitempty"`
	NextID  int64            `json:"nextID"`
}

// Array is a handle on the state directory.
type Array struct {
	dir string
}

// Open returns the array stored in dir, creating dir if needed.
func Open(dir string) (*Array, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Array{dir: dir}, nil
}

// Dir is the state directory.
func (a *Array) Dir() string { return a.dir }

func (a *Array) statePath() string { return filepath.Join(a.dir, "array.json") }

// Update runs fn on the state under an exclusive lock and saves the result
// atomically, unless fn returns an error. Other processes wait for the lock.
func (a *Array) Update(fn func(*State) error) error {
	return a.locked(syscall.LOCK_EX, func(s *State) (bool, error) {
		if err := fn(s); err != nil {
			return false, err
		}
		return true, nil
	})
}

// View runs fn on a snapshot of the state under a shared lock.
func (a *Array) View(fn func(*State) error) error {
	return a.locked(syscall.LOCK_SH, func(s *State) (bool, error) { return false, fn(s) })
}

// ErrRefused wraps errors for unsafe requests that were refused.
var ErrRefused = errors.New("refused")

func (a *Array) locked(how int, fn func(*State) (bool, error)) error {
	lf, err := os.OpenFile(filepath.Join(a.dir, "array.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), how); err != nil {
		return fmt.Errorf("locking array state: %w", err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)

	s := &State{}
	b, err := os.ReadFile(a.statePath())
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(b, s); err != nil {
			return fmt.Errorf("corrupt array state %s: %w", a.statePath(), err)
		}
	}
	if s.Volumes == nil {
		s.Volumes = map[string]*Volume{}
	}
	if s.Refused == nil {
		s.Refused = map[string]int64{}
	}
	save, err := fn(s)
	if err != nil || !save {
		return err
	}
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := a.statePath() + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, a.statePath())
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

func (s *State) violate(inv, vol, node, format string, args ...interface{}) {
	s.Violations = append(s.Violations, Violation{Invariant: inv, Volume: vol, Node: node, Message: fmt.Sprintf(format, args...), Time: time.Now()})
}

// CountViolations returns the number of violations per invariant.
func (s *State) CountViolations() map[string]int {
	out := map[string]int{"S1": 0, "S2": 0}
	for _, v := range s.Violations {
		out[v.Invariant]++
	}
	return out
}

// checkSingleWriter records an S1 violation when a single-node volume is
// writable (granted) from more than one node.
func (s *State) checkSingleWriter(v *Volume) {
	if !v.SingleNode {
		return
	}
	var granted []string
	for n, p := range v.Publications {
		if p.Access == AccessGranted && !p.ReadOnly {
			granted = append(granted, n)
		}
	}
	if len(granted) > 1 {
		sort.Strings(granted)
		s.violate("S1", v.ID, granted[len(granted)-1], "single-node volume writable from nodes %v at once", granted)
	}
}
