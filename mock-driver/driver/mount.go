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

package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/fusefs"
)

// realMounts says whether a volume of capability c gets real mounts
// (Config.MountDataDir set, a filesystem volume, or a block volume with
// Config.BlockDevices; other block volumes keep their marker file).
func (d *Driver) realMounts(c *csi.VolumeCapability) bool {
	return d.cfg.MountDataDir != "" && (c.GetBlock() == nil || d.cfg.BlockDevices)
}

// dataDir returns, creating it, the directory that holds volume id's files.
func (d *Driver) dataDir(id string) (string, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsRune(id, '/') {
		return "", fmt.Errorf("volume ID %q cannot name a data directory", id)
	}
	dir := filepath.Join(d.cfg.MountDataDir, id)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", fmt.Errorf("the data directory of volume %s: %w", id, err)
	}
	// Writable by a container of any user, as a fresh filesystem's root
	// would be made for it by fsGroup.
	return dir, os.Chmod(dir, 0o777)
}

// makeMountPoint makes the directory path, detaching first a dead mount
// there: a FUSE mount whose server ended (a previous node plugin's) answers
// ENOTCONN to everything, the mkdir included.
func makeMountPoint(path string) error {
	if _, err := os.Stat(path); mount.IsCorruptedMnt(err) {
		klog.InfoS("Detaching a corrupted mount", "path", path, "err", err)
		if err := fusefs.Detach(path); err != nil {
			return err
		}
	}
	return os.MkdirAll(path, 0o750)
}

// bindMount bind-mounts source on target, unless target is a mount point
// already (the call is repeated: CSI operations are idempotent).
func bindMount(source, target string) error {
	isMnt, err := mount.New("").IsMountPoint(target)
	if err != nil {
		return fmt.Errorf("checking %s: %w", target, err)
	}
	if isMnt {
		return nil
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on %s: %w", source, target, err)
	}
	return nil
}

// unmountIfMounted unmounts path when it is a mount point; force detaches
// it lazily (MNT_DETACH), for a fenced volume whose users may still hold
// it: the mount is gone from the tree at once and nothing new reaches it.
// A corrupted mount (a FUSE mount whose server died: ENOTCONN) is detached
// lazily, forced or not: it cannot be unmounted cleanly, and nothing can
// use it any more.
func (d *Driver) unmountIfMounted(path string, force bool) error {
	if d.cfg.MountDataDir == "" {
		return nil
	}
	isMnt, err := mount.New("").IsMountPoint(path)
	switch {
	case errors.Is(err, os.ErrNotExist) || (err == nil && !isMnt):
		return nil
	case mount.IsCorruptedMnt(err):
		klog.InfoS("Detaching a corrupted mount", "path", path, "err", err)
		return fusefs.Detach(path)
	case err != nil:
		return fmt.Errorf("checking %s: %w", path, err)
	}
	flags := 0
	if force {
		flags = unix.MNT_DETACH
	}
	if err := unix.Unmount(path, flags); err != nil {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	return nil
}

// gateReads says whether the FUSE data path cuts reads too: when a plain
// unpublish takes the volume away from the node (array.PlainUnpublishDetach,
// DetachRevokes), no read may reach it any more, as on a disk gone from the
// machine. The instance's own setting decides, when the volume is staged:
// a run-time override of the plain unpublish does not change it.
func (d *Driver) gateReads() bool {
	return d.cfg.Array.PlainUnpublish == array.PlainUnpublishDetach
}

// mountFUSE serves volume id's data directory with FUSE at staging, unless
// this process serves it there already (the call is repeated: CSI
// operations are idempotent). A mount point at staging that this process
// does not serve is a previous instance's, whose server ended with it
// (ENOTCONN): it is detached and the volume served anew.
func (d *Driver) mountFUSE(id, data, staging string) error {
	d.fuseMu.Lock()
	defer d.fuseMu.Unlock()
	if m := d.fuse[staging]; m != nil {
		isMnt, err := mount.New("").IsMountPoint(staging)
		if err == nil && isMnt {
			return nil
		}
		// Unmounted behind this process's back: serve it again.
		klog.InfoS("A FUSE mount of this node plugin is gone; mounting it again", "volume", id, "path", staging, "err", err)
		if err := m.Close(true); err != nil {
			return err
		}
		delete(d.fuse, staging)
	}
	isMnt, err := mount.New("").IsMountPoint(staging)
	if err != nil && !mount.IsCorruptedMnt(err) {
		return fmt.Errorf("checking %s: %w", staging, err)
	}
	if err != nil || isMnt {
		klog.InfoS("Detaching a mount this node plugin does not serve", "volume", id, "path", staging, "err", err)
		if err := fusefs.Detach(staging); err != nil {
			return err
		}
	}
	m, err := fusefs.New(staging, data, d.array, id, d.cfg.NodeID, fusefs.Options{GateReads: d.gateReads()})
	if err != nil {
		return err
	}
	d.fuse[staging] = m
	return nil
}

// unmountStaging undoes NodeStageVolume's mount at staging: the FUSE mount
// this process serves there (Mount.Close), or whatever else is mounted
// there (a bind mount, a previous instance's dead FUSE mount).
func (d *Driver) unmountStaging(staging string, force bool) error {
	d.fuseMu.Lock()
	defer d.fuseMu.Unlock()
	m := d.fuse[staging]
	if m == nil {
		return d.unmountIfMounted(staging, force)
	}
	if err := m.Close(force); err != nil {
		return err
	}
	delete(d.fuse, staging)
	return nil
}
