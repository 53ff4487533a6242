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

package trials

// The schedules of issue 38's proof: a node cut off again while it is still
// quarantined from its first failure, with a new pod whose storage no fence
// covers, and kube-apiserver restarted at the moment the pod's toleration of
// the dead node runs out, so that the taint manager's eviction is lost.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"

	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// cleanupRPCs are the node plugin calls of the node agent's cleanup of a
// fenced volume.
var cleanupRPCs = []string{"NodeUnpublishVolume", "NodeUnstageVolume"}

// holdCleanup makes the victim's node plugin refuse every cleanup call
// (Unavailable, no count) until releaseCleanup: the node comes back and
// stays quarantined, its record pending. The faults name the trial's own
// node, which no other trial uses, so a trial that ends early leaves
// nothing another one sees.
func holdCleanup(ctx context.Context, t *Trial) ([]string, error) {
	store := faults.NewStore(t.p.StateDir)
	for _, m := range cleanupRPCs {
		if err := store.Set(m, faults.Fault{Code: codes.Unavailable, Node: t.Victim}); err != nil {
			return nil, err
		}
	}
	return []string{"node plugin of " + t.Victim + " refuses its cleanup"}, nil
}

// releaseCleanup lets the victim's node agent clean up again.
func releaseCleanup(t *Trial) error {
	store := faults.NewStore(t.p.StateDir)
	for _, m := range cleanupRPCs {
		if err := store.Set(m, faults.Fault{Node: t.Victim}); err != nil {
			return err
		}
	}
	return nil
}

// cutOffAgainWhileQuarantined runs once the node is back from its first
// failover with its cleanup held (holdCleanup): still quarantined, and
// FencingComplete=True from the first failure. A pod with an inline NFS
// volume, which no fence covers, starts there (spec.nodeName, tolerating
// the quarantine), and the node is powered off again at a random moment.
// The pod turns Terminating when its toleration runs out; it must not be
// force-deleted through the old FencingComplete (checkCutOffAgain), which
// the failover must take back first. The trial waits until either the pod
// is gone or FencingComplete is no longer True, then lets the cleanup run
// and brings the node back.
func cutOffAgainWhileQuarantined(ctx context.Context, t *Trial) ([]string, error) {
	nodes := t.c.Client.CoreV1().Nodes()
	var steps []string
	err := framework.WaitFor(ctx, 30*time.Second, t.Victim+" quarantined with FencingComplete=True", func(ctx context.Context) (bool, error) {
		n, err := nodes.Get(ctx, t.Victim, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule) && fencingComplete(n), nil
	})
	if err != nil {
		return steps, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	u := &unattachedPod{name: t.Env.App + "-nfs"}
	t.extra = u
	pod := nfsPod(t, u.name)
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: contract.QuarantineTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	pods := t.c.Client.CoreV1().Pods(t.Env.NS)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return steps, err
	}
	if err := t.watchGone(u, t.stop); err != nil {
		return steps, err
	}
	if err := framework.WaitFor(ctx, 30*time.Second, "pod "+u.name+" running", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, u.name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		return steps, err
	}
	steps = append(steps, "back still quarantined with FencingComplete; pod "+u.name+" with an inline NFS volume started there")
	d := t.between(0, 2*time.Second)
	if err := sleep(ctx, d); err != nil {
		return steps, err
	}
	if err := t.Env.PowerOff(ctx, t.Victim); err != nil {
		return steps, err
	}
	steps = append(steps, fmt.Sprintf("power-off again %.2fs later", d.Seconds()))
	if err := t.c.WaitNodeReady(ctx, t.Victim, false, 60*time.Second); err != nil {
		return steps, err
	}
	// Terminating first (the taint manager, after its 2 s toleration),
	// then either force-deleted (broken) or FencingComplete taken back.
	outcome := ""
	err = framework.WaitFor(ctx, 90*time.Second, "pod "+u.name+" gone or FencingComplete taken back", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, u.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			outcome = "pod " + u.name + " deleted"
			return true, nil
		case err != nil || p.DeletionTimestamp == nil:
			return false, nil
		}
		n, err := nodes.Get(ctx, t.Victim, metav1.GetOptions{})
		if err != nil || fencingComplete(n) {
			return false, nil
		}
		outcome = "pod " + u.name + " Terminating, FencingComplete taken back"
		return true, nil
	})
	if err != nil {
		return steps, err
	}
	steps = append(steps, outcome)
	if err := releaseCleanup(t); err != nil {
		return steps, err
	}
	steps = append(steps, "cleanup let through; power on")
	if err := t.Env.PowerOn(ctx, t.Victim); err != nil {
		return steps, err
	}
	// Back, its kubelet ends the Terminating pod.
	return steps, framework.WaitFor(ctx, 60*time.Second, "pod "+u.name+" gone once its node is back", func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, u.name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// checkCutOffAgain: the NFS pod of cutOffAgainWhileQuarantined was not
// deleted by the product (S3: its storage was never fenced, so neither an
// automatic fence nor a FencingComplete can vouch for it; S9: the old
// FencingComplete was no longer true).
func checkCutOffAgain(ctx context.Context, t *Trial) []string {
	u, ok := t.extra.(*unattachedPod)
	if !ok {
		return nil
	}
	events, err := t.c.AuditEvents()
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range events {
		if e.User == productUser && e.Verb == "delete" && e.Resource == "pods" && e.Namespace == t.Env.NS && e.Name == u.name && e.Code < 300 {
			out = append(out, fmt.Sprintf("S3, S9: pod %s, started on %s after its first failover and whose NFS volume no fence covers, force-deleted by the product at %s (through the FencingComplete of the first failure)",
				u.name, t.Victim, e.Time.Format("15:04:05.000")))
		}
	}
	return out
}

// evictionGrace is how long after the node's NoExecute taint the trial's
// pods are evicted: their toleration (scenario: 2 s, the unattached-storage
// pod's the same).
const evictionGrace = 2 * time.Second

// apiserverRestartAtEviction stops kube-apiserver a random moment (0.2 to
// 1.5 s) before the replica's toleration of the node's unreachable taint
// runs out, as kube-controller-manager's clock has it (the taint's
// timeAdded), and starts it again. The taint manager's delete then fails
// and is never retried (kubernetes/kubernetes#140639): the pod must still
// be evicted, by the product taking the eviction over, and fail over. No
// operator steps in; a pod not evicted within two minutes of the
// apiserver's return ends the trial as failed.
func apiserverRestartAtEviction(ctx context.Context, t *Trial) ([]string, error) {
	var added time.Time
	err := framework.WaitFor(ctx, 30*time.Second, "the unreachable NoExecute taint on "+t.Victim, func(ctx context.Context) (bool, error) {
		n, err := t.c.Client.CoreV1().Nodes().Get(ctx, t.Victim, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, tt := range n.Spec.Taints {
			if tt.Key == corev1.TaintNodeUnreachable && tt.Effect == corev1.TaintEffectNoExecute && tt.TimeAdded != nil {
				added = tt.TimeAdded.Time
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	lead := t.between(200*time.Millisecond, 1500*time.Millisecond)
	wait := time.Until(added.Add(evictionGrace - lead))
	if err := sleep(ctx, max(wait, 0)); err != nil {
		return nil, err
	}
	stopped := time.Now()
	if err := t.c.RestartAPIServer(ctx); err != nil {
		return nil, err
	}
	steps := []string{fmt.Sprintf("kube-apiserver stopped %.2fs before the toleration ran out (taint+%.2fs), back after %.2fs",
		added.Add(evictionGrace).Sub(stopped).Seconds(), stopped.Sub(added).Seconds(), time.Since(stopped).Seconds())}
	pods := t.c.Client.CoreV1().Pods(t.Env.NS)
	name := t.Env.PodName(t.victims[0].replica)
	err = framework.WaitFor(ctx, 120*time.Second, "pod "+name+" evicted", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		return err == nil && (p.DeletionTimestamp != nil || p.Spec.NodeName != t.Victim), nil
	})
	if err != nil {
		return steps, fmt.Errorf("the eviction lost with the apiserver was never taken over: %w", err)
	}
	// The product's Event follows its delete by a moment (its recorder
	// writes asynchronously); the taint manager's eviction has none.
	takenOver := false
	_ = framework.WaitFor(ctx, 5*time.Second, "an EvictionTakenOver Event on pod "+name, func(ctx context.Context) (bool, error) {
		list, err := t.c.Client.CoreV1().Events(t.Env.NS).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.name", name), fields.OneTermEqualSelector("reason", "EvictionTakenOver")).String()})
		takenOver = err == nil && len(list.Items) > 0
		return takenOver, nil
	})
	if takenOver {
		steps = append(steps, "the lost eviction taken over by the product")
	} else {
		steps = append(steps, "no EvictionTakenOver Event: the taint manager's eviction went through (the restart missed its moment)")
	}
	return steps, nil
}

// handOverBound is the longest a replica that took over mid-failure may
// take from acquiring its leader-election Lease to the fence of a node that
// was already down: less than one heartbeat Lease duration. A replica that
// timed the kubelets' heartbeats only from its takeover would see the dead
// node's Lease for the first time then and call it down a whole
// leaseDuration later (issue 38 item 6); one that timed them from its
// start, before the failure, finds it silent for longer than that already.
// What is left is the pod's eviction (its 2 s toleration of the
// unreachable taint, counted from NotReady, before the takeover), the
// informers' sync of the new leader and one failover pass.
const handOverBound = leaseDuration

// standbyRun is the state of the leader-loss-standby-first schedule.
type standbyRun struct {
	standby *framework.Process
	started time.Time
}

// standbyBeforeFailure starts a second replica of the controller, as a
// Deployment of two does, before the node fails, and waits until the
// trial sees the victim's heartbeat Lease renewed after the replica was up:
// the replica's heartbeat watch, started before it runs for leadership,
// saw the node alive.
func standbyBeforeFailure(ctx context.Context, t *Trial) ([]string, error) {
	t.procMu.Lock()
	standby, _, err := t.p.StartStandbyAttacher(ctx)
	t.procMu.Unlock()
	if err != nil {
		return nil, err
	}
	up := time.Now()
	t.extra = &standbyRun{standby: standby, started: up}
	err = framework.WaitFor(ctx, 2*leaseDuration, "a renewal of "+t.Victim+"'s Lease after the standby started", func(context.Context) (bool, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		rs := t.renewals[t.Victim]
		return len(rs) > 0 && rs[len(rs)-1].After(up), nil
	})
	if err != nil {
		return nil, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	return []string{"standby replica started before the failure"}, nil
}

// leaderLossStandbyFirst terminates the leader (SIGTERM) a random moment
// (0 to 1.5 s) after NotReady, before the pod's eviction (2 s after the
// unreachable taint), so that the fence is the new leader's, and measures
// from the new leader's acquireTime of its leader-election Lease to the
// fence of the trial's volume reaching the driver: more than handOverBound
// is a broken hand-over. A fence sent by the old leader before the
// takeover means the schedule missed its path: the trial fails.
func leaderLossStandbyFirst(ctx context.Context, t *Trial) ([]string, error) {
	run, ok := t.extra.(*standbyRun)
	if !ok {
		return nil, fmt.Errorf("the schedule cannot reach its path: no standby started before the failure")
	}
	d := t.between(0, 1500*time.Millisecond)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	held, err := t.leaderLeases(ctx)
	if err != nil {
		return nil, err
	}
	driver := contract.SanitizeDriverName(framework.DriverName)
	for name, holder := range held {
		if strings.HasSuffix(name, "/"+contract.NodeFencingLeaseName) && !strings.HasSuffix(holder, "_"+driver) {
			delete(held, name)
		}
	}
	t.procMu.Lock()
	t.p.Attacher.Stop(30 * time.Second)
	t.p.Attacher = run.standby
	t.procMu.Unlock()
	steps := []string{fmt.Sprintf("leader terminated at NotReady+%.2fs, the standby running %.2fs by then", d.Seconds(), time.Since(run.started).Seconds())}
	if err := t.waitLeasesTakenOver(ctx, held, "the standby holding the leader's Leases"); err != nil {
		return steps, err
	}
	// The takeover: the earliest acquireTime of the Leases taken over
	// (this machine's clock, as the driver's log is). The new leader builds
	// its failover once it holds the first: a heartbeat watch started then
	// calls the node down a lease duration after it at the earliest.
	var acquired time.Time
	for name := range held {
		ns, n, _ := strings.Cut(name, "/")
		l, err := t.c.Client.CoordinationV1().Leases(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return steps, err
		}
		if at := l.Spec.AcquireTime; at != nil && (acquired.IsZero() || at.Time.Before(acquired)) {
			acquired = at.Time
		}
	}
	if acquired.IsZero() {
		return steps, fmt.Errorf("the schedule cannot reach its path: no acquireTime on the Leases taken over (%v)", held)
	}
	var fence time.Time
	err = framework.WaitFor(ctx, 60*time.Second, "the fence of "+t.Volume+" from "+t.Victim, func(context.Context) (bool, error) {
		rpcs, err := controllerRPCs(t.p.Driver.Mock.LogPath, run.started.Add(-time.Minute))
		if err != nil {
			return false, nil
		}
		for _, r := range rpcs {
			if r.Fence && r.Volume == t.Volume && r.NodeID == t.Victim {
				fence = r.Received
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return steps, err
	}
	if fence.Before(acquired) {
		return steps, fmt.Errorf("the schedule cannot reach its path: the old leader fenced %.2fs before the takeover", acquired.Sub(fence).Seconds())
	}
	took := fence.Sub(acquired)
	steps = append(steps, fmt.Sprintf("takeover to fence %.2fs (bound %s; standby started %.2fs before the takeover)",
		took.Seconds(), handOverBound, acquired.Sub(run.started).Seconds()))
	if took >= handOverBound {
		t.broken("hand-over: the new leader fenced the dead node %.2fs after it took over, not within %s: it did not time the heartbeats from its start (issue 38 item 6)", took.Seconds(), handOverBound)
	}
	return steps, nil
}

// newNodeID is the CSI node ID the victim's node plugin reports once back
// in the new-node-id schedule.
func newNodeID(node string) string { return node + "-reinstalled" }

// newNodeIDAfterFence waits until the fence of the trial's volume is
// recorded confirmed under the node's CSI node ID (its name), and then
// configures the node's plugin to report another ID from its next boot,
// as a node plugin whose ID derives from an initiator name or an NQN that
// changed does; the array learns the new ID as an array learns a host's
// new initiator.
func newNodeIDAfterFence(ctx context.Context, t *Trial) ([]string, error) {
	frs := fencingv1alpha1.NewClient(t.c.Dynamic)
	err := framework.WaitFor(ctx, 120*time.Second, "the fence of "+t.Volume+" recorded under node ID "+t.Victim, func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, t.Victim)
		if err != nil {
			return false, nil
		}
		e := fencerecord.Find(fr, framework.DriverName, t.Volume)
		return e != nil && e.FencedTime != nil && e.NodeID == t.Victim, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	id := newNodeID(t.Victim)
	if err := t.p.Driver.Array.RegisterNode(id, 0); err != nil {
		return nil, err
	}
	t.p.Nodes[t.Victim].NodePlugin.NodeID = id
	return []string{"fence recorded under node ID " + t.Victim + "; the node plugin reports " + id + " from its next boot"}, nil
}

// newNodeIDReturn runs once the node is back, its plugin reporting the new
// ID while its CSINode still registers the old one (the kubelet has not
// registered the plugin again yet): the node agent must refuse to clean
// the volume fenced under the old ID and say why in the record. Then the
// CSINode registers the new ID, as the kubelet does at the plugin's
// registration, and the node must be cleaned and released (S6), which the
// trial's end waits for. checkNewNodeID checks that the cleanup came after
// the new registration.
func newNodeIDReturn(ctx context.Context, t *Trial) ([]string, error) {
	id := newNodeID(t.Victim)
	frs := fencingv1alpha1.NewClient(t.c.Dynamic)
	why := ""
	err := framework.WaitFor(ctx, 60*time.Second, "the node agent refusing to clean "+t.Volume+" under its new node ID", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, t.Victim)
		if err != nil {
			return false, nil
		}
		e := fencerecord.Find(fr, framework.DriverName, t.Volume)
		if e == nil || e.CleanedTime != nil {
			return false, fmt.Errorf("the fence of %s under node ID %s cleaned (or gone) while the node's CSINode still registered the old ID and its plugin reported %s", t.Volume, t.Victim, id)
		}
		why = e.CleanupError
		return why != "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	steps := []string{"back under node ID " + id + "; cleanup refused: " + why}
	// A CSINode's driver entries are immutable: the kubelet removes the
	// entry at the plugin's deregistration and adds the new one at its
	// registration.
	csinodes := t.c.Client.StorageV1().CSINodes()
	for _, register := range []bool{false, true} {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cn, err := csinodes.Get(ctx, t.Victim, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cn.Spec.Drivers = slices.DeleteFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == framework.DriverName })
			if register {
				cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: framework.DriverName, NodeID: id})
			}
			_, err = csinodes.Update(ctx, cn, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return steps, err
		}
	}
	t.extra = &nodeIDRun{registered: time.Now()}
	return append(steps, "CSINode registers "+id), nil
}

// nodeIDRun is the state of the new-node-id schedule.
type nodeIDRun struct{ registered time.Time }

// checkNewNodeID: the node agent recorded the cleanup of the volume fenced
// under the old ID only after the CSINode registered the new one, as the
// record says if it is still there (a second of slack for the clocks of
// the agent's write and the trial's).
func checkNewNodeID(ctx context.Context, t *Trial) []string {
	run, ok := t.extra.(*nodeIDRun)
	if !ok {
		return nil
	}
	fr, err := fencingv1alpha1.NewClient(t.c.Dynamic).Get(ctx, t.Victim)
	if err != nil {
		return nil // released and gone: the leftover checks say the rest
	}
	if e := fencerecord.Find(fr, framework.DriverName, t.Volume); e != nil && e.CleanedTime != nil && e.CleanedTime.Time.Before(run.registered.Add(-time.Second)) {
		return []string{fmt.Sprintf("S2: the fence of %s under node ID %s recorded cleaned at %s, before the CSINode registered the plugin's new ID (%s)",
			t.Volume, t.Victim, e.CleanedTime.Format("15:04:05.000"), run.registered.Format("15:04:05.000"))}
	}
	return nil
}
