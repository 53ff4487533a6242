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
	"maps"
	"os"
	"slices"
	"sync"
	"syscall"
)

// cache keeps the state as this process last read or wrote it, with the
// identity of the file it came from, so that an operation finding the file
// unchanged skips reading and unmarshalling it (most of an operation's cost
// with hundreds of volumes). It is only used under the array's flock.
//
// Every store renames a new file into place, so a store by any handle or
// process gives the state file another inode. But a file system may hand a
// freed inode number to the next new file at once (ext4 does), so the cache
// keeps the file it came from open: while it is, no other file can have that
// device and inode, and one that has them is the very file. Only a writer in
// place, which store never is, changes a file without a new inode: size and
// mtime catch that.
type cache struct {
	mu  sync.Mutex
	s   *State
	id  fileID
	pin *os.File // the file s came from, open
}

// fileID identifies a version of the state file.
type fileID struct {
	dev, ino    uint64
	size, mtime int64
}

// openState opens the state file and returns its identity as it is now.
func openState(path string) (*os.File, fileID, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileID{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fileID{}, err
	}
	return f, identity(fi), nil
}

// identity returns the zero fileID, which matches no cache, where the file
// system gives no inode.
func identity(fi os.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}

// get returns the cached state if the file at path is still the one it came
// from, or nil. With own, the caller gets the state itself and the cache
// forgets it: the caller may change it and then save nothing, and what it
// saves it caches again. Otherwise the caller gets a copy, which it may change
// or keep.
func (c *cache) get(path string, own bool) *State {
	if c == nil {
		return nil
	}
	fi, err := os.Stat(path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s == nil || err != nil || identity(fi) != c.id {
		c.dropLocked() // stale for good: free the file it pins
		return nil
	}
	if !own {
		return c.s.clone()
	}
	s := c.s
	c.dropLocked()
	return s
}

// keep caches s, which is what the file f of identity id holds; the cache
// owns f from then on. The caller must not change s any more.
func (c *cache) keep(f *os.File, id fileID, s *State) {
	if c == nil || id == (fileID{}) {
		f.Close()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked()
	c.s, c.id, c.pin = s, id, f
}

func (c *cache) dropLocked() {
	if c.pin != nil {
		c.pin.Close()
	}
	c.s, c.id, c.pin = nil, fileID{}, nil
}

// clone returns a deep copy of s, so that the cached state is never handed
// out to be changed or kept. TestCloneIsDeep checks that it copies every
// field: a new map, slice or pointer field must be copied here.
func (s *State) clone() *State {
	c := *s
	c.Volumes = cloneEach(s.Volumes, (*Volume).clone)
	c.Nodes = cloneEach(s.Nodes, (*Node).clone)
	c.Violations = slices.Clone(s.Violations)
	c.ViolationCounts = maps.Clone(s.ViolationCounts)
	c.Refused = maps.Clone(s.Refused)
	c.Overrides = s.Overrides.clone()
	return &c
}

func (v *Volume) clone() *Volume {
	if v == nil {
		return nil
	}
	c := *v
	c.Context = maps.Clone(v.Context)
	c.Publications = cloneEach(v.Publications, (*Publication).clone)
	c.Writes = maps.Clone(v.Writes)
	c.Changes = maps.Clone(v.Changes)
	c.Reads = maps.Clone(v.Reads)
	c.LastWrite = maps.Clone(v.LastWrite)
	c.LastIO = maps.Clone(v.LastIO)
	return &c
}

func (p *Publication) clone() *Publication {
	if p == nil {
		return nil
	}
	c := *p
	c.Published = slices.Clone(p.Published)
	return &c
}

func (n *Node) clone() *Node {
	if n == nil {
		return nil
	}
	c := *n
	return &c
}

func (o Overrides) clone() Overrides {
	o.RecentIO = clonePtr(o.RecentIO)
	o.RefuseUnsafe = clonePtr(o.RefuseUnsafe)
	o.BrokenFence = clonePtr(o.BrokenFence)
	o.BrokenQuarantine = clonePtr(o.BrokenQuarantine)
	return o
}

func cloneEach[V any](m map[string]*V, clone func(*V) *V) map[string]*V {
	if m == nil {
		return nil
	}
	out := make(map[string]*V, len(m))
	for k, v := range m {
		out[k] = clone(v)
	}
	return out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
