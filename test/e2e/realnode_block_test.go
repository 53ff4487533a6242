//go:build e2e

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

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/images/writer/records"
)

// runRealBlockWriter is runRealWriter for a block volume: the writer on
// off (on cordoned meanwhile) writes its records to the device the mock's
// node plugin published (a loop device over a file on the volume's FUSE
// data path), 5 of them before it returns.
func runRealBlockWriter(ctx context.Context, t *testing.T, c *framework.Cluster, dep *framework.RealDeployment, off, on *framework.RealNode) *corev1.Pod {
	t.Helper()
	if err := c.StaticBlockVolume(ctx, dep, realVolume, realNS, "data-"+realSet+"-0", realClass); err != nil {
		t.Fatal(err)
	}
	if err := c.SetUnschedulable(ctx, on.Name, true); err != nil {
		t.Fatal(err)
	}
	sts := framework.AsBlockWriter(framework.WriterStatefulSet(realSet, realClass))
	if _, err := c.Client.AppsV1().StatefulSets(realNS).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, err := c.WaitWriterRunning(ctx, realNS, realSet+"-0", "", 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if first.Spec.NodeName != off.Name {
		t.Fatalf("the writer runs on %s, want %s", first.Spec.NodeName, off.Name)
	}
	if err := c.SetUnschedulable(ctx, on.Name, false); err != nil {
		t.Fatal(err)
	}
	if err := waitLog(ctx, c, realNS, first.Name, "write 5 to "+framework.BlockDevicePath+" ok", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	return first
}

// waitFailedWrite waits until the writer pod logs a failed write, and
// returns the first such line.
func waitFailedWrite(ctx context.Context, c *framework.Cluster, ns, pod string, timeout time.Duration) (string, error) {
	var line string
	err := framework.WaitFor(ctx, timeout, "a failed write in "+pod+"'s log", func(ctx context.Context) (bool, error) {
		log, err := c.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, " failed: errno=") {
				line = l
				return true, nil
			}
		}
		return false, nil
	})
	return line, err
}

// waitKubeletUnmapDevice waits until the kubelet of node, in its log from
// offset on, reports the block volume's device unmapped (UnmapDevice:
// NodeUnstageVolume and the volume's directories), and fails at once when
// it reports that it cannot even start to (its unmapper reads the
// volume's vol_data.json), which it would retry for ever.
func waitKubeletUnmapDevice(ctx context.Context, node *framework.RealNode, offset int64, volume string) error {
	done := fmt.Sprintf("UnmapDevice succeeded for volume %q", volume)
	var log string
	err := framework.WaitFor(ctx, 2*time.Minute, "the kubelet of "+node.Name+" to unmap the device of "+volume, func(context.Context) (bool, error) {
		b, err := os.ReadFile(node.KubeletLog())
		if err != nil {
			return false, err
		}
		if int64(len(b)) > offset {
			log = string(b[offset:])
		}
		if strings.Contains(log, "UnmapDevice.NewUnmapper failed") {
			return false, fmt.Errorf("the kubelet cannot unmap the device: %s", lineWith(log, "UnmapDevice.NewUnmapper failed"))
		}
		return strings.Contains(log, done), nil
	})
	if err != nil {
		return fmt.Errorf("%w\nits last UnmapDevice lines:\n%s", err, lineWith(log, "UnmapDevice"))
	}
	return nil
}

// lineWith returns the last line of log that contains s.
func lineWith(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

// compareKubeletBlockLayout checks pkg/kubeletlayout against what the real
// kubelet of node made for pod's block volume (a PV named as its handle):
// Scan finds one block volume and nothing else of it, its vol_data.json as
// the kubelet wrote it, its staging path and the pod at the paths Layout
// computes; those are the paths the kubelet passed to NodeStageVolume and
// NodePublishVolume (the array recorded them). The node agent's handling
// of block volumes (what it leaves the kubelet) rests on this reading.
func compareKubeletBlockLayout(ctx context.Context, t *testing.T, c *framework.Cluster, dep *framework.RealDeployment, node *framework.RealNode, pod *corev1.Pod, volume string) {
	t.Helper()
	l, m := scanKubeletVolume(t, node, volume, 0, 0, 1)
	uid := string(pod.UID)
	va := kubeletlayout.AttachmentName(volume, framework.DriverName, node.Name)
	if _, err := c.Client.StorageV1().VolumeAttachments().Get(ctx, va, metav1.GetOptions{}); err != nil {
		t.Errorf("the VolumeAttachment kubeletlayout.AttachmentName names: %v", err)
	}
	b := m.Block[0]
	want := kubeletlayout.VolumeData{SpecVolID: volume, VolumeHandle: volume, DriverName: framework.DriverName, NodeName: node.Name, AttachmentID: va}
	switch {
	case b.SpecName != volume:
		t.Errorf("block volume directory of spec %s, want %s", b.SpecName, volume)
	case b.Data == nil || *b.Data != want:
		t.Errorf("the kubelet's vol_data.json of the block volume reads %+v (%v), want %+v", b.Data, b.DataErr, want)
	case b.StagingPath != l.BlockStagingPath(volume):
		t.Errorf("block staging path %q, Layout.BlockStagingPath %s", b.StagingPath, l.BlockStagingPath(volume))
	case !slices.Equal(b.PodUIDs, []string{uid}):
		t.Errorf("block volume of pods %v, want [%s]", b.PodUIDs, uid)
	}
	arr, err := dep.Array()
	if err != nil {
		t.Fatal(err)
	}
	s, err := arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	p := s.Volumes[volume].Publications[node.Name]
	if p == nil || p.Staged != l.BlockStagingPath(volume) || len(p.Published) != 1 || p.Published[0] != l.BlockPublishPath(volume, uid) {
		t.Errorf("the kubelet staged and published at %+v; Layout says %s and %s", p, l.BlockStagingPath(volume), l.BlockPublishPath(volume, uid))
	}
}

// checkBlockRecords checks the records on the block volume's device after
// the replacement (second) took over from first: intact, numbered 1, 2, ...
// without a gap or a repeat across the two, and the replacement's 3 at
// least, made after it was created.
func checkBlockRecords(t *testing.T, dep *framework.RealDeployment, volume string, first, second *corev1.Pod) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dep.DataDir(volume), driver.BlockFileName))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := records.Check(records.FromSlots(data))
	if err != nil {
		t.Errorf("the block volume's records are not intact: %v", err)
	}
	byNew := 0
	for _, r := range recs {
		if r.Time.After(second.CreationTimestamp.Time) {
			byNew++
		}
	}
	if len(recs)-byNew < 5 || byNew < 3 {
		t.Fatalf("the block volume holds %d records of %s and %d of its replacement %s; want 5 and 3 at least", len(recs)-byNew, first.Name, byNew, second.Name)
	}
	t.Logf("block volume %s: %d records, %d of them by the replacement", volume, len(recs), byNew)
}
