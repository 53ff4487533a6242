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
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// loopBacking returns the backing file of the loop device with the device
// number rdev, as the kernel reports it ("" once it is detached).
func loopBacking(t *testing.T, rdev uint64) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", unix.Major(rdev), unix.Minor(rdev)))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// writeSync writes b at the start of the device at path, through to the
// device (O_SYNC): an error of the layers below comes back from the write.
func writeSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_SYNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestFUSEBlockDevice: with BlockDevices a block volume's target is a loop
// device over the block file on the staged FUSE path, one device however
// often the publish is repeated. A write to the device lands in the data
// directory and is counted by the array as the node's; after the fence
// the same write fails with EIO and changes nothing; the forced cleanup
// detaches the device and leaves no mount behind.
func TestFUSEBlockDevice(t *testing.T) {
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("skipped: no loop devices here: %v", err)
	}
	p, data := fusePairWith(t, Config{BlockDevices: true})
	id := p.create(t, blockCap)
	p.publish(t, id, blockCap, true)
	p.publish(t, id, blockCap, true)
	var st unix.Stat_t
	if err := unix.Stat(p.target, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != loopMajor {
		t.Fatalf("the target is not a loop device: mode %o, device %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	t.Cleanup(func() { _ = detachLoop(fmt.Sprintf("/dev/loop%d", unix.Minor(st.Rdev))) })
	if got, want := loopBacking(t, st.Rdev), filepath.Join(p.staging, BlockFileName); got != want {
		t.Fatalf("the loop device is over %q, want %q", got, want)
	}
	if n := mountsAt(t, p.target); n != 1 {
		t.Fatalf("%d mounts at %s, want 1", n, p.target)
	}

	first := bytes.Repeat([]byte{'1'}, 4096)
	if err := writeSync(p.target, first); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(data, id, BlockFileName)
	stored := func() []byte {
		t.Helper()
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close() //nolint:errcheck // read only
		b := make([]byte, 4096)
		if _, err := f.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(stored(), first) {
		t.Fatal("the write to the device is not in the volume's block file")
	}
	s, err := p.arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Volumes[id].Writes["n1"]; w == 0 {
		t.Fatal("the array counted no write of n1")
	}

	unpub := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}
	fence.SetFence(unpub, true)
	if _, err := p.ctl.ControllerUnpublishVolume(p.ctx, unpub); err != nil {
		t.Fatal(err)
	}
	if err := writeSync(p.target, bytes.Repeat([]byte{'2'}, 4096)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write to the device after the fence: %v, want EIO", err)
	}
	if !bytes.Equal(stored(), first) {
		t.Fatal("the volume's block file changed after the fence")
	}

	nu := &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p.target}
	fence.SetNodeUnpublishForce(nu, true)
	if _, err := p.node.NodeUnpublishVolume(p.ctx, nu); err != nil {
		t.Fatal(err)
	}
	ns := &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: p.staging}
	fence.SetNodeUnstageForce(ns, true)
	if _, err := p.node.NodeUnstageVolume(p.ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{p.staging, p.target} {
		if n := mountsAt(t, m); n != 0 {
			t.Fatalf("%d mounts left at %s", n, m)
		}
	}
	if _, err := os.Lstat(p.target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the target is left: %v", err)
	}
	if b := loopBacking(t, st.Rdev); b != "" {
		t.Fatalf("the loop device is still over %s", b)
	}
}
