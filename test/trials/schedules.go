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

// The schedules of issue 19's proof: a Node deleted and registered again
// mid-fence, a rolling update of the controller mid-fence, a pod whose
// storage has no attachment, a kubelet whose clock runs behind, and a node
// that flaps during a slow fence. Each reaches a path the older schedules
// did not; their own invariants are checked by Schedule.Check.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// slowFence makes the next ControllerUnpublishVolume take a random
// latency in [lo, hi) (below the controller's --timeout of 5 s), and waits
// until the fence of the trial's volume is in flight: its intent recorded,
// its outcome not yet. The returned func clears the fault.
func (t *Trial) slowFence(ctx context.Context, lo, hi time.Duration) (time.Duration, func(), error) {
	latency, clear, err := t.slowFenceNoWait(lo, hi)
	if err != nil {
		return 0, nil, err
	}
	if err := t.waitFenceInFlight(ctx); err != nil {
		clear()
		return 0, nil, err
	}
	return latency, clear, nil
}

// waitFenceInFlight waits until the fence of the trial's volume is in
// flight: its intent recorded, its outcome not yet. A fence that is over
// already is an error that says so: the schedule's fault came too late.
func (t *Trial) waitFenceInFlight(ctx context.Context) error {
	frs := fencingv1alpha1.NewClient(t.c.Dynamic)
	return framework.WaitFor(ctx, 120*time.Second, "the fence of "+t.Volume+" in flight", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, t.Victim)
		if err != nil {
			return false, nil
		}
		e := fencerecord.Find(fr, framework.DriverName, t.Volume)
		if e != nil && e.FencedTime != nil {
			return false, fmt.Errorf("the fence of %s was over before the trial saw it in flight", t.Volume)
		}
		return e != nil && e.StartedTime != nil, nil
	})
}

// broken records an invariant a schedule saw broken while it ran.
func (t *Trial) broken(format string, args ...interface{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.found = append(t.found, fmt.Sprintf(format, args...))
}

// nodeDeletedAndReregistered deletes the Node object at a random moment of
// a slow fence, as an admin or a cloud provider's node controller does with
// a machine it believes gone (the kubelet's CSINode goes with it), and after
// a random delay the machine boots and its kubelet registers the Node
// again. The fence record must survive, nothing may fence or force-delete
// on the node once it is back, and its cleanup must complete.
func nodeDeletedAndReregistered(ctx context.Context, t *Trial) ([]string, error) {
	latency, clear, err := t.slowFence(ctx, 2*time.Second, 4500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer clear()
	d1 := t.between(0, latency)
	steps := []string{fmt.Sprintf("fence latency %.2fs", latency.Seconds())}
	if err := sleep(ctx, d1); err != nil {
		return steps, err
	}
	more, err := t.reregisterVictim(ctx, fmt.Sprintf("%.2fs into the fence", d1.Seconds()), t.recordSurvives)
	return append(steps, more...), err
}

// reregisterVictim deletes the victim's Node and CSINode (when says when),
// checks with survives that its record kept what it must, registers the
// Node again a random moment later (up to 3 s) with its group label and the
// CSINode of its drivers, checks again, and powers the node on.
func (t *Trial) reregisterVictim(ctx context.Context, when string, survives func(ctx context.Context, when string)) ([]string, error) {
	d2 := t.between(0, 3*time.Second)
	old, err := t.c.Client.CoreV1().Nodes().Get(ctx, t.Victim, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if err := t.c.Client.CoreV1().Nodes().Delete(ctx, t.Victim, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	if err := t.c.Client.StorageV1().CSINodes().Delete(ctx, t.Victim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	steps := []string{"Node deleted " + when}
	survives(ctx, "after the Node was deleted")
	if err := sleep(ctx, d2); err != nil {
		return steps, err
	}
	var drivers []string
	for _, pl := range t.p.Nodes[t.Victim].Plugins {
		drivers = append(drivers, pl.Driver.Name)
	}
	if err := t.c.CreateNode(ctx, t.Victim, drivers...); err != nil {
		return steps, err
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, scenario.GroupLabel, old.Labels[scenario.GroupLabel]))
	if _, err := t.c.Client.CoreV1().Nodes().Patch(ctx, t.Victim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return steps, err
	}
	steps = append(steps, fmt.Sprintf("Node registered again %.2fs later", d2.Seconds()))
	if err := t.p.Node(t.Victim).PowerOn(ctx); err != nil {
		return steps, err
	}
	survives(ctx, "once the Node was back")
	return steps, nil
}

// recordSurvives checks that the victim's FencingRequest still holds the
// fence of the trial's volume (S6, S8: deleting a Node loses no record).
func (t *Trial) recordSurvives(ctx context.Context, when string) {
	fr, err := fencingv1alpha1.NewClient(t.c.Dynamic).Get(ctx, t.Victim)
	switch {
	case err != nil:
		t.broken("S8: the FencingRequest of %s %s: %v", t.Victim, when, err)
	case fencerecord.Find(fr, framework.DriverName, t.Volume) == nil:
		t.broken("S8: the FencingRequest of %s lost the fence of %s %s", t.Victim, t.Volume, when)
	}
}

// rollingUpdate starts a second replica of the controller, and terminates
// the leader (SIGTERM, as a rolling update does) while a slow fence is in
// flight. The leader finishes its work and releases its Leases; the stall
// is how long after the SIGTERM every Lease the leader held has a new holder
// (Result.Stall): the standby, or for node-level fencing state another
// driver's sidecar.
func rollingUpdate(ctx context.Context, t *Trial) ([]string, error) {
	t.procMu.Lock()
	standby, _, err := t.p.StartStandbyAttacher(ctx)
	t.procMu.Unlock()
	if err != nil {
		return nil, err
	}
	latency, clear, err := t.slowFence(ctx, 2*time.Second, 4500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer clear()
	d := t.between(0, latency/2)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	held, err := t.handedOverLeases(ctx)
	if err != nil {
		return nil, err
	}
	sigterm := time.Now()
	exited := t.replaceLeader(standby)
	steps := []string{fmt.Sprintf("standby started; leader terminated (SIGTERM) %.2fs into a %.2fs fence, exited after %.2fs", d.Seconds(), latency.Seconds(), exited.Seconds())}
	if err := t.waitLeasesTakenOver(ctx, held, "another replica holding the leader's Leases"); err != nil {
		return steps, err
	}
	t.stall = time.Since(sigterm)
	now, err := t.leaderLeases(ctx)
	if err != nil {
		return steps, err
	}
	var names []string
	for name := range held {
		names = append(names, name+" by "+now[name])
	}
	slices.Sort(names)
	return append(steps, fmt.Sprintf("%s held %.2fs after the SIGTERM", strings.Join(names, ", "), t.stall.Seconds())), nil
}

// waitLeasesTakenOver waits until every Lease of held (leaderLeases) is
// held by another holder than the one held names.
func (t *Trial) waitLeasesTakenOver(ctx context.Context, held map[string]string, what string) error {
	return framework.WaitFor(ctx, 90*time.Second, what, func(ctx context.Context) (bool, error) {
		now, err := t.leaderLeases(ctx)
		if err != nil {
			return false, nil
		}
		for name, holder := range held {
			if now[name] == "" || now[name] == holder {
				return false, nil
			}
		}
		return true, nil
	})
}

// replaceLeader stops the leader's process (SIGTERM, as a rolling update
// does) and makes standby the trial's controller, under procMu so that
// the supervisor never restarts either meanwhile. It returns how long the
// leader took to exit.
func (t *Trial) replaceLeader(standby *framework.Process) time.Duration {
	t.procMu.Lock()
	defer t.procMu.Unlock()
	sigterm := time.Now()
	t.p.Attacher.Stop(30 * time.Second)
	exited := time.Since(sigterm)
	t.p.Attacher = standby
	return exited
}

// handedOverLeases returns the Leases the first driver's leader hands
// over when it stops (leaderLeases): the node-fencing Lease only if it
// holds it, since a second driver's sidecar may (and may take it over now).
func (t *Trial) handedOverLeases(ctx context.Context) (map[string]string, error) {
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
	return held, nil
}

// firstFence waits for the first fence of the trial's volume from the
// victim that the mock received after since, and returns when it came.
// The volume is the trial's own: any fence of it from the victim is this
// failover's.
func (t *Trial) firstFence(ctx context.Context, since time.Time) (time.Time, error) {
	var fence time.Time
	err := framework.WaitFor(ctx, 60*time.Second, "the fence of "+t.Volume+" from "+t.Victim, func(context.Context) (bool, error) {
		rpcs, err := controllerRPCs(t.p.Driver.Mock.LogPath, since)
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
	return fence, err
}

// leaderLeases returns the holders of the Leases the first driver's
// controller may hold: external-attacher's leader election (named after
// the driver) and the owner of node-level fencing state (whoever holds
// it), by namespace/name.
func (t *Trial) leaderLeases(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	// By its exact name: a second driver's Lease may end alike (on real
	// nodes, t2-fence.csi-fence.io's).
	name := contract.AttacherLeaseName(framework.DriverName)
	list, err := t.c.Client.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, l := range list.Items {
		if l.Name == name {
			out[l.Namespace+"/"+l.Name] = ptr.Deref(l.Spec.HolderIdentity, "")
		}
	}
	owner, err := t.c.Client.CoordinationV1().Leases(sidecar.DefaultStormGuardNamespace).Get(ctx, contract.NodeFencingLeaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		out[owner.Namespace+"/"+owner.Name] = ptr.Deref(owner.Spec.HolderIdentity, "")
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no leader-election Lease of %s", framework.DriverName)
	}
	return out, nil
}

// unattachedPod is the pod of the unattached-storage schedule.
type unattachedPod struct {
	name string
	mu   sync.Mutex
	gone time.Time // when the trial saw it deleted
}

// unattachedStorage puts a second pod on the node that will fail, with an
// inline NFS volume pointing nowhere (KWOK runs it all the same): storage
// that has no VolumeAttachment, which no storage fence covers. The pod
// must never be force-deleted by the product and FencingComplete never set
// on the node while it is there; the replica beside it still fails over.
func unattachedStorage(ctx context.Context, t *Trial) ([]string, error) {
	u := &unattachedPod{name: t.Env.App + "-nfs"}
	t.extra = u
	pod := nfsPod(t, u.name)
	pods := t.c.Client.CoreV1().Pods(t.Env.NS)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := t.watchGone(u, t.stop); err != nil {
		return nil, err
	}
	err := framework.WaitFor(ctx, 30*time.Second, "pod "+u.name+" running", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, u.name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	return []string{"pod " + u.name + " with an inline NFS volume on " + t.Victim}, err
}

// nfsPod is a pod on the victim with an inline NFS volume pointing nowhere
// (KWOK runs it all the same), tolerating the node's failure for 2 s as the
// replicas do.
func nfsPod(t *Trial, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.Env.NS},
		Spec: corev1.PodSpec{
			NodeName:   t.Victim,
			Containers: []corev1.Container{{Name: "app", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "share", MountPath: "/share"}}}},
			Volumes: []corev1.Volume{{Name: "share", VolumeSource: corev1.VolumeSource{
				NFS: &corev1.NFSVolumeSource{Server: "192.0.2.1", Path: "/export/" + name}, // TEST-NET-1: nowhere
			}}},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(2))},
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(2))},
				{Key: framework.KwokLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			},
		},
	}
}

// watchGone records when the trial sees u's pod deleted.
func (t *Trial) watchGone(u *unattachedPod, stop <-chan struct{}) error {
	lw := cache.NewListWatchFromClient(t.c.Client.CoreV1().RESTClient(), "pods", t.Env.NS, fields.OneTermEqualSelector("metadata.name", u.name))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(interface{}) {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.gone.IsZero() {
			u.gone = time.Now()
		}
	}}); err != nil {
		return err
	}
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		return fmt.Errorf("pod %s: cache not synced", u.name)
	}
	return nil
}

// checkUnattached: the pod with unattached storage was not force-deleted
// by the product (S3), FencingComplete was not set on its node while it was
// there (S9), and the product said why it stayed (a FailoverBlocked Event).
func checkUnattached(ctx context.Context, t *Trial) []string {
	u, ok := t.extra.(*unattachedPod)
	if !ok {
		return nil
	}
	var out []string
	events, err := t.c.AuditEvents()
	if err != nil {
		return []string{err.Error()}
	}
	for _, e := range events {
		if e.User == productUser && e.Verb == "delete" && e.Resource == "pods" && e.Namespace == t.Env.NS && e.Name == u.name && e.Code < 300 {
			out = append(out, fmt.Sprintf("S3: pod %s, whose NFS volume no fence covers, force-deleted by the product at %s", u.name, e.Time.Format("15:04:05.000")))
		}
	}
	u.mu.Lock()
	gone := u.gone
	u.mu.Unlock()
	t.mu.Lock()
	for _, at := range t.fencingComplete[t.Victim] {
		if gone.IsZero() || at.Before(gone) {
			out = append(out, fmt.Sprintf("S9: FencingComplete on %s at %s while pod %s with unattached storage was on it", t.Victim, at.Format("15:04:05.000"), u.name))
			break
		}
	}
	t.mu.Unlock()
	list, err := t.c.Client.CoreV1().Events(t.Env.NS).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.name", u.name), fields.OneTermEqualSelector("reason", "FailoverBlocked")).String()})
	switch {
	case err != nil:
		out = append(out, err.Error())
	case len(list.Items) == 0:
		out = append(out, fmt.Sprintf("no FailoverBlocked Event on pod %s: its owner is not told why it stays Terminating", u.name))
	}
	return out
}

// clockSkew is how far behind the skewed kubelet's clock runs.
const clockSkew = time.Hour

// skewedKubelet brings the partitioned node back at a random moment after
// NotReady (before, during or after a slow fence) with a kubelet whose
// clock runs an hour behind: KWOK's heartbeat stays off and the trial
// renews the node's Lease itself, every quarter of its duration, with
// renewTimes an hour in the past, and (on a coin toss) reports the node
// Ready with heartbeat times as old. The renewals are the kubelet talking:
// nothing may be fenced or force-deleted once they resumed (the checks of
// every trial, from the Lease's renewals as the trial saw them). After a
// lease duration and more, the node is handed back to KWOK.
func skewedKubelet(ctx context.Context, t *Trial) ([]string, error) {
	latency, clear, err := t.slowFenceNoWait(2*time.Second, 4500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer clear()
	d := t.between(0, 6*time.Second)
	report := t.Rng.Intn(2) == 0
	dReady := t.between(0, 3*time.Second)
	steps := []string{fmt.Sprintf("fence latency %.2fs", latency.Seconds())}
	if err := sleep(ctx, d); err != nil {
		return steps, err
	}
	hctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	if err := t.renewSkewed(ctx); err != nil {
		stop()
		return steps, err
	}
	go func() { done <- t.heartbeatSkewed(hctx) }()
	steps = append(steps, fmt.Sprintf("kubelet back at NotReady+%.2fs with its clock %s behind (Lease renewals)", d.Seconds(), clockSkew))
	hold := leaseDuration + 5*time.Second
	if report {
		if err := sleep(ctx, dReady); err != nil {
			stop()
			return steps, err
		}
		if err := t.reportReadySkewed(ctx); err != nil {
			stop()
			return steps, err
		}
		steps = append(steps, fmt.Sprintf("reports Ready %.2fs later", dReady.Seconds()))
		hold -= dReady
	}
	err = sleep(ctx, hold)
	stop()
	if herr := <-done; err == nil {
		err = herr
	}
	if err != nil {
		return steps, err
	}
	steps = append(steps, "node handed back to KWOK")
	return steps, t.Env.PowerOn(ctx, t.Victim)
}

// slowFenceNoWait is slowFence without waiting for the fence.
func (t *Trial) slowFenceNoWait(lo, hi time.Duration) (time.Duration, func(), error) {
	latency := t.between(lo, hi)
	store := faults.NewStore(t.stateDir())
	if err := store.Set("ControllerUnpublishVolume", faults.Fault{Latency: latency, Count: 1}); err != nil {
		return 0, nil, err
	}
	return latency, func() { _ = store.Clear() }, nil
}

// heartbeatSkewed renews the victim's Lease every quarter of its duration
// until ctx ends, as the skewed kubelet does.
func (t *Trial) heartbeatSkewed(ctx context.Context) error {
	tick := time.NewTicker(leaseDuration / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := t.renewSkewed(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// renewSkewed renews the victim's heartbeat Lease with a renewTime on the
// skewed clock.
func (t *Trial) renewSkewed(ctx context.Context) error {
	leases := t.c.Client.CoordinationV1().Leases(nodehealth.LeaseNamespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, t.Victim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: t.Victim, Namespace: nodehealth.LeaseNamespace},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(t.Victim), LeaseDurationSeconds: ptr.To(int32(leaseDuration / time.Second))}}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-clockSkew)}
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-clockSkew)}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
}

// reportReadySkewed posts the victim's Ready condition True, as its kubelet
// does once it talks again, with heartbeat and transition times on its
// skewed clock.
func (t *Trial) reportReadySkewed(ctx context.Context) error {
	nodes := t.c.Client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, t.Victim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		then := metav1.NewTime(time.Now().Add(-clockSkew))
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			if c.Type == corev1.NodeReady {
				c.Status, c.Reason, c.Message = corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"
				c.LastHeartbeatTime, c.LastTransitionTime = then, then
			}
		}
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// flapDuringSlowFence powers the node on while a slow fence is in flight,
// as return-mid-fence does, and powers it off again a random moment after
// it is Ready: a node that flaps. The second failure fails over anew.
func flapDuringSlowFence(ctx context.Context, t *Trial) ([]string, error) {
	latency, clear, err := t.slowFence(ctx, 2500*time.Millisecond, 4500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer clear()
	steps := []string{fmt.Sprintf("fence latency %.2fs", latency.Seconds()), "power on mid-fence"}
	if err := t.Env.PowerOn(ctx, t.Victim); err != nil {
		return steps, err
	}
	d := t.between(0, 2*time.Second)
	if err := sleep(ctx, d); err != nil {
		return steps, err
	}
	steps = append(steps, fmt.Sprintf("power-off again %.2fs after Ready", d.Seconds()))
	if err := t.Env.PowerOff(ctx, t.Victim); err != nil {
		return steps, err
	}
	return steps, t.c.WaitNodeReady(ctx, t.Victim, false, 60*time.Second)
}
