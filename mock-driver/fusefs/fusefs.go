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

// Package fusefs is the mock driver's real data path: a FUSE file system
// over a volume's data directory (on storage every node shares, like the
// array's state) that asks the array, before every operation that changes
// the volume, whether this node's data path to it is open. A container then
// writes to the volume with ordinary syscalls, and a fence turns its writes
// into EIO, as a real array's fence turns a host's SCSI writes into I/O
// errors. The array counts each accepted write as it counts a workload's
// (Array.WriteData) and each other change apart (Array.Change), so that a
// write it accepts from a node after the volume moved is an S1 violation
// there, whoever made it.
//
// Files are opened for direct I/O (FOPEN_DIRECT_IO): the node's kernel
// caches no file data, so each write(2) reaches the server as one request
// and is counted as one write (through the page cache, a write that
// crosses into a page the kernel does not hold is sent as one request per
// page), and every node reads the shared directory as it is now.
//
// Reads are served by default: a read changes nothing another node could
// lose, so S1 does not need it cut, and asking the array for each one would
// make every read a locked rewrite of the array's state (Array.Read
// counts). A fenced node reading stale data is its application's problem,
// which fencing does not claim to solve; its writes are what could corrupt
// the volume. Options.GateReads cuts reads too, for a driver whose detach
// takes the disk away from the node (array.PlainUnpublishDetach): there no
// read reaches the volume once it is gone, and csi-fence-sanity checks
// that it does not. The array is then asked before each read, under its
// shared lock, and counts nothing (Array.CheckRead).
//
// The server lives in the process that mounted it (the node plugin): when
// that process dies the kernel aborts the connection and the mount answers
// ENOTCONN, which is what a dead node's writer should see. Unmount (lazily,
// for a forced cleanup) is the node plugin's job (Mount.Close, Detach).
package fusefs

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
)

// FSType is the file system type of the mounts in /proc/self/mountinfo
// ("fuse." + the server's name).
const FSType = "fuse.csi-fence-mock"

// gate is one mounted volume as one node sees it: the array's decision on
// every change, and whether the mount was closed by the node plugin.
type gate struct {
	arr          *array.Array
	volume, node string
	// closed: the node plugin unstaged the volume; whatever still reaches
	// the server (open files of a lazily detached mount) gets EIO, so that
	// a forced cleanup leaves no path to the volume behind.
	closed atomic.Bool
	// refused counts the changes refused, for the log.
	refused atomic.Int64
	// gateReads: reads ask the array too (Options.GateReads).
	gateReads bool
}

// allow asks the array whether the node may make the change what ("write"
// for a write of file data, counted as a workload's write; any other name
// is a Change) and returns EIO when it may not: the errno a host sees when
// its storage refuses an I/O. An array whose state cannot be read refuses
// too: no change may go through unwitnessed.
func (g *gate) allow(what string) syscall.Errno {
	if g.closed.Load() {
		return syscall.EIO
	}
	var err error
	if what == "write" {
		_, err = g.arr.WriteData(g.volume, g.node)
	} else {
		err = g.arr.Change(g.volume, g.node, what)
	}
	if err == nil {
		return 0
	}
	var ae *array.Error
	if !errors.As(err, &ae) {
		klog.ErrorS(err, "The array cannot decide a change; refused", "volume", g.volume, "node", g.node, "op", what)
		return syscall.EIO
	}
	// The first refusal says what happened; a writer retrying every
	// interval would otherwise fill the log.
	if n := g.refused.Add(1); n == 1 {
		klog.InfoS("The array refused a change: EIO from now on while it refuses", "volume", g.volume, "node", g.node, "op", what, "reason", ae.Msg)
	} else {
		klog.V(4).InfoS("The array refused a change", "volume", g.volume, "node", g.node, "op", what, "refused", n, "reason", ae.Msg)
	}
	return syscall.EIO
}

// allowRead asks the array whether the node may read now, when reads are
// gated, and returns EIO when it may not, as allow does for a change. The
// read itself is not counted: the array is asked under its shared lock.
func (g *gate) allowRead() syscall.Errno {
	if !g.gateReads {
		return 0
	}
	if g.closed.Load() {
		return syscall.EIO
	}
	err := g.arr.CheckRead(g.volume, g.node)
	if err == nil {
		return 0
	}
	var ae *array.Error
	if !errors.As(err, &ae) {
		klog.ErrorS(err, "The array cannot decide a read; refused", "volume", g.volume, "node", g.node)
		return syscall.EIO
	}
	if n := g.refused.Add(1); n == 1 {
		klog.InfoS("The array refused a read: EIO from now on while it refuses", "volume", g.volume, "node", g.node, "reason", ae.Msg)
	} else {
		klog.V(4).InfoS("The array refused a read", "volume", g.volume, "node", g.node, "refused", n, "reason", ae.Msg)
	}
	return syscall.EIO
}

// Options tune a Mount.
type Options struct {
	// GateReads makes every read ask the array first (Array.CheckRead) and
	// fail with EIO once the node's data path is closed, as writes do.
	// Default: reads are served (see the package comment).
	GateReads bool
}

// Mount is one volume served at one directory.
type Mount struct {
	dir    string
	server *fuse.Server
	gate   *gate
}

// noCache: every node sees the data directory as it is now, not as its
// kernel saw it a second ago; another node may have changed it.
var noCache = time.Duration(0)

// New mounts a FUSE file system at dir serving dataDir, the files of volume
// as node sees them, gated by arr. It needs CAP_SYS_ADMIN and /dev/fuse: it
// mounts with mount(2) itself, as a node plugin's image has no fusermount.
func New(dir, dataDir string, arr *array.Array, volume, node string, o Options) (*Mount, error) {
	g := &gate{arr: arr, volume: volume, node: node, gateReads: o.GateReads}
	var st syscall.Stat_t
	if err := syscall.Stat(dataDir, &st); err != nil {
		return nil, fmt.Errorf("the data directory of volume %s: %w", volume, err)
	}
	root := &guardNode{LoopbackNode: &fs.LoopbackNode{RootData: &fs.LoopbackRoot{Path: dataDir, Dev: uint64(st.Dev)}}, gate: g}
	root.RootData.RootNode = root
	opts := &fs.Options{
		EntryTimeout:    &noCache,
		AttrTimeout:     &noCache,
		NegativeTimeout: &noCache,
		MountOptions: fuse.MountOptions{
			// Any user of any container: the kernel checks the modes
			// (default_permissions), the server acts as root.
			AllowOther:        true,
			Options:           []string{"default_permissions"},
			FsName:            "csi-fence-mock:" + volume,
			Name:              "csi-fence-mock",
			DirectMountStrict: true,
			// Shared writable mmap of a direct I/O file, where the
			// kernel can (6.6 on): its write-back comes as write
			// requests, which the gate sees.
			ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
			// No kernel I/O to the backing files past the gate
			// (file does not offer PassthroughFd either).
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
		},
	}
	server, err := fs.Mount(dir, root, opts)
	if err != nil {
		return nil, fmt.Errorf("mounting volume %s with FUSE on %s: %w", volume, dir, err)
	}
	klog.InfoS("Serving the volume with FUSE", "volume", volume, "node", node, "path", dir, "data", dataDir, "gateReads", o.GateReads)
	return &Mount{dir: dir, server: server, gate: g}, nil
}

// Dir is where the volume is mounted.
func (m *Mount) Dir() string { return m.dir }

// Close unmounts the volume. Unforced, a busy mount is an error and stays
// served (the caller retries, as the kubelet does). Forced, the mount is
// detached lazily (MNT_DETACH): it leaves the tree at once, and whatever
// still holds it open gets EIO from now on, as a fenced node's last users
// must.
func (m *Mount) Close(force bool) error {
	flags := 0
	if force {
		m.gate.closed.Store(true)
		flags = unix.MNT_DETACH
	}
	if err := unix.Unmount(m.dir, flags); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting volume %s from %s: %w", m.gate.volume, m.dir, err)
	}
	m.gate.closed.Store(true)
	// The kernel ends the connection once nothing holds the mount: the
	// server's loops return then, not necessarily now.
	go func() {
		m.server.Wait()
		klog.V(2).InfoS("FUSE server ended", "volume", m.gate.volume, "path", m.dir)
	}()
	return nil
}

// Detach lazily unmounts what is mounted at dir, for a mount whose server is
// gone (its node plugin died: every access fails with ENOTCONN) or was
// another process's: it cannot be unmounted cleanly, and its last users'
// I/O fails anyway. Not a mount point: nothing to do.
func Detach(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("detaching %s: %w", dir, err)
}

// Usable reports why this host cannot serve FUSE mounts (no /dev/fuse, or
// no permission to use it), nil if it can, as far as can be told without
// mounting.
func Usable() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("FUSE is not usable here: %w", err)
	}
	return f.Close()
}
