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

// The schedule of issue 38's first hole: the attacher's fence of a volume
// in flight while the failover, finding the node back, withdraws its own
// unsent fence of the same volume. The failover fences a node's volumes
// FenceConcurrency at a time, and reads the node's health again before any
// fence it starts more than a second after its last read: a node with one
// volume more than that, whose first fences are slow, gets that read for
// its last volume. The trial makes the first fences slow, has the attacher
// fence the last volume (the attach/detach controller's forced detach),
// brings the node back, and kills the controller once the failover has
// recorded its unsent fence, while the driver has applied the attacher's
// fence but not answered it. The record must still say the volume may be
// quarantined, so that the node agent cleans it before it is published
// there again (S8, S2 on the array).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// racingRun is the state of one trial of the racing-fences schedule.
type racingRun struct {
	set     string   // the StatefulSet of the many-volume pod
	handles []string // its volumes (also their PV names)
	since   time.Time
	clear   func()
}

// manyVolumes is one more than the failover fences at once.
const manyVolumes = fencerecord.FenceConcurrency + 1

// manyVolumePod puts a pod with manyVolumes volumes on the node that will
// fail (a StatefulSet of one replica bound to that node, which evicts it
// at once when the node is unreachable), and makes every fence slow from
// now on, so that the failover's last fence of the node waits for the
// first ones.
func manyVolumePod(ctx context.Context, t *Trial) ([]string, error) {
	store := faults.NewStore(t.p.StateDir)
	run := &racingRun{set: t.Env.App + "-many", clear: func() { _ = store.Clear() }}
	t.extra = run
	d := t.p.Driver
	var templates []corev1.PersistentVolumeClaim
	var mounts []corev1.VolumeMount
	for i := 0; i < manyVolumes; i++ {
		claim := fmt.Sprintf("m%d", i)
		handle := fmt.Sprintf("%s-%s", run.set, claim)
		ref := &corev1.ObjectReference{Namespace: t.Env.NS, Name: fmt.Sprintf("%s-%s-0", claim, run.set)}
		if err := scenario.CreateVolume(ctx, t.c, d, handle, ref); err != nil {
			return nil, err
		}
		run.handles = append(run.handles, handle)
		templates = append(templates, corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claim},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To(d.StorageClass),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		})
		mounts = append(mounts, corev1.VolumeMount{Name: claim, MountPath: "/" + claim})
	}
	labels := map[string]string{"app": run.set}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: run.set, Namespace: t.Env.NS},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "app", Image: "busybox", VolumeMounts: mounts}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{t.Victim}}},
						}}},
					}},
					Tolerations: []corev1.Toleration{
						{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(0))},
						{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(0))},
						{Key: framework.KwokLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					},
				},
			},
			VolumeClaimTemplates: templates,
		},
	}
	if _, err := t.c.Client.AppsV1().StatefulSets(t.Env.NS).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := t.waitManyAttached(ctx); err != nil {
		return nil, err
	}
	// Below the controller's --timeout of 5 s.
	latency := t.between(3500*time.Millisecond, 4500*time.Millisecond)
	if err := store.Set("ControllerUnpublishVolume", faults.Fault{Latency: latency}); err != nil {
		return nil, err
	}
	run.since = time.Now()
	return []string{fmt.Sprintf("pod %s-0 with %d volumes on %s; every fence takes %.2fs", run.set, manyVolumes, t.Victim, latency.Seconds())}, nil
}

// waitManyAttached waits until the many-volume pod runs on the victim with
// every volume attached there.
func (t *Trial) waitManyAttached(ctx context.Context) error {
	run := t.extra.(*racingRun)
	return framework.WaitFor(ctx, 120*time.Second, "pod "+run.set+"-0 running on "+t.Victim+" with its volumes attached", func(ctx context.Context) (bool, error) {
		p, err := t.c.Client.CoreV1().Pods(t.Env.NS).Get(ctx, run.set+"-0", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName != t.Victim || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			return false, nil
		}
		for _, h := range run.handles {
			va, err := t.Env.VA(ctx, h, t.Victim)
			if err != nil || va == nil || !va.Status.Attached {
				return false, err
			}
		}
		return true, nil
	})
}

// attacherBesideUnsentFence runs once the victim is NotReady: when the
// failover's first FenceConcurrency fences reached the driver, the
// volume left waiting (last) gets a fence from the attacher too (its
// VolumeAttachment deleted, as the attach/detach controller's forced
// detach does), which the driver applies at once and answers late. The
// node is powered on, so that the failover's read before its last fence
// finds it back and withdraws that fence unsent; once the record shows the
// withdrawal, the controller is killed (-9) before the attacher's answer
// arrives, and restarted after a random delay.
func attacherBesideUnsentFence(ctx context.Context, t *Trial) ([]string, error) {
	run, ok := t.extra.(*racingRun)
	if !ok {
		return nil, fmt.Errorf("the schedule cannot reach its path: no many-volume pod set up before the failure")
	}
	defer run.clear()
	var waiting []string
	err := framework.WaitFor(ctx, 60*time.Second, "the failover's first fences of "+run.set, func(context.Context) (bool, error) {
		rpcs, err := controllerRPCs(t.p.Driver.Mock.LogPath, run.since)
		if err != nil {
			return false, err
		}
		waiting = slices.DeleteFunc(slices.Clone(run.handles), func(h string) bool {
			return slices.ContainsFunc(rpcs, func(r controllerRPC) bool { return r.Fence && r.Volume == h && r.NodeID == t.Victim })
		})
		return len(waiting) <= manyVolumes-fencerecord.FenceConcurrency, nil
	})
	if err != nil {
		return nil, err
	}
	if len(waiting) == 0 {
		return []string{"race not reached: every fence was sent at once"}, nil
	}
	last := waiting[0]
	store := faults.NewStore(t.p.StateDir)
	if err := store.Set("ControllerUnpublishVolume", faults.Fault{AnswerDelay: 10 * time.Second, Count: 1}); err != nil {
		return nil, err
	}
	steps := []string{"the failover's fence of " + last + " waits; its VolumeAttachment deleted (forced detach), the driver applies the attacher's fence and answers 10s later"}
	va, err := t.Env.VA(ctx, last, t.Victim)
	if err != nil || va == nil {
		return steps, fmt.Errorf("the VolumeAttachment of %s on %s: %v", last, t.Victim, err)
	}
	if err := t.c.Client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		return steps, err
	}
	frs := fencingv1alpha1.NewClient(t.c.Dynamic)
	entry := func(ctx context.Context) (*fencingv1alpha1.FencedVolume, error) {
		fr, err := frs.Get(ctx, t.Victim)
		if err != nil {
			return nil, err
		}
		return fencerecord.Find(fr, framework.DriverName, last), nil
	}
	if err := framework.WaitFor(ctx, 5*time.Second, "two fences of "+last+" in flight", func(ctx context.Context) (bool, error) {
		e, err := entry(ctx)
		return err == nil && e != nil && len(e.FencesInFlight) == 2, nil
	}); err != nil {
		steps = append(steps, "race not reached: the attacher's fence was not beside the failover's")
		return steps, nil
	}
	// The node agent must not clean the volume before the failover
	// withdraws its fence: its cleanup is held until the controller runs
	// again.
	if _, err := holdCleanup(ctx, t); err != nil {
		return steps, err
	}
	defer func() { _ = releaseCleanup(t) }()
	// The watch for the withdrawal starts before the node is back.
	var (
		mu      sync.Mutex
		outcome string
	)
	watched := make(chan error, 1)
	go func() {
		watched <- framework.WaitFor(ctx, 20*time.Second, "the failover's fence of "+last+" withdrawn or answered", func(ctx context.Context) (bool, error) {
			e, err := entry(ctx)
			if err != nil && !apierrors.IsNotFound(err) {
				return false, nil
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e == nil:
				// S8: the attacher's fence was in flight, which the driver
				// applies on receipt and answers late: the record must say
				// the volume may be quarantined until the node agent
				// cleaned it.
				outcome = "entry removed"
				t.broken("S8: the FencingRequest of %s lost volume %s while the attacher's fence of it was in flight (applied by the driver, unanswered, not cleaned up)", t.Victim, last)
			case e.FencedTime != nil || e.FenceError != "":
				outcome = "answered first"
				return true, nil
			case len(e.FencesInFlight) < 2:
				outcome = "withdrawn"
			default:
				return false, nil
			}
			// Now, before the attacher's answer: kill -9.
			t.procMu.Lock()
			t.p.KillAttacher()
			t.procMu.Unlock()
			return true, nil
		})
	}()
	d := t.between(0, time.Second)
	if err := sleep(ctx, d); err != nil {
		return steps, err
	}
	steps = append(steps, fmt.Sprintf("power on %.2fs later", d.Seconds()))
	if err := t.Env.PowerOn(ctx, t.Victim); err != nil {
		return steps, err
	}
	if err := <-watched; err != nil {
		return steps, err
	}
	mu.Lock()
	o := outcome
	mu.Unlock()
	if o == "answered first" {
		return append(steps, "race not reached: the fence was answered before the failover withdrew its own"), nil
	}
	d2 := t.between(0, 1500*time.Millisecond)
	t.procMu.Lock()
	err = sleep(ctx, d2)
	if err == nil {
		err = t.p.StartAttacher(ctx)
	}
	t.procMu.Unlock()
	steps = append(steps, fmt.Sprintf("failover's fence %s; kill -9 controller before the attacher's answer, restart %.2fs later; the node agent's cleanup held until then", o, d2.Seconds()))
	if err != nil {
		return steps, err
	}
	return steps, releaseCleanup(t)
}

// manyVolumePodBack waits until the many-volume pod runs on its node again
// with every volume published there: the node agent must have cleaned each
// of them first, or the array records S2.
func manyVolumePodBack(ctx context.Context, t *Trial) ([]string, error) {
	if _, ok := t.extra.(*racingRun); !ok {
		return nil, nil
	}
	return []string{"pod with many volumes back on " + t.Victim}, t.waitManyAttached(ctx)
}

// removeManyVolumePod removes the many-volume pod and waits until its
// volumes are detached, so that the trial's teardown detaches nothing from
// a node it deletes.
func removeManyVolumePod(ctx context.Context, t *Trial) []string {
	run, ok := t.extra.(*racingRun)
	if !ok {
		return nil
	}
	run.clear()
	if err := t.c.Client.AppsV1().StatefulSets(t.Env.NS).Delete(ctx, run.set, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return []string{"removing " + run.set + " (harness): " + err.Error()}
	}
	err := framework.WaitFor(ctx, 90*time.Second, "the volumes of "+run.set+" detached", func(ctx context.Context) (bool, error) {
		for _, h := range run.handles {
			va, err := t.Env.VA(ctx, h, t.Victim)
			if err != nil || va != nil {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return []string{"removing " + run.set + " (harness): " + err.Error()}
	}
	return nil
}
