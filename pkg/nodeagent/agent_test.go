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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

// These tests run the agent against the project's mock node plugin, which
// enforces the extension's semantics on a simulated array: a fenced volume
// can only be unpublished and unstaged with force=true, and its quarantine on
// the node is lifted only when nothing of it is staged or published there.

func TestCleansStagedAndPublishedVolume(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	// vol-a failed over: staged, published to two pods, fenced.
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1", "pod-2")
	e.fence("vol-a", "pv-a")
	// vol-b lives on this node and is not in the record: it must be left
	// alone, on disk and on the array.
	e.attach("vol-b")
	e.mount("vol-b", "pv-b", true, "pod-3")
	// vol-c is in the record but its fence failed: the driver may still have
	// applied it (S8), so it is cleaned like a fenced one.
	// to clean.
	e.attach("vol-c")
	e.mount("vol-c", "pv-c", true, "pod-4")
	if err := fencerecord.RecordFenceError(e.ctx, e.records, testNode, "NodeUnreachable", fencingv1alpha1.FencedVolume{Driver: testDriver, VolumeHandle: "vol-c", PersistentVolumeName: "pv-c"}, "refused"); err != nil {
		t.Fatal(err)
	}
	// vol-d is fenced for another driver with the same handle space.
	if err := fencerecord.RecordFenced(e.ctx, e.records, testNode, "NodeUnreachable", fencingv1alpha1.FencedVolume{Driver: "other.example.com", VolumeHandle: "vol-b", PersistentVolumeName: "pv-x"}); err != nil {
		t.Fatal(err)
	}
	ok0 := counter(t, resultSuccess)

	e.run(e.options())
	e.waitCleaned("vol-a")

	l := e.layout
	e.waitCleaned("vol-c")
	mustBeGone(t, l.PodVolumeDir("pod-1", "pv-a"), l.PodVolumeDir("pod-2", "pv-a"), l.StagingDir(testDriver, "vol-a"),
		l.PodVolumeDir("pod-4", "pv-c"), l.StagingDir(testDriver, "vol-c"))
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
	mustExist(t, l.PublishPath("pod-3", "pv-b"), filepath.Join(l.PodVolumeDir("pod-3", "pv-b"), kubeletlayout.VolDataFileName),
		l.StagingPath(testDriver, "vol-b"))
	for _, h := range []string{"vol-b"} {
		if p := e.publication(h); p == nil || p.Access != array.AccessGranted || p.Staged == "" || len(p.Published) != 1 {
			t.Errorf("%s was touched on the array: %+v", h, p)
		}
	}
	fr, _ := e.records.Get(e.ctx, testNode)
	if v := fencerecord.Find(fr, "other.example.com", "vol-b"); v.CleanedTime != nil || v.CleanupError != "" {
		t.Errorf("another driver's entry was written: %+v", v)
	}
	// The event follows the record and the metric.
	e.waitFor("the cleanup event", func() bool { return e.hasEvent("Normal " + ReasonVolumeCleaned) })
	e.waitFor("two cleanups counted", func() bool { return counter(t, resultSuccess)-ok0 >= 2 })
	if got := counter(t, resultSuccess) - ok0; got != 2 {
		t.Errorf("csi_fence_node_cleanups_total{result=success} grew by %v, want 2", got)
	}
	if v := e.violations(); v["S1"]+v["S2"] != 0 {
		t.Errorf("safety violations on the array: %v", v)
	}
}

func TestCleansPublishedOnlyVolume(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{NoStage: true})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", false, "pod-1")
	e.fence("vol-a", "pv-a")

	e.run(e.options())
	e.waitCleaned("vol-a")
	mustBeGone(t, e.layout.PodVolumeDir("pod-1", "pv-a"))
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
}

func TestCleansBlockVolume(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.attach("vol-a")
	e.mapBlock("vol-a", "pv-a", "pod-1", "pod-2")
	e.fence("vol-a", "pv-a")
	e.attach("vol-b")
	e.mapBlock("vol-b", "pv-b", "pod-3")

	e.run(e.options())
	e.waitCleaned("vol-a")
	l := e.layout
	mustBeGone(t, l.BlockVolumeDir("pv-a"), l.BlockStagingPath("pv-a"), l.BlockPublishDir("pv-a"),
		l.PodDeviceMapPath("pod-1", "pv-a"), l.PodDeviceMapPath("pod-2", "pv-a"))
	mustExist(t, l.BlockPublishPath("pv-b", "pod-3"), l.BlockStagingPath("pv-b"), l.PodDeviceMapPath("pod-3", "pv-b"),
		filepath.Join(l.BlockDataDir("pv-b"), kubeletlayout.VolDataFileName))
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
}

func TestVolumeFencedBeforeItWasStaged(t *testing.T) {
	// Attached, never staged, fenced: nothing on disk, but the array holds
	// the quarantine until a forced unstage tells it the node is clean.
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.attach("vol-a")
	e.fence("vol-a", "pv-a")
	e.run(e.options())
	e.waitCleaned("vol-a")
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
}

func TestLeftoversWithoutMetadata(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	e.fence("vol-a", "pv-a")
	l := e.layout
	// A publish dir of pv-a without vol_data.json (a kubelet that crashed
	// before writing it): removed, without a CSI call.
	if err := os.MkdirAll(l.PublishPath("pod-9", "pv-a"), 0o750); err != nil {
		t.Fatal(err)
	}
	// Dirs without metadata that match no fenced volume: left and reported.
	unknown := l.PublishPath("pod-9", "scratch")
	if err := os.MkdirAll(unknown, 0o750); err != nil {
		t.Fatal(err)
	}
	foreign := l.StagingPath(testDriver, "vol-unknown")
	if err := os.MkdirAll(foreign, 0o750); err != nil {
		t.Fatal(err)
	}

	e.run(e.options())
	e.waitCleaned("vol-a")
	mustBeGone(t, l.PodVolumeDir("pod-9", "pv-a"), l.PodVolumeDir("pod-1", "pv-a"))
	mustExist(t, unknown, foreign)
	e.waitFor("unattributed leftovers reported", func() bool {
		n := 0
		for _, ev := range e.drainEvents() {
			if strings.HasPrefix(ev, "Warning "+ReasonUnattributedLeftover) {
				n++
			}
		}
		return n == 2
	})
}

func TestUnverifiedLeftoverStillMounted(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	e.fence("vol-a", "pv-a")
	// A metadata-less dir named pv-a whose mount subdir is a mount point
	// (perhaps an inline volume of another driver): it is not ours to
	// unmount, and the volume is not declared clean while it is there.
	stray := e.layout.PublishPath("pod-9", "pv-a")
	if err := os.MkdirAll(stray, 0o750); err != nil {
		t.Fatal(err)
	}
	e.mounts.set(stray, true)

	e.run(e.options())
	e.waitCleanupError("vol-a", "still a mount point")
	mustExist(t, stray)
	// Once it is unmounted, the next retry finishes the job.
	e.mounts.set(stray, false)
	e.waitCleaned("vol-a")
	mustBeGone(t, e.layout.PodVolumeDir("pod-9", "pv-a"))
}

func TestPluginWithoutForceUnpublish(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{NoForce: true})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	e.fence("vol-a", "pv-a")
	err0 := counter(t, resultError)

	e.run(e.options())
	// The mock driver, like a real one, refuses a plain unpublish of a
	// fenced volume: the node stays quarantined and says why.
	e.waitCleanupError("vol-a", "does not advertise FORCE_UNPUBLISH")
	mustExist(t, e.layout.PodVolumeDir("pod-1", "pv-a"), e.layout.StagingPath(testDriver, "vol-a"))
	if !e.hasEvent("Warning " + ReasonForceUnpublishUnsupported) {
		t.Errorf("no %s event: %v", ReasonForceUnpublishUnsupported, e.events)
	}
	if !e.hasEvent("Warning " + ReasonCleanupFailed) {
		t.Errorf("no %s event: %v", ReasonCleanupFailed, e.events)
	}
	if counter(t, resultError) <= err0 {
		t.Error("csi_fence_node_cleanups_total{result=error} did not grow")
	}
	if p := e.publication("vol-a"); p == nil || p.Access != array.AccessFenced {
		t.Errorf("vol-a's quarantine was lifted without force: %+v", p)
	}
}

func TestPluginFailsThenSucceeds(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	e.fence("vol-a", "pv-a")
	if err := e.faults.Set("NodeUnpublishVolume", faults.Fault{Code: codes.Unavailable, Count: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.faults.Set("NodeUnstageVolume", faults.Fault{Code: codes.Internal, Count: 1}); err != nil {
		t.Fatal(err)
	}

	e.run(e.options())
	e.waitCleaned("vol-a")
	failures := 0
	for _, ev := range e.drainEvents() {
		if strings.HasPrefix(ev, "Warning "+ReasonCleanupFailed) {
			failures++
		}
	}
	if failures != 3 {
		t.Errorf("got %d failed attempts, want 3 (2 unpublish, 1 unstage): %v", failures, e.events)
	}
	mustBeGone(t, e.layout.PodVolumeDir("pod-1", "pv-a"), e.layout.StagingDir(testDriver, "vol-a"))
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
}

func TestPluginDown(t *testing.T) {
	e := newEnv(t)
	// A socket nobody serves.
	e.sock = filepath.Join(socketDir(t), "csi.sock")
	e.dial()
	e.record("vol-a", "pv-a")
	e.mount0("vol-a", "pv-a", "pod-1")
	err0 := counter(t, resultError)

	opts := e.options()
	opts.Timeout = 200 * time.Millisecond
	e.run(opts)
	e.waitCleanupError("vol-a", "node plugin unavailable")
	mustExist(t, e.layout.PodVolumeDir("pod-1", "pv-a"))
	if counter(t, resultError) <= err0 {
		t.Error("csi_fence_node_cleanups_total{result=error} did not grow")
	}
	if !e.hasEvent("Warning " + ReasonCleanupFailed) {
		t.Errorf("no %s event: %v", ReasonCleanupFailed, e.events)
	}
}

// mount0 lays out a published volume without a plugin.
func (e *env) mount0(handle, pv, uid string) {
	e.t.Helper()
	target, err := e.layout.PreparePublish(uid, pv, kubeletlayout.VolumeData{VolumeHandle: handle, DriverName: testDriver})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		e.t.Fatal(err)
	}
}

func TestNodeIDMismatch(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	if err := e.arr.Unpublish("vol-a", testNode, true, array.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := fencerecord.RecordFenced(e.ctx, e.records, testNode, "NodeUnreachable", fencingv1alpha1.FencedVolume{
		Driver: testDriver, VolumeHandle: "vol-a", PersistentVolumeName: "pv-a", NodeID: "some-other-node-id",
	}); err != nil {
		t.Fatal(err)
	}
	e.run(e.options())
	e.waitCleanupError("vol-a", "node ID")
	mustExist(t, e.layout.PublishPath("pod-1", "pv-a"))
}

func TestNotAKubeletDir(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.attach("vol-a")
	e.fence("vol-a", "pv-a")
	opts := e.options()
	opts.KubeletDir = filepath.Join(e.layout.Root, "wrong")
	e.run(opts)
	// Scanning an empty directory would find nothing and call it clean.
	e.waitCleanupError("vol-a", "does not look like the kubelet's root directory")
}

func TestRecordUnreadable(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.dyn.PrependReactor("list", "fencingrequests", denyAll)
	read0 := recordErrorCount(t, opRead)
	e.run(e.options())
	e.waitFor("the unreadable record reported", func() bool {
		return e.hasEvent("Warning " + ReasonRecordUnreadable)
	})
	if recordErrorCount(t, opRead) <= read0 {
		t.Error("csi_fence_node_cleanup_record_errors_total{operation=read} did not grow")
	}
}

func TestOptionsValidation(t *testing.T) {
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "DriverName") {
		t.Errorf("New without options: %v", err)
	}
}

func TestRefencedAfterCleanup(t *testing.T) {
	// A volume cleaned up, published to the node again later and fenced
	// again (a second failover) is cleaned again: the agent does not trust
	// what it did before, only the record.
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-1")
	e.fence("vol-a", "pv-a")
	e.run(e.options())
	e.waitCleaned("vol-a")
	first := e.entry("vol-a").CleanedTime

	if err := e.arr.Publish("vol-a", testNode, true, false, array.Options{}); err != nil {
		t.Fatal(err)
	}
	e.mount("vol-a", "pv-a", true, "pod-2")
	// The second fence re-opens the record (pkg/fencerecord's tests pin
	// that); the running agent may clean it again at once, so what is
	// checked here is that it did: pod-2's leftovers are gone.
	e.fence("vol-a", "pv-a")
	e.waitCleaned("vol-a")
	mustBeGone(t, e.layout.PodVolumeDir("pod-2", "pv-a"), e.layout.StagingDir(testDriver, "vol-a"))
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array after the second cleanup: %+v", p)
	}
	if first == nil {
		t.Error("first cleanup not recorded")
	}
}
