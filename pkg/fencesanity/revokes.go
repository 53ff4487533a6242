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

package fencesanity

// The check of the declaration that a plain ControllerUnpublishVolume
// revokes the node's access (the CSIDriver annotation
// csi-fence.io/unpublish-revokes-access, issue 37), on one host that runs
// the driver's controller and node services: with it, the failover fences
// a node with the driver's own detach, so the declaration is worth exactly
// what this check proves.
//
// Nothing in CSI says whether the driver's owner declared it (the
// annotation is on a Kubernetes object csi-sanity never reads), so, as
// csi-sanity decides what to run from its flags and the driver's
// capabilities, the check runs when asked (Config.CheckUnpublishRevokesAccess,
// csi-fence-sanity --fence.check-unpublish-revokes-access) and is skipped,
// saying so, otherwise.
//
// The I/O is this process's own, through the published path on this host,
// as a workload's would be: no I/O checker command is involved. Writes are
// synchronous (O_SYNC, then fsync) and reads bypass the page cache
// (O_DIRECT, or the cached pages dropped first): a write that only reached
// the page cache, or a read the cache answered, says nothing about the
// storage. Each I/O is bounded by Config.IOTimeout: one that hangs is no
// proof either way, and fails the check.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL reads as prose
	. "github.com/onsi/gomega"    //nolint:revive
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/mount-utils"
)

// Messages of the declaration check.
const (
	NoRevokeCheckMessage  = "the check that a plain ControllerUnpublishVolume revokes the node's access was not asked for (fencesanity.Config.CheckUnpublishRevokesAccess, csi-fence-sanity --fence.check-unpublish-revokes-access): run it before declaring csi-fence.io/unpublish-revokes-access on the driver's CSIDriver"
	RevokeCheckNeedsMount = "the check that a plain ControllerUnpublishVolume revokes the node's access writes files through the published path: it needs a filesystem volume (--csi.testvolumeaccesstype=mount)"
)

// probeName and afterName are the files the check writes through the
// published path, before and after the unpublish.
const (
	probeName = "csi-fence-sanity-probe"
	afterName = "csi-fence-sanity-after-unpublish"
)

var _ = sanity.DescribeSanity("Unpublish revokes access [Controller Server]", func(sc *sanity.TestContext) {
	var e *env

	BeforeEach(func() {
		if !config.CheckUnpublishRevokesAccess {
			Skip(NoRevokeCheckMessage)
		}
		if strings.TrimSpace(strings.ToLower(sc.Config.TestVolumeAccessType)) == "block" {
			Skip(RevokeCheckNeedsMount)
		}
		e = &env{sc: sc, ctl: csi.NewControllerClient(sc.ControllerConn)}
		e.r = &sanity.Resources{Context: sc, ControllerClient: e.ctl, NodeClient: csi.NewNodeClient(sc.Conn)}
		_, e.ccaps = getControllerCaps(e.ctl)
		Expect(e.ccaps[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME]).To(BeTrue(),
			"the driver does not advertise PUBLISH_UNPUBLISH_VOLUME: it has no ControllerUnpublishVolume that could revoke a node's access, and must not be declared csi-fence.io/unpublish-revokes-access")
		e.this = nodeTemplate(csi.NewNodeClient(sc.Conn), sc.StagingPath, filepath.Join(sc.TargetPath, "target"))
		// The volume is staged and published on this node whatever the
		// plugin's capabilities: the check is about what it leaves there.
		e.this.nodeSide = true
	})

	AfterEach(func() {
		if e == nil {
			return
		}
		defer func() { e = nil }()
		e.cleanup()
		e.r.Cleanup()
	})

	It("a plain ControllerUnpublishVolume cuts writes and reads through the published path, and keeps the data", func() {
		v := e.createVolume("sanity-unpublish-revokes", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
		here := e.place(v, e.this)
		probe := filepath.Join(here.target, probeName)
		data := fmt.Sprintf("written by csi-fence-sanity through %s before ControllerUnpublishVolume of %s at %s\n", here.target, v.id, time.Now().UTC().Format(time.RFC3339Nano))

		By("writing through the published path")
		Expect(syncWrite(probe, data)).To(Succeed(), "write through %s before ControllerUnpublishVolume: the check needs a working data path", here.target)
		got, err := directRead(probe)
		Expect(err).NotTo(HaveOccurred(), "read through %s before ControllerUnpublishVolume: the check needs a working data path", here.target)
		Expect(got).To(Equal(data), "read back through %s before ControllerUnpublishVolume", here.target)

		By(fmt.Sprintf("unpublishing %s from node %s, without fence", v.id, here.nodeID))
		err = retryForNow("ControllerUnpublishVolume", func() error { return e.unpublish(v, here.nodeID) })
		Expect(err).NotTo(HaveOccurred(), "ControllerUnpublishVolume of %s from node %s: a detach that fails is no fence", v.id, here.nodeID)
		here.published = false

		By("writing and reading through the old path")
		var seen []string
		if err := syncWrite(filepath.Join(here.target, afterName), "written after ControllerUnpublishVolume\n"); err == nil {
			seen = append(seen, fmt.Sprintf("write through %s after ControllerUnpublishVolume succeeded: the node still has access to volume %s", here.target, v.id))
		} else {
			By(fmt.Sprintf("the write failed, as it must: %v", err))
		}
		if got, err := directRead(probe); err == nil {
			seen = append(seen, fmt.Sprintf("read through %s after ControllerUnpublishVolume succeeded (%d bytes): the node still has access to volume %s", here.target, len(got), v.id))
		} else {
			By(fmt.Sprintf("the read failed, as it must: %v", err))
		}
		Expect(seen).To(BeEmpty(), "%s", strings.Join(seen, "; "))

		By("cleaning the stale paths as the node agent does")
		Expect(cleanStale(e, v, here)).To(Succeed())

		By("publishing the volume to the node again")
		again := e.place(v, e.this)
		got, err = directRead(filepath.Join(again.target, probeName))
		Expect(err).NotTo(HaveOccurred(), "what was written before ControllerUnpublishVolume cannot be read once %s is published again", v.id)
		Expect(got).To(Equal(data), "what was written before ControllerUnpublishVolume is not there once %s is published again", v.id)
	})
})

// cleanStale cleans p, whose volume was taken away from the node, as the
// node agent does for a volume fenced by detach (pkg/nodeagent, detach.go):
// plain NodeUnpublishVolume and NodeUnstageVolume, NotFound tolerated, a
// path still mounted afterwards unmounted, the directories removed. Any
// other error fails the check: the node agent would leave the node
// quarantined on it.
func cleanStale(e *env, v *volume, p *placement) error {
	type call struct {
		name, path string
		do         func() error
		done       *bool // the placement's state the call ends
	}
	calls := []call{{"NodeUnpublishVolume", p.target, func() error { return e.nodeUnpublish(v, p, false) }, &p.mounted}}
	if p.stage {
		calls = append(calls, call{"NodeUnstageVolume", p.staging, func() error { return e.nodeUnstage(v, p, false) }, &p.staged})
	}
	for _, c := range calls {
		if err := c.do(); err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("%s of %s at %s after ControllerUnpublishVolume: %w (the node agent would leave the node quarantined)", c.name, v.id, c.path, err)
		}
		*c.done = false
		if err := unmountStale(c.path); err != nil {
			return fmt.Errorf("after %s of %s: %w", c.name, v.id, err)
		}
		if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s after %s of %s: %w", c.path, c.name, v.id, err)
		}
	}
	return nil
}

// unmountStale lazily unmounts path if it is still a mount point (a
// corrupted one included).
func unmountStale(path string) error {
	m, err := mount.New("").IsMountPoint(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil && !mount.IsCorruptedMnt(err):
		return fmt.Errorf("checking whether %s is a mount point: %w", path, err)
	case err == nil && !m:
		return nil
	}
	By(fmt.Sprintf("unmounting the stale mount %s", path))
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmounting the stale mount %s: %w", path, err)
	}
	return nil
}

// withIOTimeout runs fn, giving it config.IOTimeout: an I/O that hangs is
// an error (its goroutine is left behind, blocked in the kernel).
func withIOTimeout(what string, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(config.IOTimeout):
		return fmt.Errorf("%s did not return within %v: cannot tell whether the node has access", what, config.IOTimeout)
	}
}

// syncWrite writes data to path synchronously: O_SYNC, then fsync. Either
// failing means the storage did not take the write.
func syncWrite(path, data string) error {
	return withIOTimeout("write of "+path, func() error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_SYNC, 0o644)
		if err != nil {
			return err
		}
		_, err = f.WriteString(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// ioAlign is the alignment of O_DIRECT buffers: the page size covers every
// logical block size.
const ioAlign = 4096

// directRead reads path (at most 1 MiB) past the page cache: with O_DIRECT
// where the file system takes it, otherwise after dropping the file's
// cached pages (POSIX_FADV_DONTNEED).
func directRead(path string) (string, error) {
	var out string
	err := withIOTimeout("read of "+path, func() error {
		f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
		if errors.Is(err, unix.EINVAL) {
			if f, err = os.Open(path); err == nil {
				err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
				if err != nil {
					f.Close()
				}
			}
		}
		if err != nil {
			return err
		}
		defer f.Close()
		// One read per call until a short one: with O_DIRECT a read at
		// an offset that is not aligned fails, and the probe is small.
		buf := aligned(1 << 20)
		n := 0
		for n < len(buf) {
			m, err := f.Read(buf[n:])
			n += m
			if errors.Is(err, io.EOF) || (err == nil && (m == 0 || m%ioAlign != 0)) {
				break
			}
			if err != nil {
				return err
			}
		}
		out = string(buf[:n])
		return nil
	})
	return out, err
}

// aligned returns a buffer of size bytes starting at an ioAlign boundary.
func aligned(size int) []byte {
	b := make([]byte, size+ioAlign)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (ioAlign - 1))
	if off != 0 {
		off = ioAlign - off
	}
	return b[off : off+size : off+size]
}
