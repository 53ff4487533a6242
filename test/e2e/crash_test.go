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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// S8 end to end: the controller role is killed (SIGKILL) while its fence RPC
// is in flight (the driver is slow), and the node comes back before the
// controller does. The fence may or may not have been applied; the intent
// recorded before the RPC says so. The node must stay quarantined until its
// node agent has cleaned the volume, nothing may be published there before,
// the array must hold no quarantine once the failover is over, and the
// record, taints and conditions must all be gone.
func TestControllerKilledMidFence(t *testing.T) {
	ctx := context.Background()
	env, victim, vol := failWithSlowFence(ctx, t, "km", 20*time.Second)
	product.KillAttacher()
	restarted := false
	defer func() {
		if !restarted {
			if err := product.StartAttacher(ctx); err != nil {
				t.Errorf("restarting csi-fence-attacher for the next tests: %v", err)
			}
		}
	}()
	t.Logf("csi-fence-attacher killed with a fence of %s on %s in flight", vol, victim)

	// The node comes back while the controller is down.
	if err := env.PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := product.StartAttacher(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true

	expectReleased(ctx, t, victim, fencedVolume{product.Driver, vol})
	if _, err := env.WaitAttached(ctx, 0, "", 120*time.Second); err != nil {
		t.Fatal(err)
	}
	expectNoViolations(t)
}

// S6 end to end, the classic manual failover: after the failover, the user
// deletes the dead node's FencingRequest and then the Node itself
// (`kubectl delete node`), and the machine later registers again under the
// same name. Neither deletion may drop the record of the fenced volume: the
// re-registered node's agent must still find and clean it, and only then may
// the record go.
func TestRecordSurvivesDeletions(t *testing.T) {
	ctx := context.Background()
	env, victim := setupAttached(ctx, t, "nd")
	vol := env.Volumes[0]
	rec := watchTimeline(t, env, victim, vol)
	if err := env.Failover(ctx, rec, scenario.FailoverOptions{}); err != nil {
		t.Fatal(err)
	}
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	if err := frs.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	fr, err := frs.Get(ctx, victim)
	if err != nil || fr.DeletionTimestamp == nil || !fencerecord.MayBeQuarantined(fr, framework.DriverName, vol) {
		t.Fatalf("deleting the FencingRequest dropped the record of %s before its cleanup: %v, %v", vol, fr, err)
	}
	if err := cluster.Client.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 30*time.Second, "Node "+victim+" gone", func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal(err)
	}

	// The machine boots and registers again.
	if err := cluster.CreateNode(ctx, victim, framework.DriverName); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := env.PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 120*time.Second, "the re-registered node's agent cleaning "+vol+", then the record gone", func(ctx context.Context) (bool, error) {
		_, err := frs.Get(ctx, victim)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}); err != nil {
		t.Fatal(err)
	}
	if !rec.Has(timeline.NodeCleaned) {
		t.Errorf("the record went without the node agent's cleanup of %s", vol)
	}
	s, err := product.Array.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Volumes[vol].Publications[victim]; p != nil && p.Access == array.AccessFenced {
		t.Errorf("the array still holds %s quarantined on %s: %+v", vol, victim, p)
	}
	if err := cluster.WaitTaint(ctx, victim, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule, false, 60*time.Second); err != nil {
		t.Error(err)
	}
	expectNoViolations(t)
}

// A rolling update of the controller role during a failover: two replicas;
// the leader is terminated (SIGTERM, as the kubelet does) while its fence RPC
// is in flight. The other replica takes the one Lease, and with it both the
// attacher and the failover, fences again (idempotent) and finishes the
// failover; when the node returns it is cleaned and released.
func TestRollingUpdateDuringFailover(t *testing.T) {
	ctx := context.Background()
	standby, standbyAddr, err := product.StartStandbyAttacher(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if product.Attacher != standby {
			standby.Stop(10 * time.Second)
		}
	}()
	env, victim, vol := failWithSlowFence(ctx, t, "ru", 5*time.Second)
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	// One Lease: until now the standby has done nothing (a replica that
	// attached or fenced beside the leader would be two controllers).
	if leading, err := framework.Leading(ctx, standbyAddr); err != nil || leading {
		t.Fatalf("the standby replica leads beside the leader: %v, %v", leading, err)
	}
	product.Attacher.Stop(30 * time.Second)
	product.Attacher = standby
	if err := framework.WaitFor(ctx, 60*time.Second, "the standby holding the Lease", func(ctx context.Context) (bool, error) {
		return framework.Leading(ctx, standbyAddr)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("leader terminated with a fence in flight; the standby takes over")

	if _, err := env.WaitAttached(ctx, 0, victim, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	fr, err := frs.Get(ctx, victim)
	if err != nil || !fencerecord.IsFenced(fr, framework.DriverName, vol) {
		t.Fatalf("the volume moved without a confirmed fence on %s: %v, %v", victim, fr, err)
	}
	if err := env.PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	expectReleased(ctx, t, victim, fencedVolume{product.Driver, vol})
	expectNoViolations(t)
}

// failWithSlowFence runs prefix's StatefulSet of one replica on three nodes,
// makes the driver's next ControllerUnpublishVolume take latency, powers off
// the replica's node and returns once the fence of its volume is in flight:
// its intent recorded, no outcome yet.
func failWithSlowFence(ctx context.Context, t *testing.T, prefix string, latency time.Duration) (env *scenario.Env, victim, vol string) {
	t.Helper()
	env, victim = setupAttached(ctx, t, prefix)
	vol = env.Volumes[0]
	store := faults.NewStore(product.StateDir)
	if err := store.Set("ControllerUnpublishVolume", faults.Fault{Latency: latency, Count: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Clear() })
	if err := env.PowerOff(ctx, victim); err != nil {
		t.Fatal(err)
	}
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	if err := framework.WaitFor(ctx, 120*time.Second, "the intent to fence "+vol+" recorded, its RPC in flight", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, victim)
		if err != nil {
			return false, nil
		}
		e := fencerecord.Find(fr, framework.DriverName, vol)
		return e != nil && e.StartedTime != nil && e.FencedTime == nil && e.FenceError == "", nil
	}); err != nil {
		t.Fatal(err)
	}
	return env, victim, vol
}

// Issue 19 hole 8, the classic manual failover on the real control plane:
// the node dies and an operator deletes its Node at once (`kubectl delete
// node`), before anything else happens. Kubernetes' pod GC deletes the
// orphaned pod and the StatefulSet replaces it elsewhere; left alone, the
// attach/detach controller would keep the volume counted as mounted on the
// deleted node for 6 minutes (no Node to clear volumesInUse from). The
// product fences the attachment (recorded) and, once no pod uses it there,
// deletes it: the volume attaches elsewhere well within those 6 minutes (the
// deadline below is shorter), with no violation on the array.
func TestDeletedDeadNodeFailsOver(t *testing.T) {
	ctx := context.Background()
	env, victim := setupAttached(ctx, t, "dn")
	vol := env.Volumes[0]
	if err := env.PowerOff(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s powered off and deleted", victim)
	// The pod GC's orphan quarantine (40 s), the attach/detach controller's
	// sync of its actual state (1 min), the attach: far less than its
	// 6-minute wait for a volume it counts as mounted.
	on, err := env.WaitAttached(ctx, 0, victim, 4*time.Minute)
	if err != nil {
		t.Fatalf("the volume of the deleted node did not attach elsewhere before the attach/detach controller's 6-minute wait: %v", err)
	}
	t.Logf("%s attached on %s", vol, on)
	fr, err := fencingv1alpha1.NewClient(cluster.Dynamic).Get(ctx, victim)
	if err != nil || !fencerecord.IsFenced(fr, framework.DriverName, vol) {
		t.Errorf("the fence of %s on the deleted node %s is not recorded: %v, %v", vol, victim, fr, err)
	}
	expectNoViolations(t)

	// The machine registers again: its agent cleans the volume, the request
	// completes.
	if err := cluster.CreateNode(ctx, victim, framework.DriverName); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := env.PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 120*time.Second, "the re-registered node's agent cleaning "+vol+", then the request Complete", func(ctx context.Context) (bool, error) {
		fr, err := fencingv1alpha1.NewClient(cluster.Dynamic).Get(ctx, victim)
		return err == nil && !fencerecord.Pending(fr) && fr.Status.Phase == fencingv1alpha1.PhaseComplete, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitTaint(ctx, victim, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule, false, 60*time.Second); err != nil {
		t.Error(err)
	}
}

// setupAttached sets up a one-replica workload on 3 nodes and returns the
// node its volume is attached to.
func setupAttached(ctx context.Context, t *testing.T, prefix string) (*scenario.Env, string) {
	t.Helper()
	env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, prefix, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return env, victim
}
