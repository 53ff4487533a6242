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
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
)

// Block volumes as devices (Config.BlockDevices). A container runtime
// gives a pod's volumeDevices only device nodes (containerd's
// oci.DeviceFromPath refuses a regular file), so a block volume a real
// kubelet maps must be a device: the node plugin publishes a loop device
// over a file on the volume's staged data path and bind-mounts it onto the
// target path, as block drivers bind-mount theirs. On the FUSE data path
// the loop device's writes go through the FUSE server like a file's, and
// fail with EIO once the node is fenced.

// BlockFileName is the file on a block volume's data path that its loop
// devices are over.
const BlockFileName = "block-device"

// BlockDeviceSize is the size of a block volume's device, whatever its
// capacity: the file is sparse, and holds only what is written to it.
const BlockDeviceSize = 16 << 20

// publishBlockDevice bind-mounts a loop device over source's block file
// (created at its first publish) onto target, a file it creates, unless
// target is a mount point already (the call is repeated: CSI operations are
// idempotent). Each target gets a loop device of its own.
func publishBlockDevice(source, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if isMnt, err := mount.New("").IsMountPoint(target); err != nil || isMnt {
		return err
	}
	file := filepath.Join(source, BlockFileName)
	backing, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o660)
	if err != nil {
		return fmt.Errorf("the block file of the volume: %w", err)
	}
	defer backing.Close() //nolint:errcheck // the loop device holds its own reference
	if fi, err := backing.Stat(); err != nil {
		return err
	} else if fi.Size() == 0 {
		if err := backing.Truncate(BlockDeviceSize); err != nil {
			return fmt.Errorf("sizing %s: %w", file, err)
		}
	}
	dev, err := attachLoop(backing)
	if err != nil {
		return fmt.Errorf("a loop device over %s: %w", file, err)
	}
	if err := unix.Mount(dev, target, "", unix.MS_BIND, ""); err != nil {
		if derr := detachLoop(dev); derr != nil {
			klog.ErrorS(derr, "Loop device left attached", "device", dev, "file", file)
		}
		return fmt.Errorf("bind-mounting %s on %s: %w", dev, target, err)
	}
	klog.V(4).InfoS("Published a block volume's device", "device", dev, "file", file, "target", target)
	return nil
}

// unpublishBlockDevice detaches the loop device bind-mounted at target, if
// it holds one. The kernel tears a loop device down when its last opener
// closes it: a container still holding it (a fenced volume, force-cleaned
// under a running pod) keeps it until it lets go, its I/O failing.
func unpublishBlockDevice(target string) error {
	var st unix.Stat_t
	if err := unix.Stat(target, &st); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("checking %s: %w", target, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != loopMajor {
		return nil
	}
	return detachLoop(target)
}

// loopMajor is the loop driver's block major number (Linux's
// LOOP_MAJOR).
const loopMajor = 7

// attachLoop configures a free loop device over f and returns its path. A
// device found free may be taken by another process (a kubelet's losetup)
// before it is configured: then the next free one is tried.
func attachLoop(f *os.File) (string, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer ctl.Close() //nolint:errcheck // read-only use
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		err = configureLoop(dev, f)
		if err == nil {
			return dev, nil
		}
		if !errors.Is(err, unix.EBUSY) || attempt == 4 {
			return "", err
		}
		time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond)
	}
}

func configureLoop(dev string, f *os.File) error {
	// The device node appears shortly after LOOP_CTL_GET_FREE added it.
	var l *os.File
	var err error
	for i := 0; i < 50; i++ {
		if l, err = os.OpenFile(dev, os.O_RDWR, 0); !errors.Is(err, os.ErrNotExist) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer l.Close() //nolint:errcheck // configured through the ioctl
	cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
	copy(cfg.Info.File_name[:], f.Name())
	if err := unix.IoctlLoopConfigure(int(l.Fd()), &cfg); err != nil {
		return fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
	}
	return nil
}

// detachLoop detaches the loop device at path (a device node, or a bind
// mount of one). A device still open elsewhere is torn down once its last
// opener closes it.
func detachLoop(path string) error {
	l, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer l.Close() //nolint:errcheck // read-only use
	if err := unix.IoctlSetInt(int(l.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("LOOP_CLR_FD %s: %w", path, err)
	}
	return nil
}
