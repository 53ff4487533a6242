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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// The control plane behaves as the failover flow needs: KWOK nodes turn
// Ready, the scheduler places a pod and KWOK runs it, and a node whose
// heartbeat stops is marked NotReady and tainted unreachable:NoExecute by
// the real node lifecycle controller within the grace period; when it comes
// back the taint goes.
func TestControlPlane(t *testing.T) {
	ctx := context.Background()
	begin := time.Now()
	step := func(what string) { t.Logf("+%5.1fs %s", time.Since(begin).Seconds(), what) }

	// Two nodes: one fails, the other stays Ready (with every node NotReady
	// the node lifecycle controller would enter disruption mode instead).
	nodes, err := cluster.CreateNodes(ctx, "cp-node", 2, "")
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = cluster.Client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	step("2 KWOK nodes Ready")
	victim, healthy := nodes[0], nodes[1]

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-pod", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": healthy},
			Containers:   []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	if _, err := cluster.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = cluster.Client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	if err := framework.WaitFor(ctx, 30*time.Second, "pod scheduled and Running", func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Spec.NodeName == healthy && p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		t.Fatal(err)
	}
	step("pod scheduled to " + healthy + " and Running")

	if err := cluster.Node(victim).Partition(ctx); err != nil {
		t.Fatal(err)
	}
	step(victim + " shut down (heartbeat stopped)")
	// Grace period 10 s, monitor period 1 s, Lease renewed every 2.5 s.
	if err := cluster.WaitNodeNotReady(ctx, victim, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	step(victim + " NotReady")
	if err := cluster.WaitTaint(ctx, victim, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	step(victim + " tainted " + corev1.TaintNodeUnreachable + ":NoExecute")
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, healthy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !framework.NodeReady(n) {
		t.Fatalf("%s lost Ready while only %s was shut down", healthy, victim)
	}

	if err := cluster.Node(victim).Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitNodeReady(ctx, victim, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	step(victim + " back and Ready")
	if err := cluster.WaitTaint(ctx, victim, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, false, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	step(victim + " unreachable taint removed")
	if err := cluster.Alive(); err != nil {
		t.Fatal(err)
	}
}
