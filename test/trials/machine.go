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

// The schedules of issue 38's item 2: a node fenced by the machine backend
// (its Cluster API Machine deleted, the fence confirmed only once the
// infrastructure provider reports the instance deleted) whose InfraMachine,
// at a random moment of that fence, vanishes (its finalizer stripped, the
// object deleted, the instance left running and writing) or is moved (as a
// clusterctl move or a pivot leaves it: recreated under its name with
// another UID, or the Machine's infrastructureRef edited to point
// elsewhere). Nothing may move while the orphaned instance can still run.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/machinefence"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// machineArgs: the controller fences nodes through their Machines only;
// with the storage backend off, no storage fence frees the pod, so the
// machine fence is the one path to a failover.
var machineArgs = []string{"--fencing-backends=" + fencingv1alpha1.BackendMachine}

// instanceShutdown is how long the test provider takes to stop an instance
// once its InfraMachine is deleted through it (its workload writing
// meanwhile).
const instanceShutdown = 3 * time.Second

// preTerminateHook on the victim's Machine holds Cluster API's deletion of
// its InfraMachine (Cluster API's pre-terminate lifecycle hook) until the
// trial's fault: the InfraMachine is not being deleted through its
// provider before the fault, so no read can have seen it so, whenever the
// product's fence is at that moment.
const preTerminateHook = "pre-terminate.delete.hook.machine.cluster.x-k8s.io/fence-trials"

// clusterAPI is the run's Cluster API: its core manager and the test
// infrastructure provider, started by the first machine schedule and kept
// for the run (the cluster stops the manager; the provider lives in this
// process).
var clusterAPI struct {
	mu    sync.Mutex
	capi  *framework.ClusterAPI
	infra *framework.InfraProvider
}

// startClusterAPI starts Cluster API on first use, with the machine
// backend's RBAC as shipped plus get on the test provider's InfraMachines,
// before the controller restarts with machineArgs (its machine backend is
// off if Machines are not served when it starts).
func startClusterAPI(ctx context.Context, t *Trial) ([]string, error) {
	clusterAPI.mu.Lock()
	defer clusterAPI.mu.Unlock()
	if clusterAPI.capi != nil {
		return nil, nil
	}
	begin := time.Now()
	capi, err := t.c.StartClusterAPI(ctx)
	if err != nil {
		return nil, err
	}
	if err := t.c.ApplyManifest(ctx, "deploy/kubernetes/machine-fencing/rbac-machine.yaml", ""); err != nil && !apierrors.IsAlreadyExists(err) {
		capi.Stop()
		return nil, err
	}
	const name = "csi-fence-attacher-machine-fencing-trials"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{framework.InfraGroup}, Resources: []string{framework.InfraMachineResource.Resource}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "csi-fence-attacher", Namespace: "default"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}}
	if _, err := t.c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		capi.Stop()
		return nil, err
	}
	if _, err := t.c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		capi.Stop()
		return nil, err
	}
	infra, err := t.c.StartInfraProvider(ctx, framework.InfraOptions{StopInstance: t.p.StopInstance, ShutdownTime: instanceShutdown})
	if err != nil {
		capi.Stop()
		return nil, err
	}
	clusterAPI.capi, clusterAPI.infra = capi, infra
	return []string{fmt.Sprintf("Cluster API started for the run (%.1fs)", time.Since(begin).Seconds())}, nil
}

// machineRun is the state of a machine schedule's trial.
type machineRun struct {
	wc      *framework.WorkloadCluster
	machine string
	// infra is the name of the victim's InfraMachine.
	infra string
	// fault says what the trial did, and when.
	fault   string
	faultAt time.Time
	// ended: when the trial ended the orphaned instance (powered the node
	// on, or healed its partition); zero if the failover went on without.
	ended time.Time
}

// machineBefore gives the victim a Machine of a Cluster of its own (its
// InfraMachine of the test provider, named after the node), waits until
// Cluster API has found the node, and holds the InfraMachine's deletion
// with a pre-terminate hook on the Machine.
func machineBefore(ctx context.Context, t *Trial) ([]string, error) {
	clusterAPI.mu.Lock()
	capi := clusterAPI.capi
	clusterAPI.mu.Unlock()
	if capi == nil {
		return nil, fmt.Errorf("the schedule cannot reach its path: Cluster API is not running")
	}
	ns := t.Env.App + "-capi"
	wc, err := capi.CreateWorkloadCluster(ctx, ns, ns, []string{t.Victim})
	if err != nil {
		return nil, err
	}
	run := &machineRun{wc: wc, machine: wc.Machines[t.Victim], infra: t.Victim}
	t.extra = run
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"fence-trials"}}}`, preTerminateHook)
	if _, err := t.machines(run).Patch(ctx, run.machine, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("Machine %s/%s of %s found by Cluster API; its InfraMachine's deletion held by a pre-terminate hook", ns, run.machine, t.Victim)}, nil
}

// capiClusterResource holds Cluster API's Clusters.
var capiClusterResource = schema.GroupVersionResource{Group: machinefence.Group, Version: "v1beta2", Resource: "clusters"}

// machines are the Machines of the trial's workload cluster.
func (t *Trial) machines(run *machineRun) dynamic.ResourceInterface {
	return t.c.Dynamic.Resource(machinefence.MachineResource).Namespace(run.wc.Namespace)
}

// infraMachines are its InfraMachines.
func (t *Trial) infraMachines(run *machineRun) dynamic.ResourceInterface {
	return t.c.Dynamic.Resource(framework.InfraMachineResource).Namespace(run.wc.Namespace)
}

// infraVanishes strips the finalizer of the victim's InfraMachine and
// deletes it at a random moment of the fence: its instance runs on,
// partitioned and writing, and nothing reported it deleted.
func infraVanishes(ctx context.Context, t *Trial) ([]string, error) {
	return machineFault(ctx, t, "vanishes")
}

// infraMoved moves the victim's InfraMachine at a random moment of the
// fence, one of two ways: as clusterctl move does (marked delete-for-move,
// its finalizer stripped, deleted) and recreated under its name, as a
// pivot back leaves it (another UID); or copied under another name to
// which the Machine's infrastructureRef is edited, the original left in
// place.
func infraMoved(ctx context.Context, t *Trial) ([]string, error) {
	return machineFault(ctx, t, []string{"recreated", "ref-edited"}[t.Rng.Intn(2)])
}

// machineFault does the fault kind to the victim's InfraMachine 0 to 10 s
// after NotReady (before the product located the Machine, or while the
// hook holds its deletion), removes the hook, and waits until the
// product's fence shows what it made of it: refused, unconfirmable, or
// confirmed (only legitimate once the provider reported the instance
// deleted: checkMachineFence). Unless confirmed, the orphaned instance is
// left to run (and the failover watched) a random 10 to 15 s, longer than
// the failover's resync, and then the node comes back: its heartbeat,
// kubelet and node agent start again (a partition healed, or a new
// instance under its name), and the pod fails over through it.
func machineFault(ctx context.Context, t *Trial, kind string) ([]string, error) {
	run, ok := t.extra.(*machineRun)
	if !ok {
		return nil, fmt.Errorf("the schedule cannot reach its path: no Machine set up before the failure")
	}
	d := t.between(0, 10*time.Second)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	phase := t.machineFencePhase(ctx)
	var what string
	var err error
	switch kind {
	case "vanishes":
		what = "InfraMachine " + run.infra + " deleted with its finalizer stripped"
		_, err = t.removeInfra(ctx, run, run.infra, false)
	case "recreated":
		what = "InfraMachine " + run.infra + " removed for a move (delete-for-move, finalizer stripped) and recreated under its name"
		var old *unstructured.Unstructured
		if old, err = t.removeInfra(ctx, run, run.infra, true); err == nil {
			var created *unstructured.Unstructured
			created, err = t.infraMachines(run).Create(ctx, copyInfra(old, run.infra, true), metav1.CreateOptions{})
			if err == nil {
				what += fmt.Sprintf(" (UID %s, was %s)", created.GetUID(), old.GetUID())
			}
		}
	case "ref-edited":
		moved := run.infra + "-moved"
		what = "the Machine's infrastructureRef edited to " + moved + ", a copy without an instance; " + run.infra + " left in place"
		var old *unstructured.Unstructured
		if old, err = t.infraMachines(run).Get(ctx, run.infra, metav1.GetOptions{}); err == nil {
			if _, err = t.infraMachines(run).Create(ctx, copyInfra(old, moved, false), metav1.CreateOptions{}); err == nil {
				patch := fmt.Sprintf(`{"spec":{"infrastructureRef":{"name":%q}}}`, moved)
				_, err = t.machines(run).Patch(ctx, run.machine, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			}
		}
	}
	run.fault, run.faultAt = what, time.Now()
	steps := []string{fmt.Sprintf("%s at NotReady+%.2fs (%s)", what, d.Seconds(), phase)}
	if err != nil {
		return steps, err
	}
	// Whoever held the hook is done: Cluster API goes on with the
	// Machine's deletion, if it was asked, whatever its ref names now.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, preTerminateHook)
	if _, err := t.machines(run).Patch(ctx, run.machine, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return steps, err
	}
	outcome, confirmed, err := t.machineOutcome(ctx)
	steps = append(steps, outcome)
	if err != nil || confirmed {
		return steps, err
	}
	hold := t.between(10*time.Second, 15*time.Second)
	if err := sleep(ctx, hold); err != nil {
		return steps, err
	}
	how := "partition healed"
	if _, ok := clusterAPI.infra.Released(t.Victim); ok {
		how = "powered on (its instance was deleted by the provider meanwhile)"
	}
	run.ended = time.Now()
	steps = append(steps, fmt.Sprintf("%s %.2fs later, nothing having moved", how, hold.Seconds()))
	return steps, t.Env.PowerOn(ctx, t.Victim)
}

// removeInfra strips the finalizers of InfraMachine name (and marks it
// delete-for-move, for a move) and deletes it, that version only: a
// provider that put its finalizer back meanwhile has it stripped again.
// It returns the object as it was. An InfraMachine being deleted already
// means the hook did not hold: the schedule cannot reach its path.
func (t *Trial) removeInfra(ctx context.Context, run *machineRun, name string, move bool) (*unstructured.Unstructured, error) {
	res := t.infraMachines(run)
	var orig *unstructured.Unstructured
	err := framework.WaitFor(ctx, 10*time.Second, "InfraMachine "+name+" removed with its finalizer stripped", func(ctx context.Context) (bool, error) {
		m, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if m.GetDeletionTimestamp() != nil {
			return false, fmt.Errorf("the schedule cannot reach its path: InfraMachine %s is being deleted already (the pre-terminate hook did not hold)", name)
		}
		if orig == nil {
			orig = m.DeepCopy()
		}
		m.SetFinalizers(nil)
		if move {
			ann := m.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[machinefence.DeleteForMoveAnnotation] = ""
			m.SetAnnotations(ann)
		}
		if m, err = res.Update(ctx, m, metav1.UpdateOptions{}); err != nil {
			return false, nil
		}
		rv := m.GetResourceVersion()
		err = res.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		return err == nil || apierrors.IsNotFound(err), nil
	})
	return orig, err
}

// copyInfra is a copy of the InfraMachine old to create under name: its
// labels, owners and spec, and an instance only if instance (spec.nodeName
// and providerID kept).
func copyInfra(old *unstructured.Unstructured, name string, instance bool) *unstructured.Unstructured {
	spec, _, _ := unstructured.NestedMap(old.Object, "spec")
	if !instance {
		spec = map[string]interface{}{}
	}
	u := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": old.GetAPIVersion(), "kind": old.GetKind(), "spec": spec}}
	u.SetName(name)
	u.SetNamespace(old.GetNamespace())
	u.SetLabels(old.GetLabels())
	u.SetOwnerReferences(old.GetOwnerReferences())
	return u
}

// machineFencePhase says where the product's machine fence of the victim
// was, from its record.
func (t *Trial) machineFencePhase(ctx context.Context) string {
	fr, err := fencingv1alpha1.NewClient(t.c.Dynamic).Get(ctx, t.Victim)
	if err != nil {
		return "no record yet"
	}
	m := fencerecord.MachineIntentRecorded(fr)
	switch {
	case m == nil:
		return "no machine fence recorded yet"
	case m.DeletionStartedBy == "":
		return "the machine fence's intent recorded, the Machine not deleted yet"
	default:
		return "the Machine's deletion asked (" + m.DeletionStartedBy + ")"
	}
}

// machineOutcome waits until the product's machine fence of the victim
// shows what it made of the fault: Locate refused the Machine (a
// MachineFenceFailed Event), the fence is unconfirmable (the record says
// so), or it is confirmed.
func (t *Trial) machineOutcome(ctx context.Context) (outcome string, confirmed bool, err error) {
	frs := fencingv1alpha1.NewClient(t.c.Dynamic)
	err = framework.WaitFor(ctx, 120*time.Second, "the machine fence of "+t.Victim+" refused, unconfirmable or confirmed", func(ctx context.Context) (bool, error) {
		if fr, err := frs.Get(ctx, t.Victim); err == nil && fr.Status.NodeFence != nil && fr.Status.NodeFence.Backend == fencingv1alpha1.BackendMachine {
			nf := fr.Status.NodeFence
			switch {
			case nf.ConfirmedTime != nil:
				outcome, confirmed = "machine fence confirmed: "+nf.Output, true
				return true, nil
			case strings.HasPrefix(nf.Output, "not confirmable"):
				outcome = "machine fence unconfirmable: " + nf.Output
				return true, nil
			}
		}
		list, err := t.c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.name", t.Victim), fields.OneTermEqualSelector("reason", "MachineFenceFailed")).String()})
		if err != nil {
			return false, nil
		}
		for _, e := range list.Items {
			if strings.Contains(e.Message, "not fencing through it") {
				outcome = "machine fence refused: " + e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", false, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	return outcome, confirmed, nil
}

// checkMachineFence: nothing of the failover happened while the victim's
// orphaned instance could still run, that is before the provider reported
// it deleted, the trial ended it or the node was seen Ready again
// (whichever came first): no
// FencingComplete, no out-of-service taint, no machine fence recorded
// confirmed, the pod not force-deleted, its attachment not removed, its
// volume not attached elsewhere (S1, S3, S9). Then the workload cluster's
// objects go, without deleting any instance.
func checkMachineFence(ctx context.Context, t *Trial) []string {
	run, ok := t.extra.(*machineRun)
	if !ok || run.faultAt.IsZero() {
		return nil
	}
	defer t.removeWorkloadCluster(run)
	until, why := run.ended, "the trial ended it"
	if until.IsZero() {
		until, why = time.Now(), "the trial's end"
	}
	if released, ok := clusterAPI.infra.Released(t.Victim); ok && released.Before(until) {
		until, why = released, "the provider reported it deleted"
	}
	var out []string
	broken := func(what string, at time.Time) {
		out = append(out, fmt.Sprintf("S1, S9: %s at %s while the instance of %s could still run (%s at %s; it ran until %s, %s)",
			what, at.Format("15:04:05.000"), t.Victim, run.fault, run.faultAt.Format("15:04:05.000"), until.Format("15:04:05.000"), why))
	}
	t.mu.Lock()
	// Back and Ready, the node's own kubelet ends its pod.
	for _, tr := range t.transitions[t.Victim] {
		if tr.At.After(run.faultAt) && tr.Ready && tr.At.Before(until) {
			until, why = tr.At, "seen Ready again"
			break
		}
	}
	for _, at := range t.fencingComplete[t.Victim] {
		if at.Before(until) {
			broken("FencingComplete=True on the node", at)
			break
		}
	}
	for _, at := range t.outOfService[t.Victim] {
		if at.Before(until) {
			broken("the out-of-service taint on the node", at)
			break
		}
	}
	t.mu.Unlock()
	for _, m := range []string{timeline.PodForceDeleted, timeline.OldVADeleted, timeline.NewAttachment, timeline.AttachedElsewhere} {
		if at, ok := t.victims[0].rec.At(m); ok && at.Before(until) {
			broken(m, at)
		}
	}
	fr, err := fencingv1alpha1.NewClient(t.c.Dynamic).Get(ctx, t.Victim)
	if err == nil && fr.Status.NodeFence != nil && fr.Status.NodeFence.ConfirmedTime != nil &&
		fr.Status.NodeFence.ConfirmedTime.Time.Before(until.Truncate(time.Second)) {
		broken("the machine fence recorded confirmed, to the second, ("+fr.Status.NodeFence.Output+")", fr.Status.NodeFence.ConfirmedTime.Time)
	}
	return out
}

// removeWorkloadCluster drops the trial's Cluster API objects without
// deleting an instance: InfraMachines left have their finalizers stripped
// first (so that a Machine deleted after them finds no instance to
// delete), then the Machines, the Cluster and the namespace go. Nothing is
// waited for.
func (t *Trial) removeWorkloadCluster(run *machineRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if list, err := t.infraMachines(run).List(ctx, metav1.ListOptions{}); err == nil {
		for _, m := range list.Items {
			if m.GetDeletionTimestamp() == nil {
				_, _ = t.removeInfra(ctx, run, m.GetName(), false)
			}
		}
	}
	_ = t.machines(run).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = t.c.Dynamic.Resource(capiClusterResource).Namespace(run.wc.Namespace).Delete(ctx, run.wc.Name, metav1.DeleteOptions{})
	_ = t.c.Client.CoreV1().Namespaces().Delete(ctx, run.wc.Namespace, metav1.DeleteOptions{})
}
