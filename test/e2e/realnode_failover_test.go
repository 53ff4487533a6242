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
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// failoverNegativeEnv selects a negative control of TestRealNodesFailover,
// which must then fail:
//   - "no-failover": the controller's csi-fence-attacher runs with the
//     NonGracefulFailover gate off; nothing fails the pod over (the
//     Kubernetes of this cluster alone would wait 6 minutes), so the wait
//     for the replacement times out;
//   - "no-fence": the gate off and --disable-fencing (external-attacher's
//     attacher), and the test adds the out-of-service taint once the node
//     is NotReady, as an operator would: Kubernetes moves the volume without
//     any fence, and the array counts the publish to the other node (S1).
const failoverNegativeEnv = "FENCE_E2E_REAL_FAILOVER_NEGATIVE"

// TestRealNodesFailover deploys the product as a user does on two real
// nodes (framework.DeployMockExample: deploy/kubernetes/mock-example, its
// images built here, the node plugin registered through the kubelet's plugin
// watcher by csi-fence-attacher --role=registrar), runs a StatefulSet whose
// container writes to a volume of the mock driver that the real kubelet
// staged and published (real bind mounts under its root), powers the
// writer's node off and checks that the pod fails over to the other node
// through the product: the volume fenced on the dead node and recorded,
// the replacement Running on the other node with the old writes in its
// volume, its own writes succeeding, and no S1 violation on the array.
func TestRealNodesFailover(t *testing.T) {
	ctx, c, nodes := startRealNodes(t, framework.RealNodeOptions{ProductImages: true})
	off, on := nodes[0], nodes[1]
	deployOpts := framework.RealDeployOptions{ControllerNode: on.Name}
	negative := os.Getenv(failoverNegativeEnv)
	switch negative {
	case "":
	case "no-failover":
		deployOpts.AttacherArgs = []string{"--feature-gates=NonGracefulFailover=false"}
	case "no-fence":
		deployOpts.AttacherArgs = []string{"--feature-gates=NonGracefulFailover=false", "--disable-fencing"}
	default:
		t.Fatalf("%s=%q: want no-failover or no-fence", failoverNegativeEnv, negative)
	}
	if negative != "" {
		t.Logf("NEGATIVE CONTROL %s: csi-fence-attacher %v; this test must fail", negative, deployOpts.AttacherArgs)
	}
	dep := deployMockExample(ctx, t, c, nodes, deployOpts)

	const (
		volume = "vol-real-0"
		sts    = realSet // runRealWriter's
		ns     = realNS
		class  = "fence-real"
	)
	first := runRealWriter(ctx, t, c, dep, volume, class, off, on)

	// The kubelet of `off` staged and published the volume through the
	// node plugin: real mounts under its root, and the writes are on the
	// volume's storage (the data directory the mounts bind).
	staging := filepath.Join(off.KubeletDir(), "plugins", "kubernetes.io", "csi", framework.DriverName)
	target := filepath.Join(off.KubeletDir(), "pods", string(first.UID), "volumes", "kubernetes.io~csi", volume, "mount")
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if !hasMountUnder(string(mounts), staging, "/globalmount") {
		t.Fatalf("no staging mount (…/globalmount) under %s on the host", staging)
	}
	if !hasMountUnder(string(mounts), target, "") {
		t.Fatalf("no publish mount at %s on the host", target)
	}
	before, err := os.ReadFile(filepath.Join(dep.DataDir(volume), "writes.log"))
	if err != nil || bytes.Count(before, []byte("\n")) < 5 {
		t.Fatalf("the writer's writes are not on the volume's storage %s: %d bytes, %v", dep.DataDir(volume), len(before), err)
	}
	t.Logf("writer %s on %s: staged and published by the real kubelet, %d writes on the volume", first.Name, off.Name, bytes.Count(before, []byte("\n")))

	// What the node agent will look for when the node comes back is where
	// pkg/kubeletlayout says it is, as the real kubelet 1.36 laid it out.
	t.Run("KubeletLayout", func(t *testing.T) {
		compareKubeletLayout(ctx, t, c, dep, off, first, volume)
	})

	poweredOff := time.Now()
	if err := c.Node(off.Name).PowerOff(ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing of `off` writes any more: what the volume holds now is what
	// the replacement must find.
	atPowerOff, err := os.ReadFile(filepath.Join(dep.DataDir(volume), "writes.log"))
	if err != nil {
		t.Fatal(err)
	}
	if negative == "no-fence" {
		if err := c.WaitNodeNotReady(ctx, off.Name, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := c.AddTaint(ctx, off.Name, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}); err != nil {
			t.Fatal(err)
		}
	}
	second, err := c.WaitWriterRunning(ctx, ns, sts+"-0", first.UID, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writer failed over from %s to %s %.1fs after the power off", off.Name, second.Spec.NodeName, time.Since(poweredOff).Seconds())
	if second.Spec.NodeName != on.Name {
		t.Fatalf("the replacement runs on %s, want %s", second.Spec.NodeName, on.Name)
	}
	if err := c.WaitWrites(ctx, ns, second.Name, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(dep.DataDir(volume), "writes.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(after, atPowerOff) || len(after) <= len(atPowerOff) {
		t.Fatalf("the replacement's volume does not continue the old one's data: %d bytes at the power off, %d now", len(atPowerOff), len(after))
	}

	// Through the product: the array saw no publish to `on` before the
	// fence of `off`, which holds the volume fenced, and the fence was
	// recorded (write-ahead) on the node's FencingRequest.
	arr, err := dep.Array()
	if err != nil {
		t.Fatal(err)
	}
	s, err := arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	expectArraySafe(t, s, "")
	if p := s.Volumes[volume].Publications[off.Name]; p == nil || p.Access != array.AccessFenced {
		t.Fatalf("the array does not hold %s fenced on %s: %+v", volume, off.Name, p)
	}
	fr, err := fencingv1alpha1.NewClient(c.Dynamic).Get(ctx, off.Name)
	if err != nil {
		t.Fatalf("no FencingRequest for %s: %v", off.Name, err)
	}
	if v := fencerecord.Find(fr, framework.DriverName, volume); v == nil || v.FencedTime == nil {
		t.Fatalf("volume %s not recorded as fenced on %s: %+v", volume, off.Name, fr.Status)
	}
}

// deployMockExample deploys the shipped mock example on the real nodes,
// skipping the test when this host lacks a kernel feature it needs (FUSE).
func deployMockExample(ctx context.Context, t *testing.T, c *framework.Cluster, nodes []*framework.RealNode, opts framework.RealDeployOptions) *framework.RealDeployment {
	t.Helper()
	dep, err := c.DeployMockExample(ctx, nodes, opts)
	var missing *framework.MissingKernelFeatureError
	if errors.As(err, &missing) {
		t.Skipf("this host cannot run the mock example: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dep
}

func waitLog(ctx context.Context, c *framework.Cluster, ns, pod, want string, timeout time.Duration) error {
	var log []byte
	err := framework.WaitFor(ctx, timeout, fmt.Sprintf("%q in %s's log", want, pod), func(ctx context.Context) (bool, error) {
		var err error
		log, err = c.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		return bytes.Contains(log, []byte(want)), nil
	})
	if err != nil {
		return fmt.Errorf("%w; log so far:\n%s", err, log)
	}
	if bytes.Contains(log, []byte("failed")) {
		return fmt.Errorf("%s logged failed writes:\n%s", pod, log)
	}
	return nil
}

// hasMountUnder says whether mountinfo has a mount point below dir (or at
// it) whose path ends with suffix.
func hasMountUnder(mountinfo, dir, suffix string) bool {
	for _, l := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		if mp := f[4]; (mp == dir || strings.HasPrefix(mp, dir+"/")) && strings.HasSuffix(mp, suffix) {
			return true
		}
	}
	return false
}

// scanKubeletVolume scans node's kubelet directory with pkg/kubeletlayout
// and returns what it attributes to volume (a PV named as its handle),
// failing unless that is publish verified publish directories, staged
// staging directories and block block volumes, and everything found is
// attributed.
func scanKubeletVolume(t *testing.T, node *framework.RealNode, volume string, publish, staged, block int) (kubeletlayout.Layout, kubeletlayout.Match) {
	t.Helper()
	l := kubeletlayout.New(node.KubeletDir())
	inv, err := l.Scan()
	if err != nil {
		t.Fatal(err)
	}
	vol := kubeletlayout.Volume{Driver: framework.DriverName, VolumeHandle: volume, PVName: volume}
	m := inv.Match(vol)
	if len(m.PodVolumes) != publish || len(m.UnverifiedPodVolumes) != 0 || len(m.Staged) != staged || len(m.Block) != block {
		t.Fatalf("kubeletlayout found %d publish (%d unverified), %d staging and %d block directories of %s; want %d, 0, %d, %d:\n%v",
			len(m.PodVolumes), len(m.UnverifiedPodVolumes), len(m.Staged), len(m.Block), volume, publish, staged, block, m.Paths(l))
	}
	if left := inv.Unattributed(l, framework.DriverName, []kubeletlayout.Volume{vol}); len(left) > 0 {
		t.Errorf("kubeletlayout cannot attribute %v", left)
	}
	return l, m
}

// compareKubeletLayout checks pkg/kubeletlayout against what the real
// kubelet of node made for pod's volume (a PV named as its handle): Scan
// finds exactly one publish directory and one staging directory, attributed
// by the vol_data.json the kubelet wrote (every field it wrote as the layout
// reads it, the attachment ID the name of the real VolumeAttachment), at the
// paths Layout computes; those are the paths the kubelet passed to
// NodeStageVolume and NodePublishVolume (the array recorded them), and both
// are mount points on the host.
func compareKubeletLayout(ctx context.Context, t *testing.T, c *framework.Cluster, dep *framework.RealDeployment, node *framework.RealNode, pod *corev1.Pod, volume string) {
	l, m := scanKubeletVolume(t, node, volume, 1, 1, 0)
	uid := string(pod.UID)
	vas, err := c.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	va := ""
	for _, a := range vas.Items {
		if a.Spec.NodeName == node.Name && a.Spec.Source.PersistentVolumeName != nil && *a.Spec.Source.PersistentVolumeName == volume {
			va = a.Name
		}
	}
	if want := kubeletlayout.AttachmentName(volume, framework.DriverName, node.Name); va != want {
		t.Errorf("the VolumeAttachment of %s on %s is %q, kubeletlayout.AttachmentName says %q", volume, node.Name, va, want)
	}
	pv := m.PodVolumes[0]
	wantPod := kubeletlayout.VolumeData{SpecVolID: volume, VolumeHandle: volume, DriverName: framework.DriverName,
		NodeName: node.Name, AttachmentID: va, VolumeLifecycleMode: kubeletlayout.LifecyclePersistent}
	switch {
	case pv.PodUID != uid || pv.SpecName != volume:
		t.Errorf("publish directory of pod %s, spec %s; want %s, %s", pv.PodUID, pv.SpecName, uid, volume)
	case pv.TargetPath != l.PublishPath(uid, volume):
		t.Errorf("target path %s, Layout.PublishPath %s", pv.TargetPath, l.PublishPath(uid, volume))
	case pv.Data == nil || *pv.Data != wantPod:
		t.Errorf("the kubelet's vol_data.json of the publish reads %+v (%v), want %+v", pv.Data, pv.DataErr, wantPod)
	}
	st := m.Staged[0]
	wantStage := kubeletlayout.VolumeData{VolumeHandle: volume, DriverName: framework.DriverName}
	switch {
	case st.Driver != framework.DriverName || st.LegacyPVName != "":
		t.Errorf("staging directory of driver %q (legacy %q)", st.Driver, st.LegacyPVName)
	case st.StagingPath != l.StagingPath(framework.DriverName, volume) || st.Dir != l.StagingDir(framework.DriverName, volume):
		t.Errorf("staging path %s in %s, Layout says %s", st.StagingPath, st.Dir, l.StagingPath(framework.DriverName, volume))
	case st.Data == nil || *st.Data != wantStage:
		t.Errorf("the kubelet's vol_data.json of the staging reads %+v (%v), want %+v", st.Data, st.DataErr, wantStage)
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
	if p == nil || p.Staged != l.StagingPath(framework.DriverName, volume) || len(p.Published) != 1 || p.Published[0] != l.PublishPath(uid, volume) {
		t.Errorf("the kubelet staged and published at %+v; Layout says %s and %s", p, l.StagingPath(framework.DriverName, volume), l.PublishPath(uid, volume))
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{l.StagingPath(framework.DriverName, volume), l.PublishPath(uid, volume)} {
		if !hasMountUnder(string(mounts), path, path) {
			t.Errorf("%s is not a mount point on the host", path)
		}
	}
}
