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
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

// TestLeavesLivePodsDirectoryToKubelet: the node came back while a pod of
// the fenced volume still exists (Terminating; issue 41, the node back
// mid-fence on real nodes). The kubelet tears that pod's volume down itself
// and needs its vol_data.json to: the agent unpublishes it (force) but
// leaves the directory, and records the volume clean only once the kubelet
// removed it. The directory of a pod that is gone is removed as before.
func TestLeavesLivePodsDirectoryToKubelet(t *testing.T) {
	e := newEnv(t)
	e.startMockDriver(driver.Config{})
	e.attach("vol-a")
	e.mount("vol-a", "pv-a", true, "pod-live", "pod-gone", "pod-running")
	e.fence("vol-a", "pv-a")
	pods := e.csiNodes.CoreV1().Pods("ns")
	deleting := metav1.Now()
	for _, p := range []*v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "live", UID: types.UID("pod-live"), DeletionTimestamp: &deleting, Finalizers: []string{"test"}}, Spec: v1.PodSpec{NodeName: testNode}},
		// Running, not being deleted (an admin's fence of a Ready node):
		// nothing would ever remove its directory, so the agent does.
		{ObjectMeta: metav1.ObjectMeta{Name: "running", UID: types.UID("pod-running")}, Spec: v1.PodSpec{NodeName: testNode}},
		// Same UID space, another node: not this kubelet's.
		{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", UID: types.UID("pod-gone")}, Spec: v1.PodSpec{NodeName: "other-node"}},
	} {
		if _, err := pods.Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	opts := e.options()
	opts.Pods = e.csiNodes.CoreV1().Pods(v1.NamespaceAll)
	e.run(opts)

	l := e.layout
	e.waitCleanupError("vol-a", "waiting for the kubelet")
	liveData := filepath.Join(l.PodVolumeDir("pod-live", "pv-a"), kubeletlayout.VolDataFileName)
	mustExist(t, liveData)
	mustBeGone(t, l.PodVolumeDir("pod-gone", "pv-a"), l.PodVolumeDir("pod-running", "pv-a"), l.StagingDir(testDriver, "vol-a"))
	if p := e.publication("vol-a"); p != nil && slices.Contains(p.Published, l.PublishPath("pod-live", "pv-a")) {
		t.Errorf("the live pod's volume was not unpublished: %+v", p)
	}

	// The kubelet tears it down: its unmounter reads vol_data.json, the
	// plugin has nothing left to unpublish, the directory goes, and then
	// the pod.
	if _, err := kubeletlayout.ReadVolumeData(filepath.Dir(liveData)); err != nil {
		t.Fatalf("the kubelet could not read %s: %v", liveData, err)
	}
	if _, err := e.node().NodeUnpublishVolume(e.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-a", TargetPath: l.PublishPath("pod-live", "pv-a")}); err != nil {
		t.Fatalf("the kubelet's plain NodeUnpublishVolume after the agent's: %v", err)
	}
	if err := os.RemoveAll(l.PodVolumeDir("pod-live", "pv-a")); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(e.ctx, "live", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitCleaned("vol-a")
	if p := e.publication("vol-a"); p != nil {
		t.Errorf("vol-a still quarantined on the array: %+v", p)
	}
	if v := e.violations(); v["S1"]+v["S2"] != 0 {
		t.Errorf("safety violations on the array: %v", v)
	}
}
