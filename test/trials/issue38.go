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
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	"github.com/csi-fence/fence-attacher/pkg/contract"
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
