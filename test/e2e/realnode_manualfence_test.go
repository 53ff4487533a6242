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
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// TestRealNodesManualFence is an admin's fence of a Ready real node under a
// running pod, then the drain of that pod (docs/failover.md: `kubectl fence
// fence NODE`, a FencingRequest of origin Manual, fences the storage of a
// Ready node and deletes no pod):
//
//   - `kubectl fence fence` (the plugin built here) quarantines the node and
//     fences the writer's volume there; the node agent force-unpublishes and
//     unstages it while the pod runs (nothing is mounted at the kubelet's
//     paths any more) and records the entry cleaned;
//   - the admin then deletes the pod as a drain does (its grace period): the
//     real kubelet tears the volume down with its CSI unmounter, which reads
//     the publish directory's vol_data.json, and the pod must be gone within
//     a deadline. An agent that removed that directory under the running pod
//     leaves the kubelet retrying "UnmountVolume.NewUnmounter failed" and the
//     pod Terminating until the kubelet restarts;
//   - `kubectl fence release` withdraws the request: the node leaves
//     quarantine, the request is Complete, and the replacement (the other
//     node cordoned) runs on the same node, its volume staged and published
//     there again, its writes succeeding; the array saw no S1 or S2.
//
// With restartKubelet, the node's kubelet is killed and started again
// between the cleanup and the drain (a crash, or an upgrade): it rebuilds
// the running pod's volume from the publish directory the agent kept (the
// kubelet's reconstruction, which reads vol_data.json and marks the volume
// uncertain) and mounts it again for the running pod, on a node still
// quarantined; the drain, after that try, the release and the replacement
// must then go as without the restart (pkg/nodeagent kubeletKept: the
// restart it describes, run here).
//
// With block, the writer's volume is a block volume (volumeMode Block, the
// mock's loop device, the writer's records in the device's slots): the
// fence turns the container's writes to the device into EIO, the agent
// leaves the kubelet the volume's volumeDevices/<pv> directory, whose
// vol_data.json its block unmapper reads to unmap and unstage at the drain,
// and the replacement resumes the records on the device.
func TestRealNodesManualFence(t *testing.T) {
	for _, tc := range []manualFenceCase{
		{name: "drain"},
		{name: "kubelet restart, then drain", restartKubelet: true},
		{name: "block volume, drain", block: true},
	} {
		t.Run(tc.name, func(t *testing.T) { testRealNodesManualFence(t, tc) })
	}
}

type manualFenceCase struct {
	name           string
	restartKubelet bool
	block          bool
}

func testRealNodesManualFence(t *testing.T, tc manualFenceCase) {
	ctx, c, nodes := startRealNodes(t, framework.RealNodeOptions{ProductImages: true})
	fenced, other := nodes[0], nodes[1]
	binDir := t.TempDir()
	if err := framework.BuildCommands(ctx, binDir, "./cmd/kubectl-fence"); err != nil {
		t.Fatalf("building kubectl-fence: %v", err)
	}
	kubectlFence := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "kubectl-fence"), append(args, "--kubeconfig="+c.Kubeconfig)...)
		out, err := cmd.CombinedOutput()
		t.Logf("$ kubectl fence %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("kubectl fence %s: %v", strings.Join(args, " "), err)
		}
	}

	dep := deployMockExample(ctx, t, c, nodes, framework.RealDeployOptions{ControllerNode: other.Name})
	var first *corev1.Pod
	if tc.block {
		first = runRealBlockWriter(ctx, t, c, dep, fenced, other)
		compareKubeletBlockLayout(ctx, t, c, dep, fenced, first, realVolume)
	} else {
		first = runRealWriter(ctx, t, c, dep, realVolume, realClass, fenced, other)
	}
	staged, published := kubeletPaths(t, dep, fenced.Name)
	mounted := func(path string) bool {
		t.Helper()
		mi, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		return hasMountUnder(string(mi), path, path)
	}
	if !mounted(staged) || !mounted(published) {
		t.Fatalf("%s or %s is not a mount point under the running writer", staged, published)
	}

	// The admin fences the Ready node under the running writer.
	kubectlFence("fence", fenced.Name, "--reason=e2e: manual fence of a Ready node")
	if err := waitFenced(ctx, c, fenced.Name, realVolume); err != nil {
		t.Fatal(err)
	}
	frs := fencingv1alpha1.NewClient(c.Dynamic)
	// cleanup returns the node agent's outcome for the volume once it has
	// one: recorded clean, or an error containing wantErr.
	cleanup := func(what, wantErr string) error {
		return framework.WaitFor(ctx, 2*time.Minute, what, func(ctx context.Context) (bool, error) {
			fr, err := frs.Get(ctx, fenced.Name)
			if err != nil {
				return false, err
			}
			v := fencerecord.Find(fr, framework.DriverName, realVolume)
			if v == nil {
				return false, fmt.Errorf("no entry in %+v", fr.Status)
			}
			if wantErr != "" {
				return v.CleanedTime == nil && strings.Contains(v.CleanupError, wantErr), fmt.Errorf("cleaned at %v, cleanup error %q", v.CleanedTime, v.CleanupError)
			}
			return v.CleanedTime != nil, fmt.Errorf("cleanup error %q", v.CleanupError)
		})
	}
	l := kubeletlayout.New(fenced.KubeletDir())
	if !tc.block {
		if err := cleanup("the node agent's cleanup of "+realVolume+" recorded", ""); err != nil {
			t.Fatal(err)
		}
		// The cleanup cut the running pod off its volume: nothing is
		// mounted at the kubelet's paths.
		if mounted(staged) || mounted(published) {
			t.Fatalf("the volume was recorded cleaned but %s or %s is still a mount point", staged, published)
		}
		_, dataErr := os.Stat(filepath.Join(filepath.Dir(published), kubeletlayout.VolDataFileName))
		t.Logf("%s recorded cleaned on %s under the running writer %s; the publish directory's vol_data.json: %v", realVolume, fenced.Name, first.Name, dataErr)
	} else {
		// A running pod's block volume waits for the pod: its entry
		// under the global map path is the kubelet's bind mount of the
		// device, which the agent leaves mounted (pkg/nodeagent
		// leaveToKubelet). The forced unpublish cut it off all the same.
		globalEntry := filepath.Join(l.BlockGlobalMapPath(realVolume), string(first.UID))
		if err := cleanup("the node agent's cleanup of "+realVolume+" waiting for the kubelet's "+globalEntry, globalEntry+": still a mount point"); err != nil {
			t.Fatal(err)
		}
		if mounted(published) {
			t.Fatalf("%s is still a mount point after the forced NodeUnpublishVolume", published)
		}
		// EIO from the fenced data path; ENXIO once the loop device is
		// detached and nothing holds it any more.
		failed, err := waitFailedWrite(ctx, c, realNS, first.Name, 30*time.Second)
		if err != nil {
			t.Fatalf("the writer's writes to its fenced block device did not fail: %v", err)
		}
		t.Logf("the writer on the fenced block device: %s", failed)
		data := filepath.Join(l.BlockDataDir(realVolume), kubeletlayout.VolDataFileName)
		if _, err := os.Stat(data); err != nil {
			t.Fatalf("the agent did not leave the kubelet the block volume's %s: %v", data, err)
		}
		t.Logf("%s fenced on %s under the running writer %s, its writes failing; the cleanup waits for the pod, %s kept", realVolume, fenced.Name, first.Name, data)
	}

	if tc.restartKubelet {
		logFrom := fileSize(t, fenced.KubeletLog())
		if err := c.RestartKubelet(ctx, fenced); err != nil {
			t.Fatal(err)
		}
		var log string
		err := framework.WaitFor(ctx, time.Minute, "the new kubelet of "+fenced.Name+" to finish its volume reconstruction", func(context.Context) (bool, error) {
			log = readFrom(t, fenced.KubeletLog(), logFrom)
			return strings.Contains(log, "Volume reconstruction finished"), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Rebuilt from the kept directory, for the running pod.
		// The kubelet logs the pod by its UID there (its name is not
		// known yet at reconstruction).
		want := fmt.Sprintf("\"Volume is marked as uncertain and added into the actual state\" pod=\"\" podName=%q volumeName=%q",
			first.UID, kubeletlayout.UniqueVolumeName(framework.DriverName, realVolume))
		if !strings.Contains(log, want) {
			t.Fatalf("the restarted kubelet did not rebuild %s's volume from its kept publish directory (no %s in its log)", first.Name, want)
		}
		// The pod still wants the volume: the kubelet mounts it again,
		// on a node still quarantined. The drain comes after that try.
		tried := fmt.Sprintf("\"operationExecutor.MountVolume started for volume \\\"%s\\\"", realVolume)
		err = framework.WaitFor(ctx, time.Minute, "the new kubelet of "+fenced.Name+" to mount "+realVolume+" again for the running pod", func(context.Context) (bool, error) {
			return strings.Contains(readFrom(t, fenced.KubeletLog(), logFrom), tried), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the kubelet of %s restarted, rebuilt %s's volume from its kept publish directory and mounts it again", fenced.Name, first.Name)
	}

	// The fenced attachment, which may outlive the drain (the attach/detach
	// controller keeps it for the replacement bound to the node).
	vaName := kubeletlayout.AttachmentName(realVolume, framework.DriverName, fenced.Name)
	fencedVA, err := c.Client.StorageV1().VolumeAttachments().Get(ctx, vaName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The drain: the replacement may only come back to the fenced node.
	if err := c.SetUnschedulable(ctx, other.Name, true); err != nil {
		t.Fatal(err)
	}
	deleted, drainLog := time.Now(), fileSize(t, fenced.KubeletLog())
	if err := c.Client.CoreV1().Pods(realNS).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.WaitFor(ctx, 2*time.Minute, "the old writer "+first.Name+" gone", func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(realNS).Get(ctx, first.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if p.UID != first.UID {
			return true, nil
		}
		return false, fmt.Errorf("still there, deletion %v, phase %s", p.DeletionTimestamp, p.Status.Phase)
	})
	if err != nil {
		t.Fatalf("%v\nthe kubelet of %s logged (teardown of %s):\n%s", err, fenced.Name, realVolume, kubeletLines(fenced, string(first.UID), 3))
	}
	t.Logf("the old writer was gone %.1fs after its delete", time.Since(deleted).Seconds())
	if tc.block {
		// The kubelet unmapped the pod: the agent's retry finishes.
		if err := cleanup("the node agent's cleanup of "+realVolume+" recorded after the drain", ""); err != nil {
			t.Fatal(err)
		}
		// The kubelet's own teardown of the device (NodeUnstageVolume,
		// then its directories) needs the volume's vol_data.json to the
		// end, after the pod is gone: it must finish.
		if err := waitKubeletUnmapDevice(ctx, fenced, drainLog, realVolume); err != nil {
			t.Fatal(err)
		}
	}
	// Its kubelet tore the volume down: its publish directory (a block
	// volume's directory) is gone.
	gone := filepath.Dir(published)
	if tc.block {
		gone = l.BlockVolumeDir(realVolume)
	}
	if _, err := os.Lstat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old writer's %s is left on %s: %v", gone, fenced.Name, err)
	}

	released := time.Now()
	kubectlFence("release", fenced.Name)
	if err := waitReleased(ctx, c, fenced.Name, realVolume, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s released %.1fs after the release", fenced.Name, time.Since(released).Seconds())
	second, err := c.WaitWriterRunning(ctx, realNS, realSet+"-0", first.UID, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the replacement %s Running %.1fs after the release", second.Name, time.Since(released).Seconds())
	if second.Spec.NodeName != fenced.Name {
		t.Fatalf("the replacement runs on %s, want %s", second.Spec.NodeName, fenced.Name)
	}
	if err := c.WaitWrites(ctx, realNS, second.Name, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("the replacement writing on %s %.1fs after the release", fenced.Name, time.Since(released).Seconds())
	// When the fenced attachment outlived the drain, the release published
	// the volume there again itself: that attachment still said attached,
	// and without it external-attacher's reconciler would have published
	// it only at its next sync (the replacement ran 65 s after the
	// release). The attach/detach controller may also have detached it
	// before the release (the replacement not bound yet): then the
	// replacement's attachment is a new one.
	va, err := c.Client.StorageV1().VolumeAttachments().Get(ctx, vaName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if va.UID != fencedVA.UID {
		t.Logf("the fenced attachment %s was detached before the release; the replacement's is a new one", vaName)
	} else {
		evs, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "VolumeAttachment", "involvedObject.name": vaName, "reason": "AttachmentRepublished"}.String()})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) == 0 {
			t.Errorf("the fenced attachment %s outlived the drain, but the release did not mark it for publishing again (no AttachmentRepublished Event)", vaName)
		}
		for _, e := range evs.Items {
			t.Logf("%s on %s: %s", e.Reason, vaName, e.Message)
		}
	}

	arr, err := dep.Array()
	if err != nil {
		t.Fatal(err)
	}
	s, err := arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	expectArraySafe(t, s, "")
	if tc.block {
		checkBlockRecords(t, dep, realVolume, first, second)
	}
}

// kubeletLines returns the last n lines of node's kubelet log that name the
// pod's UID and report a failure: the kubelet's own account of why it does
// not let the pod go.
func kubeletLines(node *framework.RealNode, podUID string, n int) string {
	f, err := os.Open(node.KubeletLog())
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, podUID) && strings.Contains(strings.ToLower(l), "fail") {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		lines = append(lines, err.Error())
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// fileSize returns the size of path (its log so far).
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// readFrom returns what path holds from offset on.
func readFrom(t *testing.T, path string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}
