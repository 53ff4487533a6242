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
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

// TestLeavesLivePodsVolumeToKubelet: a pod of the fenced volume still
// exists on the node: Terminating when the node came back (issue 41, the
// node back mid-fence on real nodes), or running on a Ready node an admin
// fenced, and drained later (TestRealNodesManualFence). The kubelet tears
// its volume down itself when it goes and needs the volume's vol_data.json
// to: the agent unpublishes it (force) but leaves the directory holding that
// file. For a filesystem volume that is the pod's publish directory; for a
// block volume, the volume's directory under volumeDevices/<specName>, which
// the block unmapper reads to unmap the pod and to unstage the volume (the
// pod's own device entries go: the kubelet's unmap takes them missing as
// done). A Terminating pod's volume is recorded clean only once the kubelet
// removed it; a running pod's at once, once nothing is mounted there. The
// directory of a pod that is gone is removed as before.
func TestLeavesLivePodsVolumeToKubelet(t *testing.T) {
	deleting := metav1.Now()
	pods := []struct {
		name string
		// pod is the API's pod of UID "pod-a" (nil: none).
		pod *v1.Pod
		// wantKept: its directory stays, with vol_data.json.
		wantKept bool
		// wantError is the cleanup error recorded before the kubelet (or
		// the test) acts; "": recorded clean at once.
		wantError string
	}{{
		name: "terminating pod: left to the kubelet, clean once it removed it",
		pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "pod-a", DeletionTimestamp: &deleting, Finalizers: []string{"test"}},
			Spec: v1.PodSpec{NodeName: testNode}},
		wantKept:  true,
		wantError: "waiting for the kubelet",
	}, {
		// An admin's fence of a Ready node: the pod may run for long; the
		// kubelet needs the file when it is deleted (drained) later.
		name:     "running pod: left to the kubelet, clean at once",
		pod:      &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "pod-a"}, Spec: v1.PodSpec{NodeName: testNode}},
		wantKept: true,
	}, {
		name: "pod gone: removed",
	}, {
		// Same UID, another node: not this kubelet's.
		name: "pod of another node: removed",
		pod:  &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "pod-a"}, Spec: v1.PodSpec{NodeName: "other-node"}},
	}}
	modes := []struct {
		name string
		// use makes vol-a (PV pv-a) used by the pods, as the kubelet does.
		use func(e *env, pods ...string)
		// data is the vol_data.json the kubelet needs for pod-a.
		data func(l kubeletlayout.Layout) string
		// gone must be gone after the cleanup, whatever the pod.
		gone func(l kubeletlayout.Layout) []string
		// removed must be gone when the pod is.
		removed func(l kubeletlayout.Layout) []string
		// teardown is the kubelet's, once the pod goes: plain calls,
		// which must succeed after the agent's, and the removals.
		teardown func(e *env) error
	}{{
		name: "filesystem",
		use:  func(e *env, pods ...string) { e.mount("vol-a", "pv-a", true, pods...) },
		data: func(l kubeletlayout.Layout) string {
			return filepath.Join(l.PodVolumeDir("pod-a", "pv-a"), kubeletlayout.VolDataFileName)
		},
		gone: func(l kubeletlayout.Layout) []string {
			return []string{l.StagingDir(testDriver, "vol-a"), l.PodVolumeDir("pod-gone", "pv-a")}
		},
		removed: func(l kubeletlayout.Layout) []string { return []string{l.PodVolumeDir("pod-a", "pv-a")} },
		teardown: func(e *env) error {
			l := e.layout
			if _, err := e.node().NodeUnpublishVolume(e.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-a", TargetPath: l.PublishPath("pod-a", "pv-a")}); err != nil {
				return err
			}
			return os.RemoveAll(l.PodVolumeDir("pod-a", "pv-a"))
		},
	}, {
		name: "block",
		use:  func(e *env, pods ...string) { e.mapBlock("vol-a", "pv-a", pods...) },
		data: func(l kubeletlayout.Layout) string {
			return filepath.Join(l.BlockDataDir("pv-a"), kubeletlayout.VolDataFileName)
		},
		gone: func(l kubeletlayout.Layout) []string {
			var paths []string
			for _, uid := range []string{"pod-a", "pod-gone"} {
				paths = append(paths, l.PodDeviceMapPath(uid, "pv-a"), filepath.Join(l.BlockGlobalMapPath("pv-a"), uid), l.BlockPublishPath("pv-a", uid))
			}
			return paths
		},
		removed: func(l kubeletlayout.Layout) []string {
			return []string{l.BlockVolumeDir("pv-a"), l.BlockStagingPath("pv-a"), l.BlockPublishDir("pv-a")}
		},
		teardown: func(e *env) error {
			l := e.layout
			if _, err := e.node().NodeUnpublishVolume(e.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-a", TargetPath: l.BlockPublishPath("pv-a", "pod-a")}); err != nil {
				return err
			}
			if _, err := e.node().NodeUnstageVolume(e.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-a", StagingTargetPath: l.BlockStagingPath("pv-a")}); err != nil {
				return err
			}
			for _, p := range []string{l.BlockPublishDir("pv-a"), l.BlockStagingPath("pv-a"), l.BlockVolumeDir("pv-a")} {
				if err := os.RemoveAll(p); err != nil {
					return err
				}
			}
			return nil
		},
	}}
	for _, mode := range modes {
		for _, tc := range pods {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				e := newEnv(t)
				e.startMockDriver(driver.Config{})
				e.attach("vol-a")
				// pod-gone's leftovers go whatever pod-a's do.
				mode.use(e, "pod-a", "pod-gone")
				e.fence("vol-a", "pv-a")
				l := e.layout
				pods := e.csiNodes.CoreV1().Pods("ns")
				if tc.pod != nil {
					if _, err := pods.Create(e.ctx, tc.pod, metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				opts := e.options()
				opts.Pods = e.csiNodes.CoreV1().Pods(v1.NamespaceAll)
				e.run(opts)

				if tc.wantError != "" {
					e.waitCleanupError("vol-a", tc.wantError)
				} else {
					e.waitCleaned("vol-a")
				}
				data := mode.data(l)
				if tc.wantKept {
					mustExist(t, data)
				} else {
					mustBeGone(t, mode.removed(l)...)
				}
				mustBeGone(t, mode.gone(l)...)
				if p := e.publication("vol-a"); p != nil && len(p.Published) > 0 {
					t.Errorf("the pods' volume was not unpublished: %+v", p)
				}

				if tc.wantKept {
					// The kubelet tears it down when the pod goes: its
					// unmounter reads vol_data.json, the plugin has
					// nothing left to unpublish, the directory goes,
					// then the pod.
					if _, err := kubeletlayout.ReadVolumeData(filepath.Dir(data)); err != nil {
						t.Fatalf("the kubelet could not read %s: %v", data, err)
					}
					if err := mode.teardown(e); err != nil {
						t.Fatalf("the kubelet's teardown after the agent's: %v", err)
					}
					if err := pods.Delete(e.ctx, tc.pod.Name, metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				}
				e.waitCleaned("vol-a")
				if p := e.publication("vol-a"); p != nil {
					t.Errorf("vol-a still quarantined on the array: %+v", p)
				}
				if v := e.violations(); v["S1"]+v["S2"] != 0 {
					t.Errorf("safety violations on the array: %v", v)
				}
			})
		}
	}
}

// TestLeavesHeldBlockVolumeToKubelet: the pods of a fenced block volume
// are gone, but the kubelet still lists the volume in use on the node: it
// has yet to unmap the device, with an unmapper that reads the volume's
// vol_data.json (seen on a real node: TestRealNodesManualFence, block
// volume). The agent unpublishes and unstages it, and leaves it the
// volume's directory; the volume is recorded clean once the kubelet's
// unmap removed it. A volume the kubelet does not list is removed by the
// agent, as before.
func TestLeavesHeldBlockVolumeToKubelet(t *testing.T) {
	for _, tc := range []struct {
		name string
		held bool
	}{
		{name: "listed in use: left to the kubelet", held: true},
		{name: "not listed: removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.startMockDriver(driver.Config{})
			e.attach("vol-a")
			e.mapBlock("vol-a", "pv-a", "pod-gone")
			e.fence("vol-a", "pv-a")
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}
			if tc.held {
				node.Status.VolumesInUse = []v1.UniqueVolumeName{kubeletlayout.UniqueVolumeName(testDriver, "vol-a")}
			}
			if _, err := e.csiNodes.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			opts := e.options()
			opts.Pods = e.csiNodes.CoreV1().Pods(v1.NamespaceAll)
			opts.Nodes = e.csiNodes.CoreV1().Nodes()
			e.run(opts)

			l := e.layout
			data := filepath.Join(l.BlockDataDir("pv-a"), kubeletlayout.VolDataFileName)
			if !tc.held {
				e.waitCleaned("vol-a")
				mustBeGone(t, l.BlockVolumeDir("pv-a"), l.BlockStagingPath("pv-a"), l.BlockPublishDir("pv-a"))
				return
			}
			e.waitCleanupError("vol-a", "waiting for the kubelet to unmap block volume pv-a")
			mustExist(t, data)
			mustBeGone(t, l.BlockStagingPath("pv-a"), l.PodDeviceMapPath("pod-gone", "pv-a"), filepath.Join(l.BlockGlobalMapPath("pv-a"), "pod-gone"))
			if p := e.publication("vol-a"); p != nil && (p.Staged != "" || len(p.Published) > 0) {
				t.Errorf("the volume was not unpublished and unstaged: %+v", p)
			}
			// The kubelet's unmap: the unmapper reads vol_data.json, the
			// staging path is gone (no NodeUnstageVolume), its
			// directories go.
			if _, err := kubeletlayout.ReadVolumeData(filepath.Dir(data)); err != nil {
				t.Fatalf("the kubelet's unmapper could not read %s: %v", data, err)
			}
			for _, p := range []string{l.BlockPublishDir("pv-a"), l.BlockVolumeDir("pv-a")} {
				if err := os.RemoveAll(p); err != nil {
					t.Fatal(err)
				}
			}
			e.waitCleaned("vol-a")
		})
	}
}

// firstListHeld is the API's pods, whose first LIST returns only once
// release is closed, with what it read before started was closed.
type firstListHeld struct {
	corev1client.PodInterface
	first            sync.Once
	started, release chan struct{}
}

func (p *firstListHeld) List(ctx context.Context, opts metav1.ListOptions) (*v1.PodList, error) {
	held := false
	p.first.Do(func() { held = true })
	list, err := p.PodInterface.List(ctx, opts)
	if held {
		close(p.started)
		select {
		case <-p.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return list, err
}

// TestWorkersShareOnlyLaterPodLists: the workers share the live LIST of the
// node's pods (Agent.podReads), and a worker that asks while one is under
// way waits for the next one rather than taking a read begun before it
// asked. Here pod-b, which used vol-b, is deleted while a worker cleaning
// vol-a holds a LIST that still has it; vol-b is fenced after that and
// cleaned by the other worker, whose LIST must not show pod-b: else its
// publish directory would be kept for a kubelet that no longer has the pod
// to tear it down, and left on the node for good.
func TestWorkersShareOnlyLaterPodLists(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	for _, v := range []string{"a", "b"} {
		e.attach("vol-" + v)
		e.mount("vol-"+v, "pv-"+v, true, "pod-"+v)
	}
	api := kubefake.NewClientset(
		&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "pod-a"}, Spec: v1.PodSpec{NodeName: testNode}},
		&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "pod-b"}, Spec: v1.PodSpec{NodeName: testNode}},
	)
	held := &firstListHeld{PodInterface: api.CoreV1().Pods(v1.NamespaceAll), started: make(chan struct{}), release: make(chan struct{})}
	opts := e.options()
	opts.Pods, opts.Workers = held, 2
	e.fence("vol-a", "pv-a")
	a := e.run(opts)

	select {
	case <-held.started:
	case <-time.After(waitTimeout):
		t.Fatal("no LIST of the node's pods for vol-a's cleanup")
	}
	if err := api.CoreV1().Pods("ns").Delete(e.ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.fence("vol-b", "pv-b")
	e.waitFor("vol-b's worker waiting for the next LIST", func() bool { return a.podReads.Gathering(testNode) == 1 })
	close(held.release)

	e.waitCleaned("vol-a")
	e.waitCleaned("vol-b")
	l := e.layout
	mustExist(t, filepath.Join(l.PodVolumeDir("pod-a", "pv-a"), kubeletlayout.VolDataFileName))
	mustBeGone(t, l.PodVolumeDir("pod-b", "pv-b"))
}

// TestKubeletKept: after the cleanup, the publish directories of pods that
// exist and are not being deleted are set apart (the volume may be recorded
// clean with them in place), once nothing is mounted in them; everything
// else must be gone first.
func TestKubeletKept(t *testing.T) {
	l := kubeletlayout.New(t.TempDir())
	data := &kubeletlayout.VolumeData{VolumeHandle: "vol-a", DriverName: testDriver}
	pv := func(uid string, d *kubeletlayout.VolumeData) kubeletlayout.PodVolume {
		return kubeletlayout.PodVolume{PodUID: uid, SpecName: "pv-a", Dir: l.PodVolumeDir(uid, "pv-a"), TargetPath: l.PublishPath(uid, "pv-a"), Data: d}
	}
	pods := nodePods{exist: sets.New("running", "deleting", "running-mounted", "running-dir-mounted"), deleting: sets.New("deleting")}
	for _, tc := range []struct {
		name     string
		found    kubeletlayout.PodVolume
		mounted  []string // paths that are mount points
		wantKept bool
		wantErr  bool
	}{
		{name: "running pod, unmounted", found: pv("running", data), wantKept: true},
		{name: "running pod, target path gone", found: pv("running", data), wantKept: true},
		{name: "running pod, target still mounted", found: pv("running-mounted", data), mounted: []string{l.PublishPath("running-mounted", "pv-a")}, wantKept: true, wantErr: true},
		{name: "running pod, directory a mount point", found: pv("running-dir-mounted", data), mounted: []string{l.PodVolumeDir("running-dir-mounted", "pv-a")}, wantKept: true, wantErr: true},
		{name: "pod being deleted: the kubelet's to remove first", found: pv("deleting", data)},
		{name: "pod gone", found: pv("gone", data)},
		{name: "running pod, no metadata", found: pv("running", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.MkdirAll(tc.found.TargetPath, 0o750); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(l.PodsDir()) })
			if tc.name == "running pod, target path gone" {
				if err := os.Remove(tc.found.TargetPath); err != nil {
					t.Fatal(err)
				}
			}
			mounts := &fakeMounts{paths: map[string]bool{}}
			for _, p := range tc.mounted {
				mounts.set(p, true)
			}
			m := kubeletlayout.Match{PodVolumes: []kubeletlayout.PodVolume{tc.found}, Staged: []kubeletlayout.StagedVolume{{Dir: "staged"}}}
			rest, kept, _ := kubeletKept(m, pods, nil)
			if got := len(kept) == 1; got != tc.wantKept {
				t.Fatalf("kept %v, want kept %v", kept, tc.wantKept)
			}
			if len(rest.PodVolumes)+len(kept) != 1 || len(rest.Staged) != 1 {
				t.Errorf("rest %+v and kept %+v do not split the match", rest, kept)
			}
			a := &Agent{layout: l, remover: kubeletlayout.Remover{Layout: l, Mounts: mounts}}
			err := a.checkKeptUnmounted(kept, nil, nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("checkKeptUnmounted: %v, want an error: %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, kubeletlayout.ErrStillMounted) {
				t.Errorf("checkKeptUnmounted: %v, want ErrStillMounted", err)
			}
		})
	}
}

// TestKubeletKeptBlock: after the cleanup, a block volume's directory is set
// apart when every pod that mapped it exists and is not being deleted, its
// per-pod entries are gone and nothing under it is mounted; otherwise it
// must be gone before the volume is recorded clean, and the pods being
// deleted are named as what it waits for.
func TestKubeletKeptBlock(t *testing.T) {
	l := kubeletlayout.New(t.TempDir())
	data := &kubeletlayout.VolumeData{VolumeHandle: "vol-a", DriverName: testDriver}
	pods := nodePods{exist: sets.New("running", "running-2", "deleting"), deleting: sets.New("deleting")}
	for _, tc := range []struct {
		name      string
		users     []string // pods of exist that mapped the volume before the cleanup
		found     kubeletlayout.BlockVolume
		mounted   []string
		wantKept  bool
		wantErr   bool
		wantNamed []string // kubeletsToRemove
	}{
		{name: "running pods, unmounted", users: []string{"running", "running-2"}, found: kubeletlayout.BlockVolume{SpecName: "pv-a", Data: data}, wantKept: true},
		{name: "running pod, staging path still mounted", users: []string{"running"}, found: kubeletlayout.BlockVolume{SpecName: "pv-a", Data: data},
			mounted: []string{l.BlockStagingPath("pv-a")}, wantKept: true, wantErr: true},
		{name: "running pod, a mount under the volume directory", users: []string{"running"}, found: kubeletlayout.BlockVolume{SpecName: "pv-a", Data: data},
			mounted: []string{l.BlockDataDir("pv-a")}, wantKept: true, wantErr: true},
		{name: "a pod being deleted maps it: the kubelet's to remove first", users: []string{"running", "deleting"}, found: kubeletlayout.BlockVolume{SpecName: "pv-a", Data: data}, wantNamed: []string{"deleting"}},
		{name: "per-pod entries left", users: []string{"running"}, found: kubeletlayout.BlockVolume{SpecName: "pv-a", Data: data, PodUIDs: []string{"running"}}},
		{name: "no pod maps it", found: kubeletlayout.BlockVolume{SpecName: "pv-a", Data: data}},
		{name: "no metadata", users: []string{"running"}, found: kubeletlayout.BlockVolume{SpecName: "pv-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, dir := range []string{l.BlockDataDir("pv-a"), l.BlockStagingPath("pv-a"), l.BlockPublishDir("pv-a")} {
				if err := os.MkdirAll(dir, 0o750); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { _ = os.RemoveAll(l.VolumeDevicesDir()) })
			mounts := &fakeMounts{paths: map[string]bool{}}
			for _, p := range tc.mounted {
				mounts.set(p, true)
			}
			users := map[string]sets.Set[string]{}
			if len(tc.users) > 0 {
				users["pv-a"] = sets.New(tc.users...)
			}
			m := kubeletlayout.Match{Block: []kubeletlayout.BlockVolume{tc.found}}
			rest, kept, keptBlock := kubeletKept(m, pods, users)
			if got := len(keptBlock) == 1; got != tc.wantKept {
				t.Fatalf("kept %v, want kept %v", keptBlock, tc.wantKept)
			}
			if len(kept) != 0 || len(rest.Block)+len(keptBlock) != 1 {
				t.Errorf("rest %+v and kept %+v do not split the match", rest, keptBlock)
			}
			if got := kubeletsToRemove(rest, pods.deleting, users); !slices.Equal(got, tc.wantNamed) {
				t.Errorf("waiting for the kubelet of %v, want %v", got, tc.wantNamed)
			}
			a := &Agent{layout: l, remover: kubeletlayout.Remover{Layout: l, Mounts: mounts}}
			err := a.checkKeptUnmounted(nil, keptBlock, users)
			if (err != nil) != tc.wantErr {
				t.Fatalf("checkKeptUnmounted: %v, want an error: %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, kubeletlayout.ErrStillMounted) {
				t.Errorf("checkKeptUnmounted: %v, want ErrStillMounted", err)
			}
		})
	}
}
