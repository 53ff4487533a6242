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

package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// guardNode is go-fuse's loopback node with every operation that changes
// the volume asking the gate first. What it does not override, it inherits
// from fs.LoopbackNode: those must change nothing (lookups, attributes,
// directory listings, reads of links and extended attributes), which
// TestEveryOperationClassified holds go-fuse to.
type guardNode struct {
	*fs.LoopbackNode
	gate *gate
}

// WrapChild makes every node the loopback creates below the root a
// guardNode too.
func (n *guardNode) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &guardNode{LoopbackNode: ops.(*fs.LoopbackNode), gate: n.gate}
}

func (n *guardNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.gate.allow("create"); errno != 0 {
		return nil, nil, 0, errno
	}
	ch, fh, fflags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return ch, n.wrap(fh), fflags | fuse.FOPEN_DIRECT_IO, errno
}

// Open guards only an open that truncates: opening for writing changes
// nothing yet, and each write asks for itself.
func (n *guardNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		if errno := n.gate.allow("truncate"); errno != 0 {
			return nil, 0, errno
		}
	}
	fh, fflags, errno := n.LoopbackNode.Open(ctx, flags)
	return n.wrap(fh), fflags | fuse.FOPEN_DIRECT_IO, errno
}

func (n *guardNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fflags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if fh == nil {
		return nil, fflags, errno
	}
	return &dirHandle{FileHandle: fh, gate: n.gate}, fflags, errno
}

func (n *guardNode) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.gate.allow("tmpfile"); errno != 0 {
		return nil, nil, 0, errno
	}
	ch, fh, fflags, errno := n.LoopbackNode.Tmpfile(ctx, flags, mode, out)
	return ch, n.wrap(fh), fflags | fuse.FOPEN_DIRECT_IO, errno
}

func (n *guardNode) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.gate.allow("mknod"); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

func (n *guardNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.gate.allow("mkdir"); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *guardNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if errno := n.gate.allow("rmdir"); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Rmdir(ctx, name)
}

func (n *guardNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if errno := n.gate.allow("unlink"); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *guardNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if errno := n.gate.allow("rename"); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

func (n *guardNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.gate.allow("symlink"); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}

func (n *guardNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.gate.allow("link"); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Link(ctx, target, name, out)
}

// Setattr guards every attribute change (size, mode, owner, times): each
// changes what another node reads.
func (n *guardNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := n.gate.allow("setattr"); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Setattr(ctx, unwrap(f), in, out)
}

func (n *guardNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if errno := n.gate.allow("setxattr"); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Setxattr(ctx, attr, data, flags)
}

func (n *guardNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if errno := n.gate.allow("removexattr"); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Removexattr(ctx, attr)
}

// CopyFileRange is not offered: the kernel then copies with reads and
// writes through this server, each write asking the gate, instead of the
// loopback copying between the backing files where no write is seen.
func (n *guardNode) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// Getattr and Statx hand the loopback its own file handle: it reads the
// attributes of the open file through it.
func (n *guardNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return n.LoopbackNode.Getattr(ctx, unwrap(f), out)
}

func (n *guardNode) Statx(ctx context.Context, f fs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return n.LoopbackNode.Statx(ctx, unwrap(f), flags, mask, out)
}

func (n *guardNode) wrap(fh fs.FileHandle) fs.FileHandle {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh // nil on error
	}
	return &file{lf: lf, gate: n.gate}
}

func unwrap(fh fs.FileHandle) fs.FileHandle {
	if f, ok := fh.(*file); ok {
		return f.lf
	}
	return fh
}

// file is an open file of the volume. It holds the loopback's file and
// forwards to it by hand, without embedding it: what it does not offer the
// kernel cannot use. It has no PassthroughFd, so the kernel never writes to
// the backing file directly (FUSE passthrough), past the gate; no Ioctl,
// which could change anything.
type file struct {
	lf   *fs.LoopbackFile
	gate *gate
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := f.gate.allow("write"); errno != 0 {
		return 0, errno
	}
	return f.lf.Write(ctx, data, off)
}

// Writev is Write for a request whose data the server received in pieces:
// one write request, one write for the array.
func (f *file) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	if errno := f.gate.allow("write"); errno != 0 {
		return 0, errno
	}
	return f.lf.Writev(ctx, data, off)
}

// Fsync asks the gate too: a fenced node's fsync must fail, so that its
// application learns that what it wrote is not safe.
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := f.gate.allow("fsync"); errno != 0 {
		return errno
	}
	return f.lf.Fsync(ctx, flags)
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if errno := f.gate.allow("fallocate"); errno != 0 {
		return errno
	}
	return f.lf.Allocate(ctx, off, size, mode)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := f.gate.allow("setattr"); errno != 0 {
		return errno
	}
	return f.lf.Setattr(ctx, in, out)
}

// Read is served, unless reads are gated (Options.GateReads) and the
// array says the node's data path is closed.
func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := f.gate.allowRead(); errno != 0 {
		return nil, errno
	}
	return f.lf.Read(ctx, buf, off)
}

// What changes nothing is forwarded as it is.

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}

func (f *file) Statx(ctx context.Context, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return f.lf.Statx(ctx, flags, mask, out)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}

// Flush is the close of one descriptor: with writes going through at once
// (no writeback cache), nothing is left to write then.
func (f *file) Flush(ctx context.Context) syscall.Errno { return f.lf.Flush(ctx) }

func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }

// Locks are advisory and local to this node's kernel and server: they
// change no data.
func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return f.lf.Getlk(ctx, owner, lk, flags, out)
}

func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlk(ctx, owner, lk, flags)
}

func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlkw(ctx, owner, lk, flags)
}

// dirHandle is an open directory: listing it changes nothing; its fsync
// asks the gate as a file's does; no Ioctl (chattr goes through one).
type dirHandle struct {
	fs.FileHandle
	gate *gate
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if r, ok := d.FileHandle.(fs.FileReaddirenter); ok {
		return r.Readdirent(ctx)
	}
	return nil, syscall.ENOTSUP
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := d.FileHandle.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.FileHandle.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if errno := d.gate.allow("fsync"); errno != 0 {
		return errno
	}
	if s, ok := d.FileHandle.(fs.FileFsyncdirer); ok {
		return s.Fsyncdir(ctx, flags)
	}
	return 0
}
