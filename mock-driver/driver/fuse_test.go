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
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/fusefs"
	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// fusePair is a pair whose node plugin serves filesystem volumes with FUSE,
// skipping the test where FUSE cannot be mounted.
func fusePair(t *testing.T) (*pair, string) {
	t.Helper()
	return fusePairWith(t, Config{})
}

// fusePairWith is fusePair with cfg (its data path set here).
func fusePairWith(t *testing.T, cfg Config) (*pair, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: FUSE mounts need root (CAP_SYS_ADMIN)")
	}
	if err := fusefs.Usable(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	data := filepath.Join(t.TempDir(), "data")
	cfg.MountDataDir, cfg.FUSE = data, true
	p := newPair(t, cfg)
	t.Cleanup(func() {
		for _, m := range []string{p.target, p.staging} {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	})
	return p, data
}

func appendTo(path, s string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestFUSEDataPath: with FUSE the kubelet's staging path is a FUSE mount of
// the volume's data directory and the target a bind mount of it (each
// once, however often the calls are repeated); a container's write through
// the target lands in the data directory and is counted by the array as
// this node's; after the fence (ControllerUnpublishVolume fence=true) the
// same write fails with EIO and changes nothing; only the forced cleanup
// is accepted, and it leaves no mount behind.
func TestFUSEDataPath(t *testing.T) {
	p, data := fusePair(t)
	id := p.create(t, mountCap)
	p.publish(t, id, mountCap, true)
	p.publish(t, id, mountCap, true)
	for _, m := range []string{p.staging, p.target} {
		if n := mountsAt(t, m); n != 1 {
			t.Fatalf("%d mounts at %s, want 1", n, m)
		}
	}
	if fst := fsTypeAt(t, p.staging); fst != fusefs.FSType {
		t.Fatalf("staging mount of type %q, want %s", fst, fusefs.FSType)
	}
	file := filepath.Join(p.target, "log")
	if err := appendTo(file, "1\n"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(data, id, "log")); err != nil || string(b) != "1\n" {
		t.Fatalf("the write through the target is not in the data directory: %q, %v", b, err)
	}
	s, err := p.arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Volumes[id].Writes["n1"]; w != 1 {
		t.Fatalf("the array counted %d writes of n1, want 1", w)
	}

	unpub := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}
	fence.SetFence(unpub, true)
	if _, err := p.ctl.ControllerUnpublishVolume(p.ctx, unpub); err != nil {
		t.Fatal(err)
	}
	if err := appendTo(file, "2\n"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after the fence: %v, want EIO", err)
	}
	if b, _ := os.ReadFile(filepath.Join(data, id, "log")); string(b) != "1\n" {
		t.Fatalf("the data changed after the fence: %q", b)
	}

	_, err = p.node.NodeUnpublishVolume(p.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p.target})
	wantCode(t, err, codes.FailedPrecondition)
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
	if got := p.access(t, id); got != "" {
		t.Fatalf("access after the forced cleanup: %q, want none (quarantine lifted)", got)
	}
}

// TestFUSEDetach: a driver declared to revoke access on unpublish, on the
// real data path. Revokes: after a plain ControllerUnpublishVolume a write
// and a read through the old target fail with EIO and change nothing, the
// plain NodeUnpublishVolume/NodeUnstageVolume (the driver has no
// FORCE_UNPUBLISH) succeed, leave no mount and lift the quarantine, and
// the volume, published again, holds what was written before. Lies: the
// same unpublish succeeds and the node keeps writing.
func TestFUSEDetach(t *testing.T) {
	for _, mode := range []DetachMode{DetachRevokes, DetachLies} {
		t.Run(string(mode), func(t *testing.T) {
			p, data := fusePairWith(t, Config{Detach: mode})
			id := p.create(t, mountCap)
			p.publish(t, id, mountCap, true)
			file := filepath.Join(p.target, "log")
			if err := appendTo(file, "1\n"); err != nil {
				t.Fatal(err)
			}
			if _, err := p.ctl.ControllerUnpublishVolume(p.ctx, unpublishReq(id, "n1", false)); err != nil {
				t.Fatal(err)
			}
			werr := appendTo(file, "2\n")
			b, rerr := os.ReadFile(file)
			if mode == DetachLies {
				if werr != nil || rerr != nil {
					t.Fatalf("the liar's node lost its data path: write %v, read %v", werr, rerr)
				}
				if got := p.access(t, id); got != array.AccessUnpublished {
					t.Fatalf("access after the unpublish: %q, want %q", got, array.AccessUnpublished)
				}
				return
			}
			if !errors.Is(werr, syscall.EIO) {
				t.Errorf("write after the detach: %v, want EIO", werr)
			}
			if !errors.Is(rerr, syscall.EIO) {
				t.Errorf("read after the detach: %q, %v, want EIO", b, rerr)
			}
			if b, _ := os.ReadFile(filepath.Join(data, id, "log")); string(b) != "1\n" {
				t.Fatalf("the data changed after the detach: %q", b)
			}
			if got := p.access(t, id); got != array.AccessDetached {
				t.Fatalf("access after the detach: %q, want %q", got, array.AccessDetached)
			}
			if _, err := p.node.NodeUnpublishVolume(p.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p.target}); err != nil {
				t.Fatalf("plain NodeUnpublishVolume after the detach: %v", err)
			}
			if _, err := p.node.NodeUnstageVolume(p.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: p.staging}); err != nil {
				t.Fatalf("plain NodeUnstageVolume after the detach: %v", err)
			}
			for _, m := range []string{p.staging, p.target} {
				if n := mountsAt(t, m); n != 0 {
					t.Fatalf("%d mounts left at %s", n, m)
				}
			}
			if got := p.access(t, id); got != "" {
				t.Fatalf("access after the cleanup: %q, want none (quarantine lifted)", got)
			}
			p.publish(t, id, mountCap, true)
			if b, err := os.ReadFile(file); err != nil || string(b) != "1\n" {
				t.Fatalf("published again, the volume holds %q (%v), want what was written before the detach", b, err)
			}
		})
	}
}

// fuseHelperEnv makes TestFUSEHelperProcess a node plugin that stages and
// publishes a volume and then waits to be killed.
const fuseHelperEnv = "CSI_FENCE_MOCK_FUSE_HELPER"

type helperArgs struct {
	ArrayDir, DataDir, Volume, Staging, Target string
}

// TestFUSEHelperProcess is not a test: run by TestFUSEStaleMount in a child
// process, it plays a node plugin whose process then dies.
func TestFUSEHelperProcess(t *testing.T) {
	raw := os.Getenv(fuseHelperEnv)
	if raw == "" {
		t.Skip("helper of TestFUSEStaleMount")
	}
	var a helperArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		t.Fatal(err)
	}
	arr, err := array.Open(a.ArrayDir)
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{NodeID: "n1", MountDataDir: a.DataDir, FUSE: true}, arr)
	ctx := t.Context()
	if _, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: a.Volume, StagingTargetPath: a.Staging, VolumeCapability: mountCap}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: a.Volume, StagingTargetPath: a.Staging, TargetPath: a.Target, VolumeCapability: mountCap}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	select {} // until killed
}

// TestFUSEStaleMount: when the node plugin's process dies, its FUSE mounts
// stay, dead: a write through the target fails with ENOTCONN (a dead
// node's writer sees its storage gone, and nothing reaches the data
// directory behind the array's back). The next node plugin serves the
// staging path anew on NodeStageVolume and cleans the dead target on
// NodeUnpublishVolume, leaving no mount behind.
func TestFUSEStaleMount(t *testing.T) {
	p, data := fusePair(t)
	id := p.create(t, mountCap)
	if _, err := p.ctl.ControllerPublishVolume(p.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: mountCap}); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(helperArgs{ArrayDir: p.arr.Dir(), DataDir: data, Volume: id, Staging: p.staging, Target: p.target})
	cmd := exec.Command(os.Args[0], "-test.run=^TestFUSEHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), fuseHelperEnv+"="+string(args))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
				return
			}
		}
		ready <- errors.New("the helper node plugin ended before it was ready")
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Wait()
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the helper node plugin did not stage and publish within 30s")
	}
	if err := appendTo(filepath.Join(p.target, "log"), "alive\n"); err != nil {
		t.Fatalf("write through the helper's mount: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	if err := appendTo(filepath.Join(p.target, "log"), "dead\n"); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("write through the dead node plugin's mount: %v, want ENOTCONN", err)
	}
	if _, err := p.node.NodeStageVolume(p.ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: p.staging, VolumeCapability: mountCap}); err != nil {
		t.Fatalf("NodeStageVolume over a dead FUSE mount: %v", err)
	}
	if err := appendTo(filepath.Join(p.staging, "log"), "again\n"); err != nil {
		t.Fatalf("write through the staging path served anew: %v", err)
	}
	if _, err := p.node.NodeUnpublishVolume(p.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p.target}); err != nil {
		t.Fatalf("NodeUnpublishVolume of a dead FUSE mount: %v", err)
	}
	if _, err := p.node.NodeUnstageVolume(p.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: p.staging}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{p.staging, p.target} {
		if n := mountsAt(t, m); n != 0 {
			t.Fatalf("%d mounts left at %s", n, m)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(data, id, "log")); string(b) != "alive\nagain\n" {
		t.Fatalf("the volume holds %q, want what the live mounts wrote", b)
	}
}

// fsTypeAt returns the file system type of the topmost mount at path.
func fsTypeAt(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	fst := ""
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if f := strings.Fields(pre); ok && len(f) > 4 && f[4] == path {
			fst = strings.Fields(post)[0]
		}
	}
	return fst
}
