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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// realNodesEnv opts in to the real-node tests (make test-realnodes): they
// build a kubelet and containerd (minutes, once) and run containers as root.
const realNodesEnv = "FENCE_E2E_REAL_NODES"

// TestRealNodes runs two real nodes (kubelet, containerd, runc) beside their
// own control plane: both register and become Ready under NodeRestriction,
// a pod of the local writer image runs on one and its log, read through the
// apiserver from the kubelet, shows its writes; PowerOff then ends every
// process of that node at once (kubelet, containerd, shim, containers) and
// the control plane marks it NotReady, while the other node stays Ready.
func TestRealNodes(t *testing.T) {
	ctx, c, nodes := startRealNodes(t, framework.RealNodeOptions{})
	off, on := nodes[0], nodes[1]

	t.Run("NodeRestriction", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", off.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		nodeClient, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		patch := []byte(`{"metadata":{"labels":{"csi-fence.io/touched-by":"` + off.Name + `"}}}`)
		_, err = nodeClient.CoreV1().Nodes().Patch(ctx, on.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("%s's kubelet credentials patched node %s: %v, want Forbidden", off.Name, on.Name, err)
		}
		if _, err := nodeClient.CoreV1().Nodes().Patch(ctx, off.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("%s's kubelet credentials cannot patch its own node: %v", off.Name, err)
		}
	})

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      off.Name,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "writer", Image: framework.WriterImage, ImagePullPolicy: corev1.PullNever,
				Args:         []string{"-path=/data/writes.log", "-interval=200ms"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := framework.WaitFor(ctx, 90*time.Second, "writer pod Running on "+off.Name, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod ended: %s %s", p.Status.Phase, p.Status.Message)
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s, %v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The log comes from the kubelet (apiserver -> kubelet:10250 on the
	// node's address), written by containerd from the container's stdout.
	var podLog []byte
	err = framework.WaitFor(ctx, 30*time.Second, "writes in the writer's log", func(ctx context.Context) (bool, error) {
		podLog, err = c.Client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		return bytes.Contains(podLog, []byte("write 3 to /data/writes.log ok")), nil
	})
	if err != nil {
		t.Fatalf("%v; log so far:\n%s", err, podLog)
	}
	if bytes.Contains(podLog, []byte("failed")) {
		t.Fatalf("the writer logged failed writes:\n%s", podLog)
	}

	before, err := c.Processes(off)
	if err != nil {
		t.Fatal(err)
	}
	started := map[int]string{}
	for _, pid := range before {
		if st, err := procStat(pid); err == nil {
			started[pid] = st.start
		}
	}
	names := commands(before)
	for _, want := range []string{"kubelet", "containerd", "containerd-shim", "pause", "writer"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want) {
			t.Fatalf("node %s's cgroup lacks a %s process: %v", off.Name, want, names)
		}
	}
	t.Logf("node %s runs %d processes: %v", off.Name, len(before), names)

	poweredOff := time.Now()
	if err := c.Node(off.Name).PowerOff(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := c.Processes(off)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 0 {
		t.Fatalf("after PowerOff node %s's cgroup still holds %v", off.Name, commands(after))
	}
	// A killed container or shim is an orphan of the init process, which
	// reaps it when it will: a zombie has ended.
	for pid, start := range started {
		if st, err := procStat(pid); err == nil && st.start == start && st.state != "Z" {
			t.Errorf("process %d (%s) of node %s still runs after PowerOff, state %s", pid, st.comm, off.Name, st.state)
		}
	}
	if err := c.WaitNodeNotReady(ctx, off.Name, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s NotReady %.1fs after its power off", off.Name, time.Since(poweredOff).Seconds())
	n, err := c.Client.CoreV1().Nodes().Get(ctx, on.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !framework.NodeReady(n) {
		t.Fatalf("node %s went NotReady with %s", on.Name, off.Name)
	}
}

type stat struct{ comm, state, start string }

// procStat reads a process's name, state and start time (which tells a
// reused PID apart) from /proc/PID/stat.
func procStat(pid int) (stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	// pid (comm) state ppid ... with starttime the 22nd field; comm may
	// hold spaces and parentheses, so split after its last ')'.
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return stat{}, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(string(b[close+1:]))
	if len(f) < 20 {
		return stat{}, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	return stat{comm: string(b[open+1 : close]), state: f[0], start: f[19]}, nil
}

// commands names each process by its comm (or "gone").
func commands(pids []int) []string {
	var out []string
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			out = append(out, "gone")
			continue
		}
		out = append(out, strings.TrimSpace(string(b)))
	}
	return out
}

// startRealNodes skips the test unless real nodes are asked for and the host
// can run them, then starts a control plane with two real nodes, cleaned up
// when the test ends (kept on failure). The context ends with the test's
// deadline of 15 minutes.
func startRealNodes(t *testing.T, opts framework.RealNodeOptions) (context.Context, *framework.Cluster, []*framework.RealNode) {
	t.Helper()
	return startRealNodesIn(t, framework.Options{}, opts)
}

// startRealNodesIn is startRealNodes with the cluster's options.
func startRealNodesIn(t *testing.T, clusterOpts framework.Options, opts framework.RealNodeOptions) (context.Context, *framework.Cluster, []*framework.RealNode) {
	t.Helper()
	if os.Getenv(realNodesEnv) == "" {
		t.Skipf("real nodes run only with %s=1 (make test-realnodes)", realNodesEnv)
	}
	var missing *framework.MissingKernelFeatureError
	if err := framework.CheckRealNodeHost(); errors.As(err, &missing) {
		t.Skipf("this host cannot run real nodes: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	c, err := framework.Start(ctx, tLogger{t}, clusterOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Cleanup(t.Failed()) })
	nodes, err := c.StartRealNodes(ctx, 2, opts)
	if errors.As(err, &missing) {
		t.Skipf("this host cannot run real nodes: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c, nodes
}
