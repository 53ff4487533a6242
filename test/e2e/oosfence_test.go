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

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// oosDriver plays ceph-csi with --enable-fencing: no UNPUBLISH_FENCE, but a
// plain unpublish from a node with the out-of-service taint is a fence.
const oosDriver = "oos.csi-fence.io"

// The driver-side fencing mode end to end: a pod with a volume of a driver
// that fences storage (the mock) and one of a driver that fences on the
// out-of-service taint, on a node cut off from the control plane that keeps
// writing to both. Storage fencing alone cannot free the pod; the node has
// no power switch; every attachment on it is of a driver that fences one
// way or the other: csi-fence-attacher adds the out-of-service taint, as
// its own. The real pod GC and attach/detach controller do the rest; the
// second driver fences the node during the detach, recorded write-ahead by
// its csi-fence-attacher, so the partitioned node's writes are refused
// before the volume is published elsewhere. When the node is back, both
// node agents clean up, and the taint goes with the quarantine.
func TestOutOfServiceDriverFences(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s := setupTwoDriverPod(ctx, t, framework.DriverOptions{Name: oosDriver,
		MockArgs:    []string{"--disable-fence", "--fence-on-out-of-service", "--kubeconfig=" + cluster.Kubeconfig},
		Annotations: map[string]string{contract.FencesOnOutOfServiceAnnotation: "true"}}, "dfo", 2, nil)
	env, d1, d2, victim, vol1, vol2 := s.env, s.d1, s.d2, s.victim, s.vol1, s.vol2
	inst := product.Nodes[victim]
	w1 := scenario.StartWriter(ctx, inst.Plugins[0], vol1, 50*time.Millisecond)
	defer w1.Stop()
	w2 := scenario.StartWriter(ctx, inst.Plugins[1], vol2, 50*time.Millisecond)
	defer w2.Stop()
	if err := framework.WaitFor(ctx, 10*time.Second, "the workload writing to both volumes", func(context.Context) (bool, error) {
		return w1.Accepted.Load() > 0 && w2.Accepted.Load() > 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := product.Node(victim).Partition(ctx); err != nil {
		t.Fatal(err)
	}

	newNode, err := env.WaitAttached(ctx, 0, victim, 240*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the pod runs on %s with both volumes attached", newNode)
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !framework.HasTaint(n, contract.OutOfServiceTaintKey, corev1.TaintEffectNoExecute) || n.Annotations[contract.OutOfServiceProvenanceAnnotation] == "" {
		t.Errorf("%s is not out of service by this system's taint: %v %v", victim, n.Spec.Taints, n.Annotations)
	}
	fr, err := fencingv1alpha1.NewClient(cluster.Dynamic).Get(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		d   *framework.Driver
		vol string
	}{{d1, vol1}, {d2, vol2}} {
		if !fencerecord.IsFenced(fr, v.d.Name, v.vol) {
			t.Errorf("%s of %s is not recorded fenced on %s: %+v", v.vol, v.d.Name, victim, fencerecord.Find(fr, v.d.Name, v.vol))
		}
		expectAccess(t, v.d, v.vol, victim, array.AccessFenced)
	}
	refused := w2.Refused.Load()
	if err := framework.WaitFor(ctx, 10*time.Second, "the partitioned node's writes to "+vol2+" refused", func(context.Context) (bool, error) {
		return w2.Refused.Load() > refused, nil
	}); err != nil {
		t.Error(err)
	}
	if err := product.Nodes[newNode].Plugins[1].Write(ctx, vol2); err != nil {
		t.Errorf("the replacement cannot write %s: %v", vol2, err)
	}
	expectEvent(ctx, t, victim, "FenceEscalated")
	expectNoViolations(t)
	w1.Stop()
	w2.Stop()

	if err := env.PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	expectReleased(ctx, t, victim, fencedVolume{d1, vol1}, fencedVolume{d2, vol2})
	n, err = cluster.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if framework.HasTaint(n, contract.OutOfServiceTaintKey, corev1.TaintEffectNoExecute) || n.Annotations[contract.OutOfServiceProvenanceAnnotation] != "" {
		t.Errorf("the out-of-service taint this system added is left on %s: %v %v", victim, n.Spec.Taints, n.Annotations)
	}
	expectNoViolations(t)
}
