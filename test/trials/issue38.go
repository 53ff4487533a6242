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
// covers, kube-apiserver restarted at the moment the pod's toleration of
// the dead node runs out, so that the taint manager's eviction is lost, a
// leader lost with a standby running since before the failure, a node back
// under another CSI node ID, and a driver registration left stale by an
// uninstalled sidecar, found anew by controllers restarted mid-failure.

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
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
	held, err := t.handedOverLeases(ctx)
	if err != nil {
		return nil, err
	}
	t.replaceLeader(run.standby)
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
	fence, err := t.firstFence(ctx, run.started.Add(-time.Minute))
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

// staleDriverName is the driver whose sidecar the stale-registration
// schedule uninstalls, its registration Lease left behind; oosDriverName is
// the driver there that fences on the out-of-service taint (and not by
// UNPUBLISH_FENCE). Both are added for the trial and removed after it.
const (
	staleDriverName = "trialstale.csi-fence.io"
	oosDriverName   = "trialoos.csi-fence.io"
)

// canFenceAnnotation is what a driver's registration says of its
// UNPUBLISH_FENCE (pkg/failover's registry).
const canFenceAnnotation = contract.Prefix + "/unpublish-fence"

// staleRun is the state of the stale-registration schedule.
type staleRun struct {
	stale, oos *framework.Driver
	// pods and pvs: the stale driver's pod and volume, then the
	// out-of-service driver's.
	pods, pvs []string
	// renewTime is the stale registration's renewTime as the uninstalled
	// sidecar left it (or as the trial aged it).
	renewTime time.Time
	mu        sync.Mutex
	// outOfService: when the trial saw the out-of-service taint on the
	// victim.
	outOfService []time.Time
}

// staleRegistrationBefore sets up a stale driver registration on the node
// that will fail, as an uninstalled sidecar leaves one: two drivers are
// added, X (SafeDetach, UNPUBLISH_FENCE: its registration says it fences
// storage) and Y (SafeDetach, no UNPUBLISH_FENCE, its CSIDriver annotated
// fences-on-out-of-service), each with a pod of its own on the victim and
// its volume attached there by its sidecar. Then both sidecars are
// uninstalled (SIGTERM): X's registration Lease stays, never renewed again
// (on a coin toss its renewTime is aged, as if the sidecar had gone long
// ago). Every controller still running watched X's registration being
// renewed, and may trust it for a TTL: each is killed and started again, so
// that the processes that fail the node over see the stale Lease for the
// first time. They must not count X as able to fence: not force-delete its
// pod, and not add the out-of-service taint for Y's pod (every attachment
// on the node would then be of a driver that fences one way or the other),
// which would let X's volume detach unfenced.
func staleRegistrationBefore(ctx context.Context, t *Trial) ([]string, error) {
	var defaults sidecar.FailoverOptions
	defaults.AddFlags(flag.NewFlagSet("defaults", flag.ContinueOnError))
	if !slices.Contains(defaults.Backends, fencingv1alpha1.BackendOutOfService) {
		return nil, fmt.Errorf("the schedule cannot reach its path: the default --fencing-backends (%s) has no %s", strings.Join(defaults.Backends, ","), fencingv1alpha1.BackendOutOfService)
	}
	run := &staleRun{}
	t.extra = run
	var err error
	t.procMu.Lock()
	run.stale, err = t.p.AddDriver(ctx, framework.DriverOptions{Name: staleDriverName, MockArgs: MockArgs})
	if err == nil {
		run.oos, err = t.p.AddDriver(ctx, framework.DriverOptions{Name: oosDriverName,
			MockArgs:    append(slices.Clone(MockArgs), "--disable-fence", "--fence-on-out-of-service", "--kubeconfig="+t.c.Kubeconfig),
			Annotations: map[string]string{contract.FencesOnOutOfServiceAnnotation: "true"}})
	}
	t.procMu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := t.watchOutOfService(run); err != nil {
		return nil, err
	}
	// The victim runs both drivers' volumes: its CSINode names them (the
	// sidecars need the node ID), their arrays know it.
	drivers := []*framework.Driver{run.stale, run.oos}
	csinodes := t.c.Client.StorageV1().CSINodes()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cn, err := csinodes.Get(ctx, t.Victim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, d := range drivers {
			if !slices.ContainsFunc(cn.Spec.Drivers, func(x storagev1.CSINodeDriver) bool { return x.Name == d.Name }) {
				cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d.Name, NodeID: t.Victim})
			}
		}
		_, err = csinodes.Update(ctx, cn, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	pods := t.c.Client.CoreV1().Pods(t.Env.NS)
	for i, d := range drivers {
		name := t.Env.App + []string{"-stale", "-oos"}[i]
		claim := "data-" + name
		if err := d.Array.RegisterNode(t.Victim, 0); err != nil {
			return nil, err
		}
		if err := scenario.CreateVolume(ctx, t.c, d, name, &corev1.ObjectReference{Namespace: t.Env.NS, Name: claim}); err != nil {
			return nil, err
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: t.Env.NS},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To(d.StorageClass),
				VolumeName:       name,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if _, err := t.c.Client.CoreV1().PersistentVolumeClaims(t.Env.NS).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		pod := nfsPod(t, name)
		pod.Spec.Volumes = []corev1.Volume{{Name: "share", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}}}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		run.pods, run.pvs = append(run.pods, name), append(run.pvs, name)
	}
	err = framework.WaitFor(ctx, 90*time.Second, "pods "+strings.Join(run.pods, ", ")+" running with their volumes attached to "+t.Victim, func(ctx context.Context) (bool, error) {
		for i, name := range run.pods {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
			va, err := t.Env.VA(ctx, run.pvs[i], t.Victim)
			if err != nil || va == nil || !va.Status.Attached {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	steps := []string{fmt.Sprintf("drivers %s (fences storage) and %s (fences on the out-of-service taint) added, a pod of each on %s with its volume attached", staleDriverName, oosDriverName, t.Victim)}
	leases := t.c.Client.CoordinationV1().Leases(sidecar.DefaultStormGuardNamespace)
	lease := contract.RegistrationLeaseName(staleDriverName)
	err = framework.WaitFor(ctx, 60*time.Second, "the registration of "+staleDriverName+" saying it fences", func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, lease, metav1.GetOptions{})
		return err == nil && l.Annotations[canFenceAnnotation] == "true" && l.Spec.RenewTime != nil, nil
	})
	if err != nil {
		return steps, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	// Uninstalled: the sidecars go (SIGTERM, as their pods are deleted),
	// what they wrote stays.
	t.procMu.Lock()
	run.stale.Attacher.Stop(30 * time.Second)
	run.oos.Attacher.Stop(30 * time.Second)
	t.procMu.Unlock()
	l, err := leases.Get(ctx, lease, metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil {
		return steps, fmt.Errorf("the schedule cannot reach its path: the registration Lease %s is gone with its sidecar (%v)", lease, err)
	}
	how := "as its sidecar left it"
	if t.Rng.Intn(2) == 0 {
		age := t.between(10*time.Minute, 48*time.Hour)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(l.Spec.RenewTime.Add(-age)))
		if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			return steps, err
		}
		how = fmt.Sprintf("aged by %s, as if its sidecar had gone long ago", age.Round(time.Minute))
	}
	run.renewTime = l.Spec.RenewTime.Time
	steps = append(steps, fmt.Sprintf("both sidecars uninstalled; the registration of %s left renewed at %s (%s)", staleDriverName, run.renewTime.Format("01-02 15:04:05.000"), how))
	// Every controller that saw the registration renewed is killed and
	// started again: the ones that fail the node over never saw it live.
	var restarted []string
	t.procMu.Lock()
	defer t.procMu.Unlock()
	for _, d := range t.p.Drivers {
		if d == run.stale || d == run.oos {
			continue
		}
		d.KillAttacher()
		if err := d.StartAttacher(ctx); err != nil {
			return steps, err
		}
		restarted = append(restarted, d.Name)
	}
	if err := t.staleLeaseIntact(ctx, run); err != nil {
		return steps, err
	}
	return append(steps, "kill -9 and restart the controllers of "+strings.Join(restarted, ", ")), nil
}

// staleLeaseIntact fails the trial as one that cannot reach its path when
// the stale registration is not as the uninstalled sidecar (or the trial)
// left it: gone, no longer saying it fences, or renewed.
func (t *Trial) staleLeaseIntact(ctx context.Context, run *staleRun) error {
	name := contract.RegistrationLeaseName(staleDriverName)
	l, err := t.c.Client.CoordinationV1().Leases(sidecar.DefaultStormGuardNamespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err != nil:
		return fmt.Errorf("the schedule cannot reach its path: the stale registration Lease %s: %w", name, err)
	case l.Annotations[canFenceAnnotation] != "true":
		return fmt.Errorf("the schedule cannot reach its path: the stale registration Lease %s no longer says %s=true", name, canFenceAnnotation)
	case l.Spec.RenewTime == nil || !l.Spec.RenewTime.Time.Equal(run.renewTime):
		return fmt.Errorf("the schedule cannot reach its path: the stale registration Lease %s was renewed (renewTime %v, left at %s)", name, l.Spec.RenewTime, run.renewTime.Format("01-02 15:04:05.000"))
	}
	return nil
}

// watchOutOfService records when the trial sees the out-of-service taint on
// the victim.
func (t *Trial) watchOutOfService(run *staleRun) error {
	lw := cache.NewListWatchFromClient(t.c.Client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", t.Victim))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	on := func(o interface{}) {
		if n, ok := o.(*corev1.Node); ok && framework.HasTaint(n, contract.OutOfServiceTaintKey, corev1.TaintEffectNoExecute) {
			run.mu.Lock()
			defer run.mu.Unlock()
			run.outOfService = append(run.outOfService, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o interface{}) { on(o) }}); err != nil {
		return err
	}
	go inf.Run(t.stop)
	if !cache.WaitForCacheSync(t.stop, inf.HasSynced) {
		return fmt.Errorf("node %s: cache not synced", t.Victim)
	}
	return nil
}

// staleRegistrationDuring kills the controller (kill -9) a random moment
// after NotReady and starts it again after a random delay, the stale Lease
// still there: the new process sees it for the first time mid-failure. It
// then waits until the pods of X and Y are Terminating and the owner of
// node-level state has decided about Y's: the out-of-service taint
// (broken), or a NoFencingBackend Event naming Y's volume (no backend can
// fence the node while X's attachment is on it).
func staleRegistrationDuring(ctx context.Context, t *Trial) ([]string, error) {
	run, ok := t.extra.(*staleRun)
	if !ok {
		return nil, fmt.Errorf("the schedule cannot reach its path: no stale registration set up before the failure")
	}
	d1, d2 := t.between(0, 4*time.Second), t.between(0, 3*time.Second)
	if err := sleep(ctx, d1); err != nil {
		return nil, err
	}
	if err := t.staleLeaseIntact(ctx, run); err != nil {
		return nil, err
	}
	t.procMu.Lock()
	t.p.KillAttacher()
	err := sleep(ctx, d2)
	if err == nil {
		err = t.p.StartAttacher(ctx)
	}
	t.procMu.Unlock()
	steps := []string{fmt.Sprintf("kill -9 controller at NotReady+%.2fs, the stale Lease there; restart it %.2fs later", d1.Seconds(), d2.Seconds())}
	if err != nil {
		return steps, err
	}
	pods := t.c.Client.CoreV1().Pods(t.Env.NS)
	err = framework.WaitFor(ctx, 60*time.Second, "pods "+strings.Join(run.pods, ", ")+" Terminating on "+t.Victim, func(ctx context.Context) (bool, error) {
		for _, name := range run.pods {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.DeletionTimestamp == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return steps, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	outcome := ""
	err = framework.WaitFor(ctx, 120*time.Second, "the owner's decision about pod "+run.pods[1], func(ctx context.Context) (bool, error) {
		run.mu.Lock()
		oos := len(run.outOfService) > 0
		run.mu.Unlock()
		if oos {
			outcome = "out-of-service taint on " + t.Victim
			return true, nil
		}
		list, err := t.c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.name", t.Victim), fields.OneTermEqualSelector("reason", "NoFencingBackend")).String()})
		if err != nil {
			return false, nil
		}
		for _, e := range list.Items {
			if strings.Contains(e.Message, run.pvs[1]) {
				outcome = "NoFencingBackend: " + e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return steps, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	return append(steps, outcome), nil
}

// staleRegistrationReturn runs once the node is back: the stale Lease must
// still be as it was left. Then both sidecars are installed again, so that
// the volumes of X and Y detach once their pods are gone, and both drivers
// are removed (dropStaleDrivers).
func staleRegistrationReturn(ctx context.Context, t *Trial) ([]string, error) {
	run, ok := t.extra.(*staleRun)
	if !ok {
		return nil, fmt.Errorf("the schedule cannot reach its path: no stale registration set up before the failure")
	}
	if err := t.staleLeaseIntact(ctx, run); err != nil {
		return nil, err
	}
	t.procMu.Lock()
	err := run.stale.StartAttacher(ctx)
	if err == nil {
		err = run.oos.StartAttacher(ctx)
	}
	t.procMu.Unlock()
	if err != nil {
		return nil, err
	}
	pods := t.c.Client.CoreV1().Pods(t.Env.NS)
	for _, name := range run.pods {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	err = framework.WaitFor(ctx, 90*time.Second, "the volumes of "+strings.Join(run.pods, ", ")+" detached from "+t.Victim, func(ctx context.Context) (bool, error) {
		for _, pv := range run.pvs {
			if va, err := t.Env.VA(ctx, pv, t.Victim); err != nil || va != nil {
				return false, nil
			}
		}
		return true, nil
	})
	steps := []string{"both sidecars installed again; the pods of " + staleDriverName + " and " + oosDriverName + " deleted and their volumes detached"}
	if err != nil {
		return steps, err
	}
	t.dropStaleDrivers(run)
	return steps, nil
}

// dropStaleDrivers removes the drivers of the stale-registration schedule
// from the product: later trials run without them (their mock controllers
// would log nothing, and fencedAlive wants a log).
func (t *Trial) dropStaleDrivers(run *staleRun) {
	t.procMu.Lock()
	defer t.procMu.Unlock()
	for _, d := range []*framework.Driver{run.stale, run.oos} {
		if d != nil && slices.Contains(t.p.Drivers, d) {
			t.p.RemoveDriver(d)
		}
	}
}

// checkStaleRegistration: the out-of-service taint never reached the
// victim, and the product deleted neither the pod of X nor that of Y: X's
// registration was stale, so nothing could fence its volume (S9, S1, S3).
// The drivers go with the trial, whatever happened.
func checkStaleRegistration(_ context.Context, t *Trial) []string {
	run, ok := t.extra.(*staleRun)
	if !ok {
		return nil
	}
	defer t.dropStaleDrivers(run)
	var out []string
	run.mu.Lock()
	if len(run.outOfService) > 0 {
		out = append(out, fmt.Sprintf("S9, S1: out-of-service taint on %s at %s with the volume of %s attached there, whose registration is stale (its sidecar uninstalled, renewed last at %s): that volume detaches unfenced",
			t.Victim, run.outOfService[0].Format("15:04:05.000"), staleDriverName, run.renewTime.Format("01-02 15:04:05.000")))
	}
	run.mu.Unlock()
	events, err := t.c.AuditEvents()
	if err != nil {
		return append(out, err.Error())
	}
	for _, e := range events {
		if e.User == productUser && e.Verb == "delete" && e.Resource == "pods" && e.Namespace == t.Env.NS && slices.Contains(run.pods, e.Name) && e.Code < 300 {
			out = append(out, fmt.Sprintf("S3: pod %s force-deleted by the product at %s: the stale registration of %s counted as a fence", e.Name, e.Time.Format("15:04:05.000"), staleDriverName))
		}
	}
	return out
}
