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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// S3 end to end: a node flaps. It is powered off, its volume's fence is slow
// (20 s), and while the fence RPC is in flight the node comes back and turns
// Ready. The pod GC decided to fail the pod over before the fence; when the
// fence returns, its live read must find the node alive and refuse: no pod
// of the node is force-deleted while it is Ready (the node's own kubelet
// deletes the Terminating pod instead). The fenced volume is then cleaned by
// the node agent and the quarantine lifted.
func TestNodeFlapsDuringSlowFence(t *testing.T) {
	ctx := context.Background()
	const latency = 20 * time.Second
	// The failover waits for the fence: --timeout bounds every CSI call.
	if err := product.RestartAttacher(ctx, "--timeout=60s"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := product.RestartAttacher(ctx); err != nil {
			t.Errorf("restoring csi-fence-attacher's flags: %v", err)
		}
	}()
	env, victim, vol := failWithSlowFence(ctx, t, "fl", latency)
	pod, err := cluster.Client.CoreV1().Pods(env.NS).Get(ctx, env.PodName(0), metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName != victim || pod.DeletionTimestamp == nil {
		t.Fatalf("want the pod Terminating on %s while its volume is being fenced: %s", victim, podSummary(pod, err))
	}
	refusals := func(ctx context.Context) (float64, error) {
		return framework.MetricSum(ctx, product.AttacherHTTP, "csi_fence_force_delete_pods_refused_total", map[string]string{"reason": podgc.ReasonSafeDetach})
	}
	refusedBefore, err := refusals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := watchNode(t, victim)
	back := time.Now()
	if err := env.PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	var ready nodeState
	if err := framework.WaitFor(ctx, 10*time.Second, "the watch seeing "+victim+" Ready", func(context.Context) (bool, error) {
		s, ok := node.first(back, func(s nodeState) bool { return s.ready })
		ready = s
		return ok, nil
	}); err != nil {
		t.Fatal(err)
	}
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	fr, err := frs.Get(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	// The premise: Ready again with the fence still in flight.
	if e := fencerecord.Find(fr, framework.DriverName, vol); e == nil || e.FencedTime != nil || e.FenceError != "" {
		t.Fatalf("the fence of %s ended before %s was Ready again (%s after it came back): %+v; the test needs a slower fence", vol, victim, time.Since(back), e)
	}
	t.Logf("%s Ready %s after it came back, the fence of %s still in flight", victim, ready.at.Sub(back).Round(time.Millisecond), vol)
	// Confirmed, and maybe cleaned at once by the node agent of the node
	// that is back.
	if err := framework.WaitFor(ctx, latency+30*time.Second, "the slow fence of "+vol+" confirmed", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, victim)
		e := fencerecord.Find(fr, framework.DriverName, vol)
		return e != nil && e.FencedTime != nil, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitAttached(ctx, 0, victim, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	expectReleased(ctx, t, victim, fencedVolume{product.Driver, vol})

	// A node that went down again would make a force-delete legitimate:
	// the test could not tell. It stays up (its heartbeat every 2.5 s,
	// the grace period 10 s).
	if s, ok := node.first(ready.at, func(s nodeState) bool { return !s.ready }); ok {
		t.Fatalf("%s went NotReady again at %s: the test cannot conclude", victim, s.at.Format(time.StampMilli))
	}
	if reqs := forceDeletes(t, env.NS, pod.Name, back); len(reqs) > 0 {
		t.Errorf("csi-fence-attacher force-deleted %s after %s came back Ready: %+v", pod.Name, victim, reqs)
	}
	// Not vacuous: the pod GC did get to the pod once the fence returned,
	// and its live read refused.
	if n, err := refusals(ctx); err != nil || n <= refusedBefore {
		t.Errorf("the pod GC never refused a force-delete on the live node (%v -> %v, %v): the guard was not exercised", refusedBefore, n, err)
	}
	expectNoViolations(t)
}
