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

package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/mount-utils"

	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	"github.com/csi-fence/fence-attacher/mock-driver/fusefs"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// These tests play a driver whose owner declares that a plain
// ControllerUnpublishVolume revokes the node's access (a cloud disk driver:
// no UNPUBLISH_FENCE, no FORCE_UNPUBLISH; the mock's DetachRevokes): the
// controller fenced the node's volumes with that detach, and the node,
// back, holds stale mounts of volumes that were taken away under it.

// A volume fenced by detach is cleaned with plain calls, and recorded
// clean at the first attempt, without the warning that a driver without
// FORCE_UNPUBLISH gets: for a declared driver that is the expected path.
func TestCleansVolumeFencedByDetach(t *testing.T) {
	e := newEnv(t)
	e.declare(contract.UnpublishRevokesAccessTrue)
	e.startMockDriver(driver.Config{Detach: driver.DetachRevokes})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1", "pod-2")
	e.detach("vol-a", "pv-a")
	// vol-b was never staged: its quarantine lifts with the unstage of
	// the path the kubelet would have used.
	e.attach("vol-b")
	e.detach("vol-b", "pv-b")

	e.run(e.options())
	e.waitCleaned("vol-a")
	e.waitCleaned("vol-b")
	l := e.layout
	mustBeGone(t, l.PodVolumeDir("pod-1", "pv-a"), l.PodVolumeDir("pod-2", "pv-a"), l.StagingDir(testDriver, "vol-a"))
	for _, h := range []string{"vol-a", "vol-b"} {
		if p := e.publication(h); p != nil {
			t.Errorf("%s still quarantined on the array: %+v", h, p)
		}
	}
	events := e.drainEvents()
	for _, ev := range events {
		if strings.HasPrefix(ev, "Warning ") {
			t.Errorf("warning for a declared driver's expected path: %s", ev)
		}
	}
	if !e.hasEvent("Normal " + ReasonVolumeCleaned) {
		t.Errorf("no %s event: %v", ReasonVolumeCleaned, events)
	}
	if v := e.entry("vol-a"); !strings.Contains(v.CleanupError+e.lastCleanedEvent(), "revokes access") {
		t.Errorf("the cleanup does not say it relied on the declaration: %v", e.events)
	}
	if v := e.violations(); v["S1"]+v["S2"] != 0 {
		t.Errorf("safety violations on the array: %v", v)
	}
}

// NotFound from NodeUnpublishVolume/NodeUnstageVolume is what a driver that
// looks the volume up says once it was taken away: it is tolerated, and the
// agent unmounts itself the stale mounts the call left, before it removes
// the directories; the record is clean at the first attempt.
func TestDetachNotFoundTolerated(t *testing.T) {
	e := newEnv(t)
	e.declare(contract.UnpublishRevokesAccessTrue)
	e.startMockDriver(driver.Config{Detach: driver.DetachRevokes})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	e.detach("vol-a", "pv-a")
	l := e.layout
	target, staging := l.PublishPath("pod-1", "pv-a"), l.StagingPath(testDriver, "vol-a")
	e.mounts.set(target, true)
	e.mounts.set(staging, true)
	// The fault answers before the mock does anything: the stale mount
	// stays, as a driver that no longer knows the volume leaves it.
	if err := e.faults.Set("NodeUnpublishVolume", faults.Fault{Code: codes.NotFound, Count: 1}); err != nil {
		t.Fatal(err)
	}

	e.run(e.options())
	e.waitCleaned("vol-a")
	if got := e.unmounts.unmounted(); !slices.Contains(got, target) {
		t.Errorf("the agent unmounted %v, want the stale publish path %s among them", got, target)
	}
	mustBeGone(t, l.PodVolumeDir("pod-1", "pv-a"), l.StagingDir(testDriver, "vol-a"))
	if e.hasEvent("Warning " + ReasonCleanupFailed) {
		t.Errorf("a tolerated NotFound failed the cleanup: %v", e.events)
	}
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
}

// Any other error of the driver may mean it still holds something of the
// volume on the node: the cleanup fails and is retried, the node stays
// quarantined meanwhile. The stale mount the failed call left is unmounted
// all the same, so that a driver that stumbles over a mount whose device is
// gone finds a plain directory the next time: the node is not stranded.
func TestDetachDriverErrorRetried(t *testing.T) {
	e := newEnv(t)
	e.declare(contract.UnpublishRevokesAccessTrue)
	e.startMockDriver(driver.Config{Detach: driver.DetachRevokes})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	e.detach("vol-a", "pv-a")
	target := e.layout.PublishPath("pod-1", "pv-a")
	e.mounts.set(target, true)
	if err := e.faults.Set("NodeUnpublishVolume", faults.Fault{Code: codes.Internal, Count: 1}); err != nil {
		t.Fatal(err)
	}

	e.run(e.options())
	e.waitFor("the failed attempt reported", func() bool { return e.hasEvent("Warning " + ReasonCleanupFailed) })
	e.waitCleaned("vol-a")
	if got := e.unmounts.unmounted(); !slices.Contains(got, target) {
		t.Errorf("the agent unmounted %v, want the stale publish path %s among them", got, target)
	}
	mustBeGone(t, e.layout.PodVolumeDir("pod-1", "pv-a"))
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
}

// A stale mount the agent cannot unmount (it lacks the privileges, or the
// mount is busy) keeps the volume unclean, with the reason.
func TestDetachStaleMountNotUnmountable(t *testing.T) {
	e := newEnv(t)
	e.declare(contract.UnpublishRevokesAccessTrue)
	e.startMockDriver(driver.Config{Detach: driver.DetachRevokes})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	e.detach("vol-a", "pv-a")
	target := e.layout.PublishPath("pod-1", "pv-a")
	e.mounts.set(target, true)
	if err := e.faults.Set("NodeUnpublishVolume", faults.Fault{Code: codes.NotFound}); err != nil {
		t.Fatal(err)
	}
	opts := e.options()
	opts.Unmounter = unmounterFunc(func(string) error { return fmt.Errorf("operation not permitted") })

	e.run(opts)
	e.waitCleanupError("vol-a", "operation not permitted")
	mustExist(t, target)
}

type unmounterFunc func(string) error

func (f unmounterFunc) Unmount(p string) error { return f(p) }

// Without the declaration (no annotation, "false", no CSIDriver, or a
// CSIDriver that cannot be read) a plugin without FORCE_UNPUBLISH is
// cleaned as before: plain calls, the warning, and no unmount of the
// agent's own.
func TestUndeclaredDriverKeepsTheWarning(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(*env)
		wantMsg string
	}{
		{name: "no CSIDriver", setup: func(*env) {}},
		{name: "no annotation", setup: func(e *env) { e.declare("") }},
		{name: "false", setup: func(e *env) { e.declare("false") }},
		{name: "unreadable", setup: func(e *env) {
			e.declare(contract.UnpublishRevokesAccessTrue)
			e.csiNodes.PrependReactor("get", "csidrivers", func(a k8stesting.Action) (bool, runtime.Object, error) {
				return denyAll(a)
			})
		}, wantMsg: "denied by the test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.setup(e)
			e.startMockDriver(driver.Config{Detach: driver.DetachRevokes})
			e.attach("vol-a")
			e.mount("vol-a", "pv-a", true, "pod-1")
			e.detach("vol-a", "pv-a")
			target := e.layout.PublishPath("pod-1", "pv-a")

			e.run(e.options())
			e.waitCleaned("vol-a")
			found := false
			for _, ev := range e.drainEvents() {
				if strings.HasPrefix(ev, "Warning "+ReasonForceUnpublishUnsupported) {
					found = true
					if !strings.Contains(ev, tc.wantMsg) {
						t.Errorf("the warning does not say why the declaration was not read (%q): %s", tc.wantMsg, ev)
					}
				}
			}
			if !found {
				t.Errorf("no %s event: %v", ReasonForceUnpublishUnsupported, e.events)
			}
			if got := e.unmounts.unmounted(); len(got) != 0 {
				t.Errorf("the agent unmounted %v for an undeclared driver", got)
			}
			mustBeGone(t, filepath.Dir(target))
		})
	}
}

// lastCleanedEvent returns the last FencedVolumeCleaned event.
func (e *env) lastCleanedEvent() string {
	last := ""
	for _, ev := range e.drainEvents() {
		if strings.HasPrefix(ev, "Normal "+ReasonVolumeCleaned) {
			last = ev
		}
	}
	return last
}

// A block volume fenced by detach: the kubelet's bind mount of the device
// for each pod (volumeDevices/<pv>/dev/<pod>), whose device is gone, is the
// agent's to unmount too, once the plugin's NodeUnpublishVolume of that
// pod's publish path returned; nothing else is left to hold the node.
func TestDetachedBlockVolume(t *testing.T) {
	e := newEnv(t)
	e.declare(contract.UnpublishRevokesAccessTrue)
	e.startMockDriver(driver.Config{Detach: driver.DetachRevokes})
	e.attach("vol-a")
	e.mapBlock("vol-a", "pv-a", "pod-1")
	e.detach("vol-a", "pv-a")
	l := e.layout
	dev := filepath.Join(l.BlockGlobalMapPath("pv-a"), "pod-1")
	e.mounts.set(dev, true)

	e.run(e.options())
	e.waitCleaned("vol-a")
	if got := e.unmounts.unmounted(); !slices.Contains(got, dev) {
		t.Errorf("the agent unmounted %v, want the device's stale bind mount %s among them", got, dev)
	}
	mustBeGone(t, l.BlockVolumeDir("pv-a"), l.BlockStagingPath("pv-a"), l.BlockPublishDir("pv-a"), l.PodDeviceMapPath("pod-1", "pv-a"))
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
}

// The same on the mock's real data path (FUSE, real mounts, the real mount
// checker and unmount): the node plugin's plain NodeUnpublishVolume fails
// with NotFound and leaves its bind mount at the publish path, which the
// agent unmounts itself; the staging path's FUSE mount is the plugin's
// NodeUnstageVolume's to unmount. Nothing stays mounted, the record is
// clean, the array's quarantine lifted.
func TestDetachRealMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: real mounts need root (CAP_SYS_ADMIN)")
	}
	if err := fusefs.Usable(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	e := newEnv(t)
	e.declare(contract.UnpublishRevokesAccessTrue)
	e.startMockDriver(driver.Config{Detach: driver.DetachRevokes, MountDataDir: t.TempDir(), FUSE: true})
	l := e.layout
	target, staging := l.PublishPath("pod-1", "pv-a"), l.StagingPath(testDriver, "vol-a")
	t.Cleanup(func() {
		for _, p := range []string{target, staging} {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	if err := os.WriteFile(filepath.Join(target, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.detach("vol-a", "pv-a")
	if err := os.WriteFile(filepath.Join(target, "data"), []byte("y"), 0o644); err == nil {
		t.Fatal("a write through the publish path succeeded after the detach")
	}
	// Every time: only the agent's own unmount can clear the publish path.
	if err := e.faults.Set("NodeUnpublishVolume", faults.Fault{Code: codes.NotFound}); err != nil {
		t.Fatal(err)
	}
	opts := e.options()
	opts.Mounts, opts.Unmounter = mount.New(""), nil // the real ones

	e.run(opts)
	e.waitCleaned("vol-a")
	for _, p := range []string{target, staging} {
		if m, err := mount.New("").IsMountPoint(p); err == nil && m {
			t.Errorf("%s is still a mount point", p)
		}
	}
	mustBeGone(t, l.PodVolumeDir("pod-1", "pv-a"), l.StagingDir(testDriver, "vol-a"))
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
}
