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
	"fmt"
	"maps"
	"slices"
	"strings"
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
	CodeAlreadyExists
	CodeResourceExhausted
)

// Error is an array error with a Code: a decision of the array, as opposed
// to a failure to read or write its state.
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
	// FenceRevoke revokes access and succeeds (also the zero value).
	FenceRevoke FencePolicy = "revoke"
	// FenceRefuse refuses (FAILED_PRECONDITION): the array cannot prove the
	// node stopped using the volume.
	FenceRefuse FencePolicy = "refuse"
	// FenceUnknown cannot tell (UNAVAILABLE).
	FenceUnknown FencePolicy = "unknown"
)

// PlainUnpublishMode says what a plain ControllerUnpublishVolume (no fence)
// does to a node that is still using the volume: it holds it staged or
// published, or did I/O within Options.RecentIO.
type PlainUnpublishMode string

const (
	// PlainUnpublishLinger (also the zero value) drops the publication but
	// leaves the node's data path open until it cleans up or goes quiet for
	// RecentIO, as storage without fencing does.
	PlainUnpublishLinger PlainUnpublishMode = "linger"
	// PlainUnpublishRevoke cuts the node off at once, as LUN masking does
	// (the spec allows it: the SP MAY make the volume inaccessible even when
	// fence is false), without quarantine.
	PlainUnpublishRevoke PlainUnpublishMode = "revoke"
	// PlainUnpublishDetach takes the volume away from the node at once, as
	// a cloud detach takes the disk away from the machine: a node that
	// still holds it (staged or published) is left with a closed data path
	// for reads and writes and with stale mounts (AccessDetached) until its
	// plain node-side cleanup; a node that holds nothing simply loses the
	// publication. A driver whose owner declares that an unpublish revokes
	// access (csi-fence.io/unpublish-revokes-access) is telling the truth
	// in this mode.
	PlainUnpublishDetach PlainUnpublishMode = "detach"
)

// DefaultRecentIO is csi-fence-mock's default --recent-io window.
const DefaultRecentIO = 2 * time.Second

// Options tune the array's behaviour; the broken modes exist to prove that
// the tests notice them.
type Options struct {
	FencePolicy FencePolicy
	// RecentIO is how recent I/O must be to count as "recent I/O" for
	// FencePolicy and PlainUnpublish.
	RecentIO       time.Duration
	PlainUnpublish PlainUnpublishMode
	// RefuseUnsafe makes the array refuse the publishes that S1 and S2
	// forbid (a single-node volume still published to another node, a node
	// where the volume is quarantined), as a strict driver does; they are
	// counted under State.Refused. Without it (the zero value) the array is a
	// witness: it carries them out and records the violation, so that what
	// keeps S1 and S2 is the CO's own guards, and a test sees when they fail.
	RefuseUnsafe bool
	// BrokenFence makes a fence report success without revoking access.
	BrokenFence bool
	// BrokenQuarantine lets a publish through on a node where the volume is
	// quarantined (and records the S2 violation that is) even with
	// RefuseUnsafe; a witness array does that anyway.
	BrokenQuarantine bool
}

// Validate rejects unknown policy names.
func (o Options) Validate() error {
	switch o.FencePolicy {
	case "", FenceRevoke, FenceRefuse, FenceUnknown:
	default:
		return fmt.Errorf("unknown fence policy %q: want revoke, refuse or unknown", o.FencePolicy)
	}
	switch o.PlainUnpublish {
	case "", PlainUnpublishLinger, PlainUnpublishRevoke, PlainUnpublishDetach:
	default:
		return fmt.Errorf("unknown plain unpublish mode %q: want linger, revoke or detach", o.PlainUnpublish)
	}
	if o.RecentIO < 0 {
		return fmt.Errorf("recent I/O window %v < 0", o.RecentIO)
	}
	return nil
}

// Overrides change Options of every instance at run time (nil or empty:
// keep the instance's own setting).
type Overrides struct {
	FencePolicy      FencePolicy        `json:"fencePolicy,omitempty"`
	RecentIO         *time.Duration     `json:"recentIO,omitempty"`
	PlainUnpublish   PlainUnpublishMode `json:"plainUnpublish,omitempty"`
	RefuseUnsafe     *bool              `json:"refuseUnsafe,omitempty"`
	BrokenFence      *bool              `json:"brokenFence,omitempty"`
	BrokenQuarantine *bool              `json:"brokenQuarantine,omitempty"`
}

// Apply returns opts with the overrides applied.
func (o Overrides) Apply(opts Options) Options {
	if o.FencePolicy != "" {
		opts.FencePolicy = o.FencePolicy
	}
	if o.RecentIO != nil {
		opts.RecentIO = *o.RecentIO
	}
	if o.PlainUnpublish != "" {
		opts.PlainUnpublish = o.PlainUnpublish
	}
	if o.RefuseUnsafe != nil {
		opts.RefuseUnsafe = *o.RefuseUnsafe
	}
	if o.BrokenFence != nil {
		opts.BrokenFence = *o.BrokenFence
	}
	if o.BrokenQuarantine != nil {
		opts.BrokenQuarantine = *o.BrokenQuarantine
	}
	return opts
}

// SetOverrides replaces the run-time overrides.
func (a *Array) SetOverrides(o Overrides) error {
	if err := o.Apply(Options{}).Validate(); err != nil {
		return err
	}
	return a.Update(func(s *State) error {
		s.Overrides = o.clone() // not the caller's pointers: the state is cached
		return nil
	})
}

// RegisterNode makes node known to the array (idempotent; the latest
// maxVolumes wins).
func (a *Array) RegisterNode(node string, maxVolumes int64) error {
	return a.RegisterNodes(maxVolumes, node)
}

// RegisterNodes registers many nodes in one update of the state, as
// RegisterNode does each (a benchmark's thousand nodes would otherwise
// rewrite the whole state a thousand times).
func (a *Array) RegisterNodes(maxVolumes int64, nodes ...string) error {
	for _, node := range nodes {
		if node == "" {
			return errf(CodeInvalidArgument, "node ID is empty")
		}
	}
	return a.Update(func(s *State) error {
		for _, node := range nodes {
			n := s.Nodes[node]
			if n == nil {
				n = &Node{ID: node, Registered: a.now()}
				s.Nodes[node] = n
			}
			n.MaxVolumes = maxVolumes
		}
		return nil
	})
}

// CreateArgs describe a volume to create.
type CreateArgs struct {
	Name          string
	RequiredBytes int64
	// LimitBytes, if > 0, is the largest acceptable size.
	LimitBytes int64
	SingleNode bool
	Context    map[string]string
}

// CreateVolume creates a volume, or returns the existing one of that name if
// its size fits the request (AlreadyExists otherwise).
func (a *Array) CreateVolume(args CreateArgs) (*Volume, error) {
	var out Volume
	err := a.update(func(s *State, now time.Time) error {
		for _, id := range sortedKeys(s.Volumes) {
			v := s.Volumes[id]
			if v.Name != args.Name {
				continue
			}
			if v.Capacity < args.RequiredBytes || (args.LimitBytes > 0 && v.Capacity > args.LimitBytes) {
				return errf(CodeAlreadyExists, "volume %s exists with capacity %d, outside the requested range [%d, %d]", args.Name, v.Capacity, args.RequiredBytes, args.LimitBytes)
			}
			out = *v.clone() // the state is cached: share none of its maps
			return nil
		}
		s.NextID++
		v := &Volume{ID: fmt.Sprintf("vol-%04d", s.NextID), Name: args.Name, Capacity: args.RequiredBytes, SingleNode: args.SingleNode, Context: maps.Clone(args.Context), Created: now}
		s.Volumes[v.ID] = v
		out = *v.clone()
		return nil
	})
	return &out, err
}

// AddVolume adds a single-node volume with a given ID, as for a statically
// provisioned PV (idempotent).
func (a *Array) AddVolume(id string, capacity int64) error {
	return a.AddVolumes(capacity, id)
}

// AddVolumes adds many single-node volumes in one update of the state, as
// AddVolume does each.
func (a *Array) AddVolumes(capacity int64, ids ...string) error {
	return a.Update(func(s *State) error {
		for _, id := range ids {
			if _, ok := s.Volumes[id]; !ok {
				s.Volumes[id] = &Volume{ID: id, Name: id, Capacity: capacity, SingleNode: true, Created: a.now()}
			}
		}
		return nil
	})
}

// DeleteVolume deletes a volume no node can reach any more. Quarantine
// records of fenced nodes do not keep it: those nodes have no access, and
// their later cleanup of an unknown volume succeeds.
func (a *Array) DeleteVolume(id string) error {
	return a.update(func(s *State, now time.Time) error {
		v, ok := s.Volumes[id]
		if !ok {
			return nil
		}
		for _, n := range sortedKeys(v.Publications) {
			if p := v.Publications[n]; p.Access == AccessGranted || p.Open(now) {
				return errf(CodeFailedPrecondition, "volume %s is still in use by node %s (%s)", id, n, p.Access)
			}
		}
		delete(s.Volumes, id)
		return nil
	})
}

// ExpandVolume grows a volume to at least size and returns its capacity.
func (a *Array) ExpandVolume(id string, size int64) (int64, error) {
	var capacity int64
	err := a.update(func(s *State, _ time.Time) error {
		v, ok := s.Volumes[id]
		if !ok {
			return errf(CodeNotFound, "volume %s not found", id)
		}
		if size > v.Capacity {
			v.Capacity = size
		}
		capacity = v.Capacity
		return nil
	})
	return capacity, err
}

// PublishArgs describe a ControllerPublishVolume.
type PublishArgs struct {
	Volume, Node string
	// SingleNode: the access mode allows one node only.
	SingleNode bool
	ReadOnly   bool
	// KnownNode refuses (NotFound) a node that never registered.
	KnownNode bool
	// ByNode: the node plugin grants its own node access, for a driver
	// without ControllerPublishVolume; the node's cleanup (NodeUnpublish,
	// NodeUnstage) ends the publication once it holds nothing.
	ByNode bool
}

// Publish grants node access to the volume (ControllerPublishVolume) without
// checking that the array knows the node.
func (a *Array) Publish(id, node string, singleNode, readOnly bool, opts Options) error {
	return a.PublishVolume(PublishArgs{Volume: id, Node: node, SingleNode: singleNode, ReadOnly: readOnly}, opts)
}

// PublishVolume grants a node access to a volume. A publish that S1 or S2
// forbids (to a node where the volume is quarantined, or of a single-node
// volume still granted to another node) is refused with Options.RefuseUnsafe
// (except the quarantine with Options.BrokenQuarantine), and otherwise
// carried out and recorded as a violation.
func (a *Array) PublishVolume(args PublishArgs, opts Options) error {
	return a.update(func(s *State, now time.Time) error {
		o := s.Overrides.Apply(opts)
		id, node := args.Volume, args.Node
		v, ok := s.Volumes[id]
		if !ok {
			return errf(CodeNotFound, "volume %s not found", id)
		}
		n := s.Nodes[node]
		if args.KnownNode && n == nil {
			return errf(CodeNotFound, "node %s is not known to the array", node)
		}
		if v.Publications == nil {
			v.Publications = map[string]*Publication{}
		}
		p := v.Publications[node]
		// A detached volume the node still holds is quarantined there as a
		// fenced one is: the fence by detach, until the node cleans up.
		quarantined := p != nil && (p.Access == AccessFenced || p.Access == AccessDetached)
		switch {
		case quarantined && o.RefuseUnsafe && !o.BrokenQuarantine:
			s.refuse(RefusedPublishQuarantined)
			if p.Access == AccessDetached {
				return errf(CodeFailedPrecondition, "volume %s was detached from node %s, which still holds it: NodeUnpublishVolume/NodeUnstageVolume on that node must clean it up first", id, node)
			}
			return errf(CodeFailedPrecondition, "volume %s is quarantined on node %s: a forced NodeUnpublishVolume/NodeUnstageVolume on that node must clean it up first", id, node)
		case p != nil && p.Access == AccessGranted:
			if p.ReadOnly != args.ReadOnly {
				return errf(CodeAlreadyExists, "volume %s is already published to node %s with readonly=%v", id, node, p.ReadOnly)
			}
			return nil // idempotent
		}
		others := grantedElsewhere(v, node)
		elsewhere := len(others) > 0 && (args.SingleNode || v.SingleNode)
		if elsewhere && o.RefuseUnsafe {
			s.refuse(RefusedPublishElsewhere)
			return errf(CodeFailedPrecondition, "volume %s allows a single node and is still published to node %s", id, others[0])
		}
		if n != nil && n.MaxVolumes > 0 && publishedOn(s, node) >= n.MaxVolumes {
			return errf(CodeResourceExhausted, "node %s already has its maximum of %d volumes", node, n.MaxVolumes)
		}
		if quarantined {
			s.violate(now, S2, id, node, "volume published to node %s where it is quarantined", node)
		}
		if len(others) == 0 {
			v.SingleNode = args.SingleNode
		}
		if p == nil {
			p = &Publication{}
			v.Publications[node] = p
		}
		if p.Access != AccessUnpublished {
			p.NodeSide = false // a new publication; an unpublished one keeps what the node holds
		}
		p.Access, p.ReadOnly, p.Since, p.Leaky, p.LingerUntil, p.Linger = AccessGranted, args.ReadOnly, now, false, time.Time{}, 0
		p.ByNode = args.ByNode
		if v.SingleNode && !args.ReadOnly {
			v.Owner = node
		}
		w := writableNodes(v, now)
		switch {
		case elsewhere:
			s.violate(now, S1, id, node, "single-node volume published to node %s while still published to nodes %v", node, others)
		case v.SingleNode && len(w) > 1:
			s.violate(now, S1, id, node, "single-node volume writable from nodes %v at once after its publish to %s", w, node)
		}
		return nil
	})
}

// Unpublish removes node's access (ControllerUnpublishVolume). Unknown
// volumes and nodes succeed, as the spec asks.
//
// With fence, the node's access is revoked and the volume quarantined on the
// node, before success is returned; if the node shows recent I/O, the fence
// policy may refuse instead. A fence on a node that has no publication has
// nothing to revoke and quarantines nothing: so a retried fence after the
// node's cleanup does not quarantine the volume again.
//
// Without fence, see PlainUnpublishMode.
func (a *Array) Unpublish(id, node string, fence bool, opts Options) error {
	return a.update(func(s *State, now time.Time) error {
		o := s.Overrides.Apply(opts)
		v, ok := s.Volumes[id]
		if !ok {
			return nil
		}
		p, ok := v.Publications[node]
		if !ok {
			return nil
		}
		recent := o.RecentIO > 0 && now.Sub(v.LastIO[node]) < o.RecentIO
		if !fence {
			if p.Access != AccessGranted {
				return nil // a quarantine stays until the node cleans up
			}
			// In use: the node holds it, or does I/O without having gone
			// through its node plugin (a workload the CO cannot see).
			inUse := p.holds() || (recent && !p.NodeSide)
			if o.PlainUnpublish == PlainUnpublishDetach && p.holds() {
				p.Access, p.Since, p.Leaky, p.LingerUntil, p.Linger = AccessDetached, now, false, time.Time{}, 0
				return nil
			}
			if o.PlainUnpublish == PlainUnpublishRevoke || o.PlainUnpublish == PlainUnpublishDetach || !inUse {
				delete(v.Publications, node)
				return nil
			}
			p.Access, p.Since, p.Linger = AccessUnpublished, now, o.RecentIO
			p.LingerUntil = v.LastIO[node].Add(o.RecentIO)
			return nil
		}
		if p.Access == AccessFenced {
			return nil // idempotent
		}
		if recent {
			switch o.FencePolicy {
			case FenceRefuse:
				s.refuse("fence-refused-recent-io")
				return errf(CodeFailedPrecondition, "node %s did I/O on volume %s %v ago: the array cannot prove it stopped using the volume", node, id, now.Sub(v.LastIO[node]).Round(time.Millisecond))
			case FenceUnknown:
				s.refuse("fence-unknown-recent-io")
				return errf(CodeUnavailable, "cannot tell whether node %s stopped using volume %s", node, id)
			}
		}
		p.Access, p.Since, p.Leaky, p.LingerUntil, p.Linger = AccessFenced, now, o.BrokenFence, time.Time{}, 0
		return nil
	})
}

// PowerLoss records that node lost its power: what it had staged or
// published went with its kernel, and its I/O stopped, so a data path left
// open by a plain unpublish closes now. Grants and fences stay as the
// controller left them: the node's access is the array's, not the node's.
func (a *Array) PowerLoss(node string) error {
	return a.update(func(s *State, now time.Time) error {
		for _, v := range s.Volumes {
			if p := v.Publications[node]; p != nil {
				p.Staged, p.Published = "", nil
				if p.Access == AccessUnpublished {
					p.LingerUntil = now
				}
			}
		}
		return nil
	})
}

// NodeStage records the volume staged at path on node.
func (a *Array) NodeStage(id, node, path string) error {
	return a.update(func(s *State, _ time.Time) error {
		p, err := granted(s, id, node)
		if err != nil {
			return err
		}
		if p.Staged != "" && p.Staged != path {
			return errf(CodeFailedPrecondition, "volume %s is already staged on node %s at %s", id, node, p.Staged)
		}
		p.Staged, p.NodeSide = path, true
		return nil
	})
}

// NodePublish records the volume published at target on node; staging, if
// not empty, must be where it is staged.
func (a *Array) NodePublish(id, node, target, staging string) error {
	return a.update(func(s *State, _ time.Time) error {
		p, err := granted(s, id, node)
		if err != nil {
			return err
		}
		if staging != "" && p.Staged != staging {
			return errf(CodeFailedPrecondition, "volume %s is not staged on node %s at %s", id, node, staging)
		}
		for _, t := range p.Published {
			if t == target {
				return nil
			}
		}
		p.Published, p.NodeSide = append(p.Published, target), true
		return nil
	})
}

// NodeUnpublish removes target from the node's publications. On a fenced
// volume published at target it needs force (the node lost access: it cannot
// unmount cleanly); when nothing of a fenced (or unpublished) volume is left
// on the node, its record goes: the quarantine is lifted. So does a
// publication the node granted itself (PublishArgs.ByNode).
func (a *Array) NodeUnpublish(id, node, target string, force bool) error {
	return a.update(func(s *State, _ time.Time) error {
		v, p := lookup(s, id, node)
		if p == nil {
			return nil
		}
		if p.Access == AccessFenced && !force && slices.Contains(p.Published, target) {
			return errf(CodeFailedPrecondition, "volume %s is fenced on node %s: only a forced NodeUnpublishVolume can clean it up", id, node)
		}
		kept := p.Published[:0]
		for _, t := range p.Published {
			if t != target {
				kept = append(kept, t)
			}
		}
		p.Published = kept
		release(v, node)
		return nil
	})
}

// NodeUnstage clears the staging of the volume on node, with the same rules
// as NodeUnpublish. A forced unstage of a fenced volume, or any unstage of a
// detached one, drops its publications on the node too: nothing may be left
// behind.
func (a *Array) NodeUnstage(id, node string, force bool) error {
	return a.update(func(s *State, _ time.Time) error {
		v, p := lookup(s, id, node)
		if p == nil {
			return nil
		}
		fenced := p.Access == AccessFenced
		if fenced && !force && p.holds() {
			return errf(CodeFailedPrecondition, "volume %s is fenced on node %s: only a forced NodeUnstageVolume can clean it up", id, node)
		}
		// A detached volume is gone from the node: its unstage, like a
		// forced one, leaves nothing, whatever order the node cleans in.
		if len(p.Published) > 0 && !fenced && p.Access != AccessDetached {
			return errf(CodeFailedPrecondition, "volume %s is still published on node %s at %v", id, node, p.Published)
		}
		p.Staged, p.Published = "", nil
		release(v, node)
		return nil
	})
}

// release forgets a fenced or unpublished volume on node once the node holds
// nothing of it any more, and a publication the node granted itself: nothing
// else would ever end it, and the volume could not be deleted.
func release(v *Volume, node string) {
	p := v.Publications[node]
	if p != nil && (p.Access != AccessGranted || p.ByNode) && !p.holds() {
		delete(v.Publications, node)
	}
}

// Write is one write of a workload on node to the volume. It is refused when
// the node's data path is closed (fenced, never published, or a plain
// unpublish whose session ended). An accepted write on a single-node volume
// from a node other than its owner, or while another node can write to it,
// is an S1 violation.
func (a *Array) Write(id, node string) error {
	_, err := a.WriteData(id, node)
	return err
}

// WriteData is Write, returning the volume's data counter after the write.
func (a *Array) WriteData(id, node string) (int64, error) {
	var data int64
	err := a.update(func(s *State, now time.Time) error {
		v, err := a.modify(s, now, id, node, "write")
		if err != nil {
			return err
		}
		count(v, node, now, true)
		data = v.Data
		return nil
	})
	return data, err
}

// OpChange is the op name of Change in refusal kinds ("change-fenced",
// ...): one kind for every change that is not a write of file data, so that
// State.Refused stays a short list.
const OpChange = "change"

// Change is one change to the volume other than a write of file data, by a
// real data path (a file system over the volume: create, mkdir, unlink,
// rename, truncate, fsync, ...); what names it (e.g. "mkdir") only goes into
// messages. It is decided as a write is: refused when the node's data path
// is closed, an S1 violation when accepted from a node other than the
// volume's owner or while another node can write to it. It is counted in
// Volume.Changes, apart from Writes, so that Writes keeps counting writes of
// data, one per write request.
func (a *Array) Change(id, node, what string) error {
	return a.update(func(s *State, now time.Time) error {
		v, err := a.modify(s, now, id, node, OpChange+" ("+what+")")
		if err != nil {
			return err
		}
		if v.Changes == nil {
			v.Changes = map[string]int64{}
		}
		v.Changes[node]++
		if v.LastIO == nil {
			v.LastIO = map[string]time.Time{}
		}
		v.LastIO[node] = now
		return nil
	})
}

// modify decides whether node may change the volume now (op names the
// change: "write", or "change (what)"), counts a refusal by kind, and
// records the S1 violation an accepted change from the wrong node is.
func (a *Array) modify(s *State, now time.Time, id, node, op string) (*Volume, error) {
	kindOp, _, _ := strings.Cut(op, " ")
	v, err := a.access(s, now, id, node, kindOp)
	if err != nil {
		return nil, err
	}
	if v.Publications[node].ReadOnly {
		s.refuse(kindOp + "-readonly")
		return nil, errf(CodePermissionDenied, "volume %s is read-only on node %s", id, node)
	}
	if v.SingleNode {
		others := slices.DeleteFunc(writableNodes(v, now), func(n string) bool { return n == node })
		switch {
		case v.Owner != "" && v.Owner != node:
			s.violate(now, S1, id, node, "%s from node %s accepted after the volume was published to node %s", op, node, v.Owner)
		case len(others) > 0:
			s.violate(now, S1, id, node, "%s from node %s accepted while nodes %v can write to the single-node volume too", op, node, others)
		}
	}
	return v, nil
}

// Read is one read of a workload on node; it needs access like a write.
func (a *Array) Read(id, node string) (int64, error) {
	var data int64
	err := a.update(func(s *State, now time.Time) error {
		v, err := a.access(s, now, id, node, "read")
		if err != nil {
			return err
		}
		count(v, node, now, false)
		data = v.Data
		return nil
	})
	return data, err
}

// access checks node's data path to the volume; a refusal is counted by kind.
func (a *Array) access(s *State, now time.Time, id, node, op string) (*Volume, error) {
	v, ok := s.Volumes[id]
	if !ok {
		return nil, errf(CodeNotFound, "volume %s not found", id)
	}
	p := v.Publications[node]
	if p != nil && p.Open(now) {
		if p.Access == AccessUnpublished {
			p.LingerUntil = now.Add(p.Linger)
		}
		return v, nil
	}
	kind, why := refusal(p, op)
	s.refuse(kind)
	return nil, errf(CodePermissionDenied, "%s refused: node %s has no access to volume %s: %s", op, node, id, why)
}

// refusal names the refusal of op on a closed data path p (nil: none), and
// says why it is closed.
func refusal(p *Publication, op string) (kind, why string) {
	switch {
	case p != nil && p.Access == AccessFenced:
		return op + "-fenced", "its access was fenced"
	case p != nil && p.Access == AccessDetached:
		return op + "-detached", "the volume was detached from it"
	}
	return op + "-unpublished", "it is not published there"
}

// CheckRead tells, as Read would, whether node may read the volume now:
// nil, or the PermissionDenied (NotFound) error Read would return. Unlike
// Read it counts neither the read nor a refusal, and it takes the shared
// lock only: a data path that asks before every read (fusefs with
// GateReads) must not rewrite the state each time. It does not extend a
// lingering session either.
func (a *Array) CheckRead(id, node string) error {
	return a.View(func(s *State) error {
		v, ok := s.Volumes[id]
		if !ok {
			return errf(CodeNotFound, "volume %s not found", id)
		}
		p := v.Publications[node]
		if p != nil && p.Open(a.now()) {
			return nil
		}
		_, why := refusal(p, "read")
		return errf(CodePermissionDenied, "read refused: node %s has no access to volume %s: %s", node, id, why)
	})
}

func count(v *Volume, node string, now time.Time, write bool) {
	if v.LastIO == nil {
		v.LastIO = map[string]time.Time{}
	}
	v.LastIO[node] = now
	if !write {
		if v.Reads == nil {
			v.Reads = map[string]int64{}
		}
		v.Reads[node]++
		return
	}
	if v.Writes == nil {
		v.Writes = map[string]int64{}
		v.LastWrite = map[string]time.Time{}
	}
	v.Writes[node]++
	v.LastWrite[node] = now
	v.Data++
	v.LastWriter = node
}

func granted(s *State, id, node string) (*Publication, error) {
	v, ok := s.Volumes[id]
	if !ok {
		return nil, errf(CodeNotFound, "volume %s not found", id)
	}
	p := v.Publications[node]
	switch {
	case p == nil || p.Access == AccessUnpublished:
		return nil, errf(CodeFailedPrecondition, "volume %s is not published to node %s", id, node)
	case p.Access == AccessFenced:
		return nil, errf(CodeFailedPrecondition, "volume %s is fenced (quarantined) on node %s", id, node)
	case p.Access == AccessDetached:
		return nil, errf(CodeFailedPrecondition, "volume %s was detached from node %s", id, node)
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

// grantedElsewhere lists the other nodes the volume is granted to.
func grantedElsewhere(v *Volume, node string) []string {
	var out []string
	for _, n := range sortedKeys(v.Publications) {
		if n != node && v.Publications[n].Access == AccessGranted {
			out = append(out, n)
		}
	}
	return out
}

// writableNodes lists the nodes whose data path to the volume is open for
// writing.
func writableNodes(v *Volume, now time.Time) []string {
	var out []string
	for _, n := range sortedKeys(v.Publications) {
		if p := v.Publications[n]; p.Open(now) && !p.ReadOnly {
			out = append(out, n)
		}
	}
	return out
}

// publishedOn counts the volumes granted to node.
func publishedOn(s *State, node string) int64 {
	var n int64
	for _, v := range s.Volumes {
		if p := v.Publications[node]; p != nil && p.Access == AccessGranted {
			n++
		}
	}
	return n
}
