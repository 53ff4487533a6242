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

// Package scenario holds the stories the end-to-end tests and the demo play on
// the real control plane: a StatefulSet on KWOK nodes with volumes of the mock
// driver, attached by csi-fence-attacher, and a node failure that fails over.
package scenario

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// GroupLabel keeps each scenario's pods on the scenario's own nodes, so that
// scenarios sharing a cluster never move each other's pods.
const GroupLabel = "fence-e2e/group"

// Env is a cluster with the product running on nodes.
type Env struct {
	C       *framework.Cluster
	P       *framework.Product
	Log     framework.Logger
	Nodes   []string
	NS      string
	App     string
	Volumes []string // volume handles of the first driver, one per replica
	// DriverVolumes are the volume handles (also the PV names) of each
	// driver, one per replica, by driver name; Volumes are the first's.
	DriverVolumes map[string][]string

	drivers []*framework.Driver
}

// Options say what SetupWith sets up.
type Options struct {
	// Prefix names the nodes, volumes and StatefulSet, and keeps the pods
	// on these nodes (GroupLabel).
	Prefix          string
	Nodes, Replicas int
	// Drivers give every replica one volume of each, in this order (its
	// claim templates are data, data2, ...); every node runs them all. The
	// product's first driver must be the first. Default: that driver only.
	Drivers []*framework.Driver
	// Template, when set, changes the StatefulSet's pod template before it
	// is created (a test's labels, annotations or hooks).
	Template func(*corev1.PodTemplateSpec)
}

// Setup creates nodes with their mock node instances, one pre-provisioned
// volume (PV pre-bound to the StatefulSet's claim) per replica, and the
// StatefulSet; it waits until every replica runs with its volume attached.
func Setup(ctx context.Context, c *framework.Cluster, p *framework.Product, log framework.Logger, prefix string, nodes, replicas int) (*Env, error) {
	return SetupWith(ctx, c, p, log, Options{Prefix: prefix, Nodes: nodes, Replicas: replicas})
}

// SetupWith is Setup with a volume of each of opts.Drivers per replica.
func SetupWith(ctx context.Context, c *framework.Cluster, p *framework.Product, log framework.Logger, opts Options) (*Env, error) {
	prefix := opts.Prefix
	e := &Env{C: c, P: p, Log: log, NS: "default", App: prefix + "-db", DriverVolumes: map[string][]string{}, drivers: opts.Drivers}
	if len(e.drivers) == 0 {
		e.drivers = []*framework.Driver{p.Driver}
	}
	if e.drivers[0] != p.Driver {
		return nil, fmt.Errorf("the first driver of a scenario must be the product's first, %s", p.Driver.Name)
	}
	var driverNames []string
	for _, d := range e.drivers {
		driverNames = append(driverNames, d.Name)
	}
	for i := 0; i < opts.Nodes; i++ {
		name := fmt.Sprintf("%s-node-%d", prefix, i)
		if err := c.CreateNode(ctx, name, driverNames...); err != nil {
			return nil, err
		}
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, GroupLabel, prefix))
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return nil, err
		}
		if _, err := p.StartNode(ctx, name, e.drivers[1:]...); err != nil {
			return nil, err
		}
		e.Nodes = append(e.Nodes, name)
	}
	for _, n := range e.Nodes {
		if err := c.WaitNodeReady(ctx, n, true, 30*time.Second); err != nil {
			return nil, err
		}
	}
	log.Logf("%d KWOK nodes Ready, each with a mock node instance of %v", opts.Nodes, driverNames)
	var templates []corev1.PersistentVolumeClaim
	var mounts []corev1.VolumeMount
	for j, d := range e.drivers {
		claim, vol := "data", "vol"
		if j > 0 {
			claim, vol = fmt.Sprintf("data%d", j+1), fmt.Sprintf("vol%d", j+1)
		}
		for i := 0; i < opts.Replicas; i++ {
			handle := fmt.Sprintf("%s-%s-%d", prefix, vol, i)
			ref := &corev1.ObjectReference{Namespace: e.NS, Name: fmt.Sprintf("%s-%s-%d", claim, e.App, i)}
			if err := CreateVolume(ctx, c, d, handle, ref); err != nil {
				return nil, err
			}
			e.DriverVolumes[d.Name] = append(e.DriverVolumes[d.Name], handle)
		}
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
	e.Volumes = e.DriverVolumes[p.Driver.Name]
	labels := map[string]string{"app": e.App}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: e.App, Namespace: e.NS},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(int32(opts.Replicas)),
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{GroupLabel: prefix},
					Containers:   []corev1.Container{{Name: "db", Image: "postgres", VolumeMounts: mounts}},
					// One replica per node, and a workload that wants to fail
					// over fast: it tolerates an unreachable node for 2 s only.
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: "kubernetes.io/hostname",
						}},
					}},
					Tolerations: []corev1.Toleration{
						{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(2))},
						{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(2))},
						{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					},
				},
			},
			VolumeClaimTemplates: templates,
		},
	}
	if opts.Template != nil {
		opts.Template(&sts.Spec.Template)
	}
	if _, err := c.Client.AppsV1().StatefulSets(e.NS).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	for i := 0; i < opts.Replicas; i++ {
		if _, err := e.WaitAttached(ctx, i, "", 90*time.Second); err != nil {
			return nil, err
		}
	}
	log.Logf("StatefulSet %s: %d replicas Running, each volume published by csi-fence-attacher", e.App, opts.Replicas)
	return e, nil
}

// CreateVolume creates a single-node volume of driver d on its array and
// its PV, named handle, statically provisioned (pre-bound to claim when
// claim is not nil).
func CreateVolume(ctx context.Context, c *framework.Cluster, d *framework.Driver, handle string, claim *corev1.ObjectReference) error {
	if err := d.Array.AddVolume(handle, 1<<30); err != nil {
		return err
	}
	pv := StaticPV(d, handle, claim)
	_, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	return err
}

// StaticPV is the PersistentVolume of driver d's volume handle, 1 GiB,
// statically provisioned (pre-bound to claim when claim is not nil), as
// CreateVolume and fence-bench's scale mode create them.
func StaticPV(d *framework.Driver, handle string, claim *corev1.ObjectReference) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: handle},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              d.StorageClass,
			ClaimRef:                      claim,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: d.Name, VolumeHandle: handle, FSType: "ext4",
			}},
		},
	}
}

// Teardown removes what Setup made once a scenario is over: the
// StatefulSet, and once its pods are gone and every volume of the scenario
// is detached (so that nothing is detached from a node that no longer
// exists), its nodes' processes and Node objects. The volumes' objects and
// the array's records stay, which cost nothing.
func (e *Env) Teardown(ctx context.Context, timeout time.Duration) error {
	err := e.C.Client.AppsV1().StatefulSets(e.NS).Delete(ctx, e.App, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	volumes := map[string]bool{}
	for _, vs := range e.DriverVolumes {
		for _, v := range vs {
			volumes[v] = true
		}
	}
	var left []string
	if err := framework.WaitFor(ctx, timeout, "the scenario's pods gone and volumes detached", func(ctx context.Context) (bool, error) {
		left = nil
		pods, err := e.C.Client.CoreV1().Pods(e.NS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + e.App})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			left = append(left, "pod "+p.Name)
		}
		vas, err := e.C.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, va := range vas.Items {
			if pv := va.Spec.Source.PersistentVolumeName; pv != nil && volumes[*pv] {
				left = append(left, "attachment of "+*pv+" to "+va.Spec.NodeName)
			}
		}
		return len(left) == 0, nil
	}); err != nil {
		return fmt.Errorf("%w: %s", err, strings.Join(left, ", "))
	}
	for _, n := range e.Nodes {
		e.P.RemoveNode(n)
		if err := e.C.Client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// PodName is the name of replica i.
func (e *Env) PodName(i int) string { return fmt.Sprintf("%s-%d", e.App, i) }

// WaitAttached waits until replica i runs on a node other than notOn with
// the VolumeAttachment of each of its volumes (one per driver) attached
// there, and returns the node.
func (e *Env) WaitAttached(ctx context.Context, i int, notOn string, timeout time.Duration) (string, error) {
	var node string
	err := framework.WaitFor(ctx, timeout, fmt.Sprintf("%s running with its volumes attached", e.PodName(i)), func(ctx context.Context) (bool, error) {
		pod, err := e.C.Client.CoreV1().Pods(e.NS).Get(ctx, e.PodName(i), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pod.DeletionTimestamp != nil || pod.Spec.NodeName == "" || pod.Spec.NodeName == notOn || pod.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		for _, d := range e.drivers {
			va, err := e.VA(ctx, e.DriverVolumes[d.Name][i], pod.Spec.NodeName)
			if err != nil || va == nil || !va.Status.Attached {
				return false, err
			}
		}
		node = pod.Spec.NodeName
		return true, nil
	})
	return node, err
}

// VA returns the VolumeAttachment of the volume's PV on node, or nil.
func (e *Env) VA(ctx context.Context, pvName, node string) (*storagev1.VolumeAttachment, error) {
	list, err := e.C.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		va := &list.Items[i]
		if va.Spec.NodeName == node && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pvName {
			return va, nil
		}
	}
	return nil, nil
}

// Writer keeps writing to a volume from one node every interval, as the
// workload would, and counts accepted and refused writes.
type Writer struct {
	Accepted, Refused atomic.Int64
	cancel            context.CancelFunc
	done              chan struct{}
}

// DataPath is where a Writer writes: a node's first driver's plugin
// (*framework.NodeInstance) or any one of its plugins (*framework.NodePlugin).
type DataPath interface {
	Write(ctx context.Context, volume string) error
}

// StartWriter starts a Writer on node n for volume.
func StartWriter(ctx context.Context, n DataPath, volume string, interval time.Duration) *Writer {
	ctx, cancel := context.WithCancel(ctx)
	w := &Writer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if err := n.Write(ctx, volume); err != nil {
				w.Refused.Add(1)
			} else {
				w.Accepted.Add(1)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// Stop stops the writer and waits for it.
func (w *Writer) Stop() { w.cancel(); <-w.done }

// FailoverOptions choose how the node fails and how failover is driven.
type FailoverOptions struct {
	// Partition keeps the node's mock instance running and its workload
	// writing, as a node cut off from the control plane would; otherwise the
	// node is powered off (its instance killed).
	Partition bool
	// OutOfServiceTaint: the operator adds node.kubernetes.io/out-of-service
	// once the node is NotReady (KEP-2268's manual path).
	OutOfServiceTaint bool
	// Return brings the node back after the failover.
	Return bool
}

// PowerOff cuts a node's power: its heartbeat stops (it turns NotReady)
// and everything that ran on it stops at once.
func (e *Env) PowerOff(ctx context.Context, node string) error {
	return e.P.Node(node).PowerOff(ctx)
}

// PowerOn boots a node that was powered off or cut off: its heartbeat
// resumes and its kubelet, node agent and plugin start again, as after a
// reboot; it returns once the node is Ready.
func (e *Env) PowerOn(ctx context.Context, node string) error {
	return e.P.Node(node).PowerOn(ctx)
}

// Failover fails the node of replica 0 and follows the failover to its end,
// recording milestones in rec.
func (e *Env) Failover(ctx context.Context, rec *timeline.Recorder, opts FailoverOptions) error {
	victim, err := e.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		return err
	}
	vol := e.Volumes[0]
	inst := e.P.Nodes[victim]
	writer := StartWriter(ctx, inst, vol, 100*time.Millisecond)
	defer writer.Stop()
	if err := framework.WaitFor(ctx, 10*time.Second, "first write of the workload", func(context.Context) (bool, error) {
		return writer.Accepted.Load() > 0, nil
	}); err != nil {
		return err
	}

	how := "powered off"
	if opts.Partition {
		how = "partitioned (its workload keeps writing)"
	}
	rec.Mark(timeline.NodeDown, victim+" "+how)
	if opts.Partition {
		err = e.P.Node(victim).Partition(ctx)
	} else {
		writer.Stop()
		err = e.P.Node(victim).PowerOff(ctx)
	}
	if err != nil {
		return err
	}
	if err := e.C.WaitNodeReady(ctx, victim, false, 60*time.Second); err != nil {
		return err
	}
	rec.Mark(timeline.NodeNotReady, "")
	if opts.OutOfServiceTaint {
		if err := framework.WaitFor(ctx, 60*time.Second, "pod evicted", func(context.Context) (bool, error) { return rec.Has(timeline.PodEvicted), nil }); err != nil {
			return err
		}
		if err := e.C.AddTaint(ctx, victim, corev1.Taint{Key: contract.OutOfServiceTaintKey, Value: contract.OutOfServiceTaintValue, Effect: corev1.TaintEffectNoExecute}); err != nil {
			return err
		}
		rec.Mark("out-of-service taint added", "by the operator ("+contract.OutOfServiceTaintKey+")")
	}
	newNode, err := e.WaitAttached(ctx, 0, victim, 120*time.Second)
	if err != nil {
		return err
	}
	rec.Mark(timeline.AttachedElsewhere, "on "+newNode)
	// The workload runs again on the new node.
	if err := e.P.Nodes[newNode].Write(ctx, vol); err != nil {
		return fmt.Errorf("the replacement cannot write to its volume: %w", err)
	}
	if opts.Partition {
		before := writer.Refused.Load()
		if err := framework.WaitFor(ctx, 10*time.Second, "the partitioned node's writes refused", func(context.Context) (bool, error) {
			return writer.Refused.Load() > before, nil
		}); err != nil {
			return err
		}
		rec.Mark("old node's writes refused", fmt.Sprintf("%d refused since the fence", writer.Refused.Load()))
	}
	writer.Stop()

	if opts.Return {
		// Whether it was powered off or cut off, the node's kubelet, node
		// agent and plugin start again as after a reboot.
		rec.Mark(timeline.NodeBack, victim)
		if err := e.P.Node(victim).PowerOn(ctx); err != nil {
			return err
		}
		rec.Mark(timeline.NodeReady, "")
		if err := framework.WaitFor(ctx, 60*time.Second, "the node agent's forced cleanup of "+vol, func(context.Context) (bool, error) {
			return rec.Has(timeline.NodeCleaned), nil
		}); err != nil {
			return err
		}
		if err := framework.WaitFor(ctx, 60*time.Second, "quarantine of "+victim+" lifted", func(ctx context.Context) (bool, error) {
			n, err := e.C.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, t := range n.Spec.Taints {
				if t.Key == contract.QuarantineTaintKey {
					return false, nil
				}
			}
			for _, c := range n.Status.Conditions {
				if string(c.Type) == contract.ConditionFencingRequired || string(c.Type) == contract.ConditionFencingComplete {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			return err
		}
		if opts.OutOfServiceTaint {
			// The operator's taint is the operator's: the release of the
			// node leaves it, and the operator removes it.
			n, err := e.C.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !framework.HasTaint(n, contract.OutOfServiceTaintKey, corev1.TaintEffectNoExecute) {
				return fmt.Errorf("the operator's out-of-service taint on %s was removed by the product", victim)
			}
			if err := e.C.RemoveTaint(ctx, victim, contract.OutOfServiceTaintKey); err != nil {
				return err
			}
			rec.Mark(timeline.TaintsRemoved, "out-of-service taint removed by the operator")
		}
	}
	return nil
}
