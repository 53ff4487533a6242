package array

import (
	"fmt"
	"sort"
	"time"
)

// Code classifies an error of an array operation; the driver maps it to a
// gRPC code.
type Code int

const (
	CodeNotFound Code = iota + 1
	CodeFailedPrecondition
	CodeUnavailable
	CodePermissionDenied
	CodeInvalidArgument
)

// Error is an array error with a Code.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errf(code Code, format string, args ...interface{}) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// FencePolicy says what a fence does while the node still shows recent I/O,
// like a real array deciding whether it can prove the node stopped.
type FencePolicy string

const (
	// FenceRevoke revokes access and succeeds.
	FenceRevoke FencePolicy = "revoke"
	// FenceRefuse refuses (FAILED_PRECONDITION): the array cannot prove the
	// node stopped using the volume.
	FenceRefuse FencePolicy = "refuse"
	// FenceUnknown cannot tell (UNAVAILABLE).
	FenceUnknown FencePolicy = "unknown"
)

// Options tune the array's behaviour; the broken modes exist to prove that
// the tests notice them.
type Options struct {
	FencePolicy FencePolicy
	// RecentIO is how recent a write must be to count as "recent I/O".
	RecentIO time.Duration
	// BrokenFence makes a fence report success without revoking access.
	BrokenFence bool
	// BrokenQuarantine lets a publish through on a node where the volume is
	// quarantined (and records the S2 violation that is).
	BrokenQuarantine bool
}

// CreateVolume creates a volume named name, or returns the existing one.
func (a *Array) CreateVolume(name string, capacity int64) (*Volume, error) {
	var out Volume
	err := a.Update(func(s *State) error {
		for _, v := range s.Volumes {
			if v.Name == name {
				if v.Capacity < capacity {
					return errf(CodeFailedPrecondition, "volume %s exists with capacity %d < %d", name, v.Capacity, capacity)
				}
				out = *v
				return nil
			}
		}
		s.NextID++
		v := &Volume{ID: fmt.Sprintf("vol-%04d", s.NextID), Name: name, Capacity: capacity, SingleNode: true}
		s.Volumes[v.ID] = v
		out = *v
		return nil
	})
	return &out, err
}

// AddVolume adds a volume with a given ID (for statically provisioned PVs).
func (a *Array) AddVolume(id string, capacity int64) error {
	return a.Update(func(s *State) error {
		if _, ok := s.Volumes[id]; !ok {
			s.Volumes[id] = &Volume{ID: id, Name: id, Capacity: capacity, SingleNode: true}
		}
		return nil
	})
}

// DeleteVolume deletes a volume that is not published anywhere.
func (a *Array) DeleteVolume(id string) error {
	return a.Update(func(s *State) error {
		v, ok := s.Volumes[id]
		if !ok {
			return nil
		}
		if len(v.Publications) > 0 {
			return errf(CodeFailedPrecondition, "volume %s is still published to %v", id, nodesOf(v))
		}
		delete(s.Volumes, id)
		return nil
	})
}

// Publish grants node access to the volume (ControllerPublishVolume).
func (a *Array) Publish(id, node string, singleNode, readOnly bool, opts Options) error {
	return a.Update(func(s *State) error {
		v, ok := s.Volumes[id]
		if !ok {
			return errf(CodeNotFound, "volume %s not found", id)
		}
		v.SingleNode = singleNode
		if v.Publications == nil {
			v.Publications = map[string]*Publication{}
		}
		if p, ok := v.Publications[node]; ok {
			if p.Access == AccessFenced {
				if !opts.BrokenQuarantine {
					s.Refused["publish-quarantined"]++
					return errf(CodeFailedPrecondition, "volume %s is quarantined on node %s: a forced NodeUnpublish/NodeUnstage must clean it up first", id, node)
				}
				s.violate("S2", id, node, "published to node %s where it is quarantined", node)
				p.Access = AccessGranted
				s.checkSingleWriter(v)
				return nil
			}
			if p.ReadOnly != readOnly {
				return errf(CodeFailedPrecondition, "volume %s already published to %s with readonly=%v", id, node, p.ReadOnly)
			}
			return nil // idempotent
		}
		if singleNode && !readOnly {
			for other, p := range v.Publications {
				if p.Access == AccessGranted {
					s.Refused["publish-elsewhere"]++
					return errf(CodeFailedPrecondition, "volume %s is single-node and still published to node %s", id, other)
				}
			}
		}
		v.Publications[node] = &Publication{Access: AccessGranted, ReadOnly: readOnly, Since: time.Now()}
		s.checkSingleWriter(v)
		return nil
	})
}

// Unpublish removes node's access (ControllerUnpublishVolume). With fence the
// access is revoked and the volume quarantined on the node; without it, the
// publication is dropped. Unknown volumes and nodes succeed, as the spec asks.
func (a *Array) Unpublish(id, node string, fence bool, opts Options) error {
	return a.Update(func(s *State) error {
		v, ok := s.Volumes[id]
		if !ok {
			return nil
		}
		p, ok := v.Publications[node]
		if !fence {
			if ok && p.Access == AccessGranted {
				delete(v.Publications, node)
			}
			return nil
		}
		if ok && p.Access == AccessFenced {
			return nil // idempotent
		}
		if last, wrote := v.LastWrite[node]; wrote && time.Since(last) < opts.RecentIO {
			switch opts.FencePolicy {
			case FenceRefuse:
				s.Refused["fence-recent-io"]++
				return errf(CodeFailedPrecondition, "node %s wrote to volume %s %s ago: cannot prove it stopped using it", node, id, time.Since(last).Round(time.Millisecond))
			case FenceUnknown:
				return errf(CodeUnavailable, "cannot tell whether node %s stopped using volume %s", node, id)
			}
		}
		if opts.BrokenFence {
			return nil // lie: success without revoking
		}
		if v.Publications == nil {
			v.Publications = map[string]*Publication{}
		}
		if !ok {
			p = &Publication{}
			v.Publications[node] = p
		}
		p.Access = AccessFenced
		p.Since = time.Now()
		return nil
	})
}

// NodeStage records the volume staged at path on node.
func (a *Array) NodeStage(id, node, path string) error {
	return a.Update(func(s *State) error {
		p, err := granted(s, id, node)
		if err != nil {
			return err
		}
		p.Staged = path
		return nil
	})
}

// NodePublish records the volume published at path on node.
func (a *Array) NodePublish(id, node, path string) error {
	return a.Update(func(s *State) error {
		p, err := granted(s, id, node)
		if err != nil {
			return err
		}
		for _, t := range p.Published {
			if t == path {
				return nil
			}
		}
		p.Published = append(p.Published, path)
		return nil
	})
}

// NodeUnpublish removes path from the node's publications. On a fenced
// volume it needs force; when nothing of a fenced volume is left on the node
// the quarantine is lifted.
func (a *Array) NodeUnpublish(id, node, path string, force bool) error {
	return a.Update(func(s *State) error {
		v, p := lookup(s, id, node)
		if p == nil {
			return nil
		}
		if p.Access == AccessFenced && !force {
			return errf(CodeFailedPrecondition, "volume %s is fenced on node %s: only a forced NodeUnpublishVolume can clean it up", id, node)
		}
		kept := p.Published[:0]
		for _, t := range p.Published {
			if t != path {
				kept = append(kept, t)
			}
		}
		p.Published = kept
		liftQuarantine(v, node)
		return nil
	})
}

// NodeUnstage clears the staging of the volume on node, with the same rules
// as NodeUnpublish.
func (a *Array) NodeUnstage(id, node string, force bool) error {
	return a.Update(func(s *State) error {
		v, p := lookup(s, id, node)
		if p == nil {
			return nil
		}
		if p.Access == AccessFenced && !force {
			return errf(CodeFailedPrecondition, "volume %s is fenced on node %s: only a forced NodeUnstageVolume can clean it up", id, node)
		}
		if len(p.Published) > 0 && p.Access == AccessGranted {
			return errf(CodeFailedPrecondition, "volume %s is still published on node %s at %v", id, node, p.Published)
		}
		p.Staged = ""
		p.Published = nil
		liftQuarantine(v, node)
		return nil
	})
}

func liftQuarantine(v *Volume, node string) {
	p := v.Publications[node]
	if p != nil && p.Access == AccessFenced && p.Staged == "" && len(p.Published) == 0 {
		delete(v.Publications, node)
	}
}

// Write is one write of a workload on node to the volume. It is refused when
// the node has no access (fenced, or never published). An accepted write
// while the volume is granted to another node too is an S1 violation.
func (a *Array) Write(id, node string) error {
	return a.Update(func(s *State) error {
		v, ok := s.Volumes[id]
		if !ok {
			return errf(CodeNotFound, "volume %s not found", id)
		}
		p := v.Publications[node]
		if p == nil || p.Access != AccessGranted {
			kind := "write-unpublished"
			if p != nil {
				kind = "write-fenced"
			}
			s.Refused[kind]++
			return errf(CodePermissionDenied, "node %s has no access to volume %s", node, id)
		}
		if p.ReadOnly {
			return errf(CodePermissionDenied, "volume %s is read-only on node %s", id, node)
		}
		if v.SingleNode {
			for other, op := range v.Publications {
				if other != node && op.Access == AccessGranted && !op.ReadOnly {
					s.violate("S1", id, node, "write from node %s accepted while the volume is also writable from node %s", node, other)
				}
			}
		}
		if v.Writes == nil {
			v.Writes = map[string]int64{}
			v.LastWrite = map[string]time.Time{}
		}
		v.Writes[node]++
		v.LastWrite[node] = time.Now()
		v.Data++
		v.LastWriter = node
		return nil
	})
}

// Read is one read of a workload on node; it needs access like a write.
func (a *Array) Read(id, node string) (int64, error) {
	var data int64
	err := a.View(func(s *State) error {
		v, ok := s.Volumes[id]
		if !ok {
			return errf(CodeNotFound, "volume %s not found", id)
		}
		if p := v.Publications[node]; p == nil || p.Access != AccessGranted {
			return errf(CodePermissionDenied, "node %s has no access to volume %s", node, id)
		}
		data = v.Data
		return nil
	})
	return data, err
}

func granted(s *State, id, node string) (*Publication, error) {
	v, ok := s.Volumes[id]
	if !ok {
		return nil, errf(CodeNotFound, "volume %s not found", id)
	}
	p := v.Publications[node]
	if p == nil {
		return nil, errf(CodeFailedPrecondition, "volume %s is not published to node %s", id, node)
	}
	if p.Access != AccessGranted {
		return nil, errf(CodeFailedPrecondition, "volume %s is fenced on node %s", id, node)
	}
	return p, nil
}

func lookup(s *State, id, node string) (*Volume, *Publication) {
	v, ok := s.Volumes[id]
	if !ok {
		return nil, nil
	}
	return v, v.Publications[node]
}

func nodesOf(v *Volume) []string {
	var out []string
	for n := range v.Publications {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
