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

// End-to-end tests on a real control plane (see test/e2e/framework): one
// cluster per package run, one namespace-free prefix per test.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

var (
	cluster *framework.Cluster
	product *framework.Product
)

type stdLogger struct{}

func (stdLogger) Logf(format string, args ...interface{}) {
	fmt.Printf("e2e: "+format+"\n", args...)
}

func TestMain(m *testing.M) {
	// Run by a real node's BMC (ipmi_sim) as its machine, not as tests.
	if len(os.Args) > 1 && os.Args[1] == framework.NodeMachineFlag {
		os.Exit(framework.RunNodeMachine(os.Args[2:]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	var err error
	cluster, err = framework.Start(ctx, stdLogger{}, framework.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		os.Exit(1)
	}
	product, err = cluster.StartProduct(ctx, framework.ProductOptions{})
	cancel()
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting fence-attacher:", err)
	} else {
		code = m.Run()
		if rbacCode := checkRBAC(); code == 0 {
			code = rbacCode
		}
	}
	cluster.Cleanup(code != 0)
	os.Exit(code)
}

type tLogger struct{ t *testing.T }

func (l tLogger) Logf(format string, args ...interface{}) { l.t.Helper(); l.t.Logf(format, args...) }

// expectNoViolations checks the array of every driver of the product: no
// S1 or S2 carried out, and none refused either (the product must never
// even ask for an unsafe publish).
func expectNoViolations(t *testing.T) {
	t.Helper()
	for _, d := range product.Drivers {
		s, err := d.Array.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		v, refused := s.CountViolations(), s.RefusedUnsafe()
		if v["S1"] != 0 || v["S2"] != 0 || refused[array.RefusedPublishElsewhere] != 0 || refused[array.RefusedPublishQuarantined] != 0 {
			t.Fatalf("safety violations on the array of %s: %v, unsafe requests refused: %v: %+v", d.Name, v, refused, s.Violations)
		}
	}
}

// A StatefulSet's volume is published by csi-fence-attacher through the real
// attach/detach controller, and deleting the pod detaches it gracefully:
// no fence, nothing quarantined.
func TestAttachDetachThroughADC(t *testing.T) {
	ctx := context.Background()
	env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "ad", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	node, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := product.Array.Snapshot()
	if p := s.Volumes[env.Volumes[0]].Publications[node]; p == nil || p.Access != "granted" {
		t.Fatalf("array does not show %s published to %s: %+v", env.Volumes[0], node, s.Volumes[env.Volumes[0]])
	}
	if err := cluster.Client.AppsV1().StatefulSets(env.NS).Delete(ctx, env.App, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "VolumeAttachment deleted", func(ctx context.Context) (bool, error) {
		va, err := env.VA(ctx, env.Volumes[0], node)
		return va == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	s, _ = product.Array.Snapshot()
	if p := s.Volumes[env.Volumes[0]].Publications[node]; p != nil {
		t.Fatalf("graceful detach left the volume on the array as %+v (a fence here would quarantine a healthy node)", p)
	}
	if _, err := fencingv1alpha1.NewClient(cluster.Dynamic).Get(ctx, node); err == nil {
		t.Fatalf("a graceful detach created a FencingRequest for %s", node)
	}
	expectNoViolations(t)
}

// Out-of-service failover (KEP-2268's manual path): the node is powered off,
// the operator adds the taint, the pod moves to a healthy node and its old
// attachment is unpublished with fence=true and recorded.
func TestOutOfServiceFailover(t *testing.T) {
	ctx := context.Background()
	env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "oos", 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rec := watchTimeline(t, env, victim, env.Volumes[0])
	if err := env.Failover(ctx, rec, scenario.FailoverOptions{OutOfServiceTaint: true, Return: true}); err != nil {
		t.Fatal(err)
	}
	fr, err := fencingv1alpha1.NewClient(cluster.Dynamic).Get(ctx, victim)
	if err != nil {
		t.Fatalf("no FencingRequest recorded for %s: %v", victim, err)
	}
	// Fenced while the node was down, force-cleaned by the node agent when
	// it came back: the record says both, and the array lifted the quarantine.
	v := fencerecord.Find(fr, framework.DriverName, env.Volumes[0])
	if v == nil || v.FencedTime == nil || v.CleanedTime == nil {
		t.Fatalf("volume %s not recorded as fenced and cleaned on %s: %+v", env.Volumes[0], victim, fr.Status)
	}
	s, _ := product.Array.Snapshot()
	if p := s.Volumes[env.Volumes[0]].Publications[victim]; p != nil {
		t.Fatalf("array still holds the volume on %s after the cleanup: %+v", victim, p)
	}
	var b = &testWriter{t}
	rec.Print(b)
	expectNoViolations(t)
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// The product's main job: SafeDetach failover without a person. The node is
// powered off; the failover controller quarantines it, fences the volume,
// force-deletes the pod; the replacement attaches elsewhere; when the node
// returns it is force-cleaned and the quarantine is lifted.
func TestSafeDetachFailover(t *testing.T) {
	runFailover(t, "sd", scenario.FailoverOptions{Return: true})
}

// A partitioned node keeps running its workload, which keeps writing: the
// fence must cut those writes off before the volume moves, and the array must
// see no write from two nodes.
func TestPartitionedNodeFailover(t *testing.T) {
	runFailover(t, "pt", scenario.FailoverOptions{Partition: true, Return: true})
}

func runFailover(t *testing.T, prefix string, opts scenario.FailoverOptions) {
	ctx := context.Background()
	env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, prefix, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rec := watchTimeline(t, env, victim, env.Volumes[0])
	// A pod that tolerates the node being unreachable forever chose to wait
	// for its node: it must never be touched.
	tolerant := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-tolerant", Namespace: env.NS},
		Spec: corev1.PodSpec{
			NodeName:    victim,
			Containers:  []corev1.Container{{Name: "c", Image: "busybox"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := cluster.Client.CoreV1().Pods(env.NS).Create(ctx, tolerant, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Failover(ctx, rec, opts); err != nil {
		t.Fatal(err)
	}
	if p, err := cluster.Client.CoreV1().Pods(env.NS).Get(ctx, tolerant.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the pod tolerating the unreachable node forever was touched: %v, %v", err, p)
	}
	// Fence before delete (S1's order): the fence is recorded no later than
	// the force-delete.
	fenced, ok1 := rec.At(timeline.StorageFenced)
	deleted, ok2 := rec.At(timeline.PodForceDeleted)
	if !ok1 || !ok2 || fenced.After(deleted) {
		t.Errorf("want the fence before the force-delete; fenced=%v (%v) deleted=%v (%v)", fenced, ok1, deleted, ok2)
	}
	if !rec.Has(timeline.Quarantined) {
		t.Errorf("the node was never quarantined")
	}
	// The pod GC's one write before its delete says why, as Kubernetes'
	// own pod GC does, with the termination reason: all three reach the
	// pod through its status subresource.
	for _, e := range rec.Events() {
		if e.What == timeline.PodForceDeleted && e.Detail != "phase Failed, DisruptionTarget True DeletionByPodGC, termination reason IntolerableTaint" {
			t.Errorf("the force-deleted pod does not record why: %s", e.Detail)
		}
	}
	rec.Print(&testWriter{t})
	expectNoViolations(t)
}

// A driver that refuses to fence (it cannot prove the node stopped): nothing
// moves, the reason is visible on the FencingRequest; once the driver
// agrees, the failover completes.
func TestRefusedFenceMovesNothing(t *testing.T) {
	ctx := context.Background()
	env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "rf", 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	store := faults.NewStore(product.StateDir)
	if err := store.Set("ControllerUnpublishVolume", faults.Fault{Code: codes.FailedPrecondition}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Clear() }()
	if err := product.Node(victim).PowerOff(ctx); err != nil {
		t.Fatal(err)
	}
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	if err := framework.WaitFor(ctx, 90*time.Second, "the refused fence recorded on the FencingRequest", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, victim)
		if err != nil {
			return false, nil
		}
		v := fencerecord.Find(fr, framework.DriverName, env.Volumes[0])
		return v != nil && v.FenceError != "" && fr.Status.ErrorMessage != "", nil
	}); err != nil {
		t.Fatal(err)
	}
	// Nothing moved: the pod is still there (Terminating), its volume is
	// still attached to the dead node, and the array never fenced it.
	pod, err := cluster.Client.CoreV1().Pods(env.NS).Get(ctx, env.PodName(0), metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName != victim {
		t.Fatalf("the pod moved although its volume could not be fenced: %v %v", pod, err)
	}
	if va, err := env.VA(ctx, env.Volumes[0], victim); err != nil || va == nil {
		t.Fatalf("the old attachment is gone although the fence was refused: %v", err)
	}
	s, _ := product.Array.Snapshot()
	if p := s.Volumes[env.Volumes[0]].Publications[victim]; p == nil || p.Access != "granted" {
		t.Fatalf("the array shows %+v; the refused fence must leave the volume as it was", p)
	}
	// The driver agrees now: the failover completes.
	if err := store.Clear(); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitAttached(ctx, 0, victim, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	// Bring the node back and let it be cleaned, so the cluster is whole again.
	if err := product.Node(victim).PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 90*time.Second, "quarantine lifted", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, victim)
		return err == nil && fr.Status.Phase == fencingv1alpha1.PhaseComplete, nil
	}); err != nil {
		t.Fatal(err)
	}
	expectNoViolations(t)
}
