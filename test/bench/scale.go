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

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	pvhelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/bench/procstat"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// ScaleOptions are the flags of --mode=scale.
type ScaleOptions struct {
	// Nodes (KWOK), Pods and Volumes: Volumes of the pods have a volume
	// each (StatefulSets), the others none (Deployments).
	Nodes, Pods, Volumes int
	// HotPods are the pods, each with a volume, of the node that fails
	// (and of the in-tree path's node).
	HotPods int
	// Rack nodes lose power at once, RackPods pods with a volume each.
	Rack, RackPods int
	// GuardPercent is the attacher's --max-fenced-node-percent; 0: the
	// smallest that admits the failed node and half the rack.
	GuardPercent int
	// InTree adds the in-tree out-of-service path beside the product's.
	InTree bool
	// Window is the steady state's, which begins Settle after the
	// restarted attacher leads.
	Window, Settle time.Duration
	// QPS is the attachers' API client setting while measuring, their
	// failover's too.
	QPS APISetting
	// ControlPlaneQPS is kube-controller-manager's and kube-scheduler's
	// --kube-api-qps; 0: their defaults.
	ControlPlaneQPS int
	// Workers is the attachers' --worker-threads while measuring; 0:
	// external-attacher's 10.
	Workers int
	// EnforceMemory fails the run when the controller role's RSS is over
	// the goal.
	EnforceMemory bool
	// ProfileDir, if set, gets a CPU profile of the bench itself over each
	// failed node's failover (PATH.pprof).
	ProfileDir string
}

// clients says what the API clients that pace a failover may send.
func (o ScaleOptions) clients() string {
	failover := "20/30"
	if o.QPS != "default" {
		failover = o.QPS.String()
	}
	cp := "20/30 and 50/100"
	if o.ControlPlaneQPS > 0 {
		cp = fmt.Sprintf("%d/%d", o.ControlPlaneQPS, 2*o.ControlPlaneQPS)
	}
	workers := o.Workers
	if workers == 0 {
		workers = 10
	}
	return fmt.Sprintf("API clients (qps/burst): attacher %s (%d workers), its failover %s, kube-controller-manager and kube-scheduler %s", o.QPS, workers, failover, cp)
}

// inTreeDriver is the driver of the in-tree path's volumes: the mock without
// UNPUBLISH_FENCE, so that the product leaves its pods to Kubernetes.
const inTreeDriver = "intree.csi-fence.io"

// Labels of the bench's nodes and pods.
const (
	// groupLabel names a pod's group: general, hot, intree, rack, bulk.
	groupLabel = "fence-bench/group"
	appLabel   = "fence-bench/app"
	// setupQPS is the attachers' API client setting while the cluster is
	// filled: at external-attacher's 5 QPS, 3,000 attaches would take half
	// an hour.
	setupQPS = "300"
)

// poolKey is the node label that lets a group's pods on a node
// (nodeSelector poolKey(group)=on); spares carry several.
func poolKey(group string) string { return "fence-bench/" + group }

// workload is one StatefulSet (with a volume per replica) or Deployment.
type workload struct {
	name, group string
	replicas    int
	// node, when set, is where every replica runs (spec.nodeName): the
	// bulk pods go straight to their node, as a DaemonSet's do, without
	// the scheduler, which placed 100 to 150 pods a minute at 1,000 nodes
	// on this machine and would take hours to fill the cluster.
	node string
}

// scalePlan is the cluster --mode=scale builds: node names by role, and
// the workloads.
type scalePlan struct {
	general []string // nodes of the general pods
	// spares are general nodes that also take the failed nodes'
	// replacements, once the failing groups run.
	spares  []string
	hot     string   // fails alone, product path
	intree  string   // fails alone, in-tree path ("" without)
	rack    []string // lose power at once
	sets    []workload
	bulk    []workload // Deployments without volumes, one per general node
	percent int        // --max-fenced-node-percent
	slots   int        // nodes the storm guard lets be fenced at once
}

func (p scalePlan) nodes() []string {
	out := append(slices.Clone(p.general), p.hot)
	if p.intree != "" {
		out = append(out, p.intree)
	}
	return append(out, p.rack...)
}

const (
	setReplicas = 25 // general StatefulSets' replicas
	maxSpares   = 10
)

// planScale lays out the cluster: pods counts every pod (the in-tree
// path's, added later, aside), volumes the product's attached volumes.
func planScale(o ScaleOptions) (scalePlan, error) {
	var p scalePlan
	if o.HotPods < 1 || o.Rack < 0 || o.RackPods < 1 {
		return p, fmt.Errorf("--hot-pods=%d, --rack=%d, --rack-pods=%d: want at least 1, 0 and 1", o.HotPods, o.Rack, o.RackPods)
	}
	special := 1 + o.Rack
	if o.InTree {
		special++
	}
	if o.Nodes-special < 2 {
		return p, fmt.Errorf("--nodes=%d: want at least %d (the failing node, the in-tree path's, the rack of %d and 2 more)", o.Nodes, special+2, o.Rack)
	}
	generalVolumes := o.Volumes - o.HotPods - o.Rack*o.RackPods
	if generalVolumes < 0 {
		return p, fmt.Errorf("--volumes=%d: want at least %d (the failing node's %d and the rack's %d)", o.Volumes, o.HotPods+o.Rack*o.RackPods, o.HotPods, o.Rack*o.RackPods)
	}
	if o.Pods < o.Volumes {
		return p, fmt.Errorf("--pods=%d: want at least --volumes=%d (a pod per volume)", o.Pods, o.Volumes)
	}
	if o.Window <= 0 {
		return p, fmt.Errorf("--window=%s: want a positive duration", o.Window)
	}
	for i := 0; i < o.Nodes-special; i++ {
		p.general = append(p.general, fmt.Sprintf("g-%04d", i))
	}
	p.spares = p.general[:min(maxSpares, len(p.general))]
	p.hot = "hot-0"
	if o.InTree {
		p.intree = "intree-0"
	}
	for i := 0; i < o.Rack; i++ {
		p.rack = append(p.rack, fmt.Sprintf("rack-%02d", i))
	}
	p.sets = append(p.sets, workload{name: "hot", group: "hot", replicas: o.HotPods})
	if o.Rack > 0 {
		p.sets = append(p.sets, workload{name: "rack", group: "rack", replicas: o.Rack * o.RackPods})
	}
	for i := 0; generalVolumes > 0; i++ {
		n := min(setReplicas, generalVolumes)
		p.sets = append(p.sets, workload{name: fmt.Sprintf("vol-%03d", i), group: "general", replicas: n})
		generalVolumes -= n
	}
	// The pods without a volume, spread evenly over the general nodes.
	bulk := o.Pods - o.Volumes
	for i, n := range p.general {
		share := bulk / len(p.general)
		if i < bulk%len(p.general) {
			share++
		}
		if share > 0 {
			p.bulk = append(p.bulk, workload{name: "bulk-" + n, group: "general", replicas: share, node: n})
		}
	}
	p.percent = o.GuardPercent
	if p.percent == 0 {
		// The failed node stays admitted (it is not back); the rack then
		// finds room for at most half of it, at least one node when it
		// can: the smallest limit with the most slots up to that, or,
		// when even 1% has more (a large cluster, a small rack or none),
		// 1%.
		want, best := 1+(o.Rack+1)/2, 0
		for pc := 1; pc <= 100; pc++ {
			n := guardSlots(o.Nodes, 0, pc)
			if n > 0 && (best == 0 || n <= want && n > best) {
				best, p.percent = n, pc
			}
			if n >= want {
				break
			}
		}
		if best == 0 {
			return p, fmt.Errorf("--nodes=%d: no --max-fenced-node-percent admits a node (too few nodes)", o.Nodes)
		}
	}
	p.slots = guardSlots(o.Nodes, 0, p.percent)
	return p, nil
}

// scaleRun is one run of --mode=scale on its control plane.
type scaleRun struct {
	b      *bench
	o      ScaleOptions
	plan   scalePlan
	c      *framework.Cluster
	p      *framework.Product
	client kubernetes.Interface // the bench's, at a high rate
	t      *tracker
	// setupRestarts counts the attacher's restarts while the cluster was
	// filled: like external-attacher, it exits when it cannot renew its
	// leader-election Lease in time, which an apiserver this machine
	// cannot keep up with makes happen, and its kubelet would restart it.
	setupRestarts int
	filling       bool
}

// measureArgs are the attachers' flags while measuring: external-attacher's
// retry, timeout and resync defaults (the e2e harness shortens them), its
// --worker-threads unless workers is 0, the API client setting q (of the
// failover's clients too), and the storm guard's limit.
func measureArgs(q APISetting, percent, workers int) []string {
	args := []string{"--v=2", "--timeout=15s", "--retry-interval-start=1s", "--retry-interval-max=5m", "--reconcile-sync=1m",
		"--max-fenced-node-percent=" + strconv.Itoa(percent)}
	if workers > 0 {
		args = append(args, "--worker-threads="+strconv.Itoa(workers))
	}
	if q == "default" {
		// Explicit: the setup's flags stay before these.
		return append(args, "--kube-api-qps=5", "--kube-api-burst=10")
	}
	return append(append(args, q.args()...), q.failoverArgs()...)
}

// runScale builds a cluster of o.nodes KWOK nodes, o.pods pods and
// o.volumes volumes attached through the product, and measures the steady
// state, one node failing (beside the in-tree path), and a rack losing
// power under the storm guard. Each table is printed as its phase ends.
func (b *bench) runScale(ctx context.Context, o ScaleOptions) (err error) {
	plan, err := planScale(o)
	if err != nil {
		return err
	}
	// A kubelet's heartbeat (a 40 s Lease renewed every 10 s) and the node
	// lifecycle controller's grace period to match: the e2e tests' 2.5 s
	// renewals of a thousand nodes would load the apiserver more than
	// everything measured, and a late one would turn a node NotReady.
	opts := b.opts
	opts.NodeLeaseDuration, opts.NodeMonitorGracePeriod = 40*time.Second, 40*time.Second
	opts.ControlPlaneQPS = o.ControlPlaneQPS
	// kwok's default of 4 stages at once left 30,000 pods 27 minutes to
	// run at 1,000 nodes, and a failed node's new pods Pending behind them.
	opts.KwokParallelism = 16
	c, err := framework.Start(ctx, b, opts)
	if err != nil {
		return err
	}
	defer func() { b.cleanup(ctx, c, err) }()
	p, err := c.StartProduct(ctx, framework.ProductOptions{AttacherArgs: []string{"--v=2",
		"--kube-api-qps=" + setupQPS, "--kube-api-burst=" + setupQPS, "--max-fenced-node-percent=" + strconv.Itoa(plan.percent)}})
	if err != nil {
		return err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	// Protobuf: the bench's watch of 30,000 pods costs it, and the
	// apiserver serving it, a fraction of what JSON does, on the machine
	// that runs the product measured.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	s := &scaleRun{b: b, o: o, plan: plan, c: c, p: p, client: client}
	stop, err := s.track(ctx)
	if err != nil {
		return err
	}
	defer stop()

	if err := s.setup(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	steady, err := s.steadyState(ctx)
	if err != nil {
		return fmt.Errorf("steady state: %w", err)
	}
	b.printf("\n%s\n", steadyTable(steady))
	if o.EnforceMemory {
		// Reported at the end: the other phases are measured first.
		err = memoryOverGoal(steady)
	}

	var moves []failoverResult
	printMoves := func() {
		if len(moves) > 0 {
			b.printf("\n%s\n", failoverScaleTable(o.HotPods, o.clients(), moves))
		}
	}
	r, ferr := s.failNode(ctx, "automatic", plan.hot, "hot", false)
	moves = append(moves, r)
	if ferr == nil && plan.intree != "" {
		r, ferr = s.inTree(ctx)
		if len(r.moves) > 0 {
			moves = append(moves, r)
		}
	}
	printMoves()
	if ferr != nil {
		return ferr
	}
	if len(plan.rack) > 0 {
		rr, rerr := s.failRack(ctx)
		b.printf("\n%s\n", rackTable(rr))
		if rerr != nil {
			return rerr
		}
	}
	if verr := s.safety(); verr != nil {
		return verr
	}
	return err
}

// safety reads every driver's array: a volume published to a second node
// before the first was fenced (S1), or to a node where it may be
// quarantined (S2), fails the run.
func (s *scaleRun) safety() error {
	var bad []string
	for _, d := range s.p.Drivers {
		v, err := d.Violations()
		if err != nil {
			return err
		}
		s.b.printf("safety, array of %s: S1 %d, S2 %d\n", d.Name, v["S1"], v["S2"])
		for inv, n := range v {
			if n > 0 {
				bad = append(bad, fmt.Sprintf("%s: %d %s", d.Name, n, inv))
			}
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("safety violations on the arrays: %s", strings.Join(bad, ", "))
	}
	return nil
}

// setup creates the nodes, volumes and workloads and waits until every pod
// runs with its volume attached, the simulated kubelets of the nodes that
// will fail report their volumes in use, and the spares take the failing
// groups' replacements.
func (s *scaleRun) setup(ctx context.Context) error {
	begin := time.Now()
	s.filling = true
	defer func() { s.filling = false }()
	drivers := []string{framework.DriverName}
	if s.plan.intree != "" {
		drivers = append(drivers, inTreeDriver)
	}
	type nodeSpec struct {
		name, group string
	}
	var specs []nodeSpec
	for _, n := range s.plan.general {
		specs = append(specs, nodeSpec{n, "general"})
	}
	specs = append(specs, nodeSpec{s.plan.hot, "hot"})
	if s.plan.intree != "" {
		specs = append(specs, nodeSpec{s.plan.intree, "intree"})
	}
	for _, n := range s.plan.rack {
		specs = append(specs, nodeSpec{n, "rack"})
	}
	group := map[string]string{}
	var names []string
	for _, sp := range specs {
		group[sp.name] = sp.group
		names = append(names, sp.name)
	}
	if err := parallel(16, names, func(n string) error {
		return s.c.CreateLabelledNode(ctx, n, map[string]string{poolKey(group[n]): "on"}, drivers...)
	}); err != nil {
		return err
	}
	if err := s.p.Array.RegisterNodes(0, names...); err != nil {
		return err
	}
	if err := s.poll(ctx, 5*time.Minute, "every node Ready", func() (bool, string) {
		ready := s.t.readyNodes(names)
		return ready == len(names), fmt.Sprintf("%d/%d nodes Ready", ready, len(names))
	}); err != nil {
		return err
	}
	s.b.Logf("%d KWOK nodes Ready (%.0fs)", len(names), time.Since(begin).Seconds())
	// The nodes that fail run what a failing node needs: its simulated
	// kubelet (which reports its volumes in use, as the attach/detach
	// controller waits on), its node agent and its mock node plugin.
	for _, n := range append([]string{s.plan.hot}, s.plan.rack...) {
		if _, err := s.p.StartNode(ctx, n); err != nil {
			return err
		}
	}
	s.b.Logf("node agents, simulated kubelets and mock node plugins on %s and the rack (%.0fs)", s.plan.hot, time.Since(begin).Seconds())
	for _, w := range s.plan.sets {
		if err := s.createSet(ctx, s.p.Driver, w); err != nil {
			return err
		}
	}
	for _, w := range s.plan.bulk {
		if err := s.createDeployment(ctx, w); err != nil {
			return err
		}
	}
	s.b.Logf("%d StatefulSets (%d volumes) and %d Deployments created (%.0fs)", len(s.plan.sets), s.o.Volumes, len(s.plan.bulk), time.Since(begin).Seconds())
	timeout := 15*time.Minute + time.Duration(s.o.Pods)*40*time.Millisecond
	if err := s.waitRunning(ctx, append(slices.Clone(s.plan.sets), s.plan.bulk...), timeout); err != nil {
		return err
	}
	if err := s.waitInUse(ctx, s.plan.hot, s.o.HotPods); err != nil {
		return err
	}
	for _, n := range s.plan.rack {
		if err := s.waitInUse(ctx, n, s.o.RackPods); err != nil {
			return err
		}
	}
	// Room for the replacements, now that the failing groups run.
	if err := s.labelSpares(ctx, "hot", "rack"); err != nil {
		return err
	}
	s.b.Logf("setup done: %d pods running, %d volumes attached (%.0fs)", s.o.Pods, s.o.Volumes, time.Since(begin).Seconds())
	if _, q := s.t.maxima(); q > 0 || s.setupRestarts > 0 {
		// Heartbeats late under load make nodes NotReady, and the
		// product fences them as it should: said, not hidden.
		s.b.Logf("while the cluster was filled: up to %d nodes quarantined at once (their heartbeats late), %d restarts of csi-fence-attacher", q, s.setupRestarts)
	}
	return nil
}

// labelSpares lets the groups' pods on the spares.
func (s *scaleRun) labelSpares(ctx context.Context, groups ...string) error {
	labels := map[string]string{}
	for _, g := range groups {
		labels[poolKey(g)] = "on"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	return parallel(8, s.plan.spares, func(n string) error {
		_, err := s.client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// volumeName is the PV (and volume handle) of a set's replica i.
func volumeName(set string, i int) string { return fmt.Sprintf("pv-%s-%d", set, i) }

// podName is a set's replica i.
func podName(set string, i int) string { return fmt.Sprintf("%s-%d", set, i) }

// createSet creates a volume of driver d per replica, its PV and the
// replica's claim bound to each other, then the StatefulSet.
func (s *scaleRun) createSet(ctx context.Context, d *framework.Driver, w workload) error {
	var handles []string
	for i := 0; i < w.replicas; i++ {
		handles = append(handles, volumeName(w.name, i))
	}
	if err := d.Array.AddVolumes(1<<30, handles...); err != nil {
		return err
	}
	claim := corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: ptr.To(d.StorageClass),
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
	if err := parallel(16, handles, func(h string) error {
		i, _ := strconv.Atoi(h[strings.LastIndexByte(h, '-')+1:])
		return s.bindVolume(ctx, d, h, "data-"+podName(w.name, i), claim)
	}); err != nil {
		return err
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:             ptr.To(int32(w.replicas)),
			Selector:             &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: w.name}},
			PodManagementPolicy:  appsv1.ParallelPodManagement,
			Template:             s.podTemplate(w),
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: claim}},
		},
	}
	sts.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	_, err := s.client.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{})
	return err
}

// bindVolume creates the PV of handle and the claim named claimName, and
// binds them as the PV controller does: the PV's claimRef gets the claim's
// UID, the claim the controller's mark of a completed binding, both the phase
// Bound. Left to the PV controller, which binds one claim at a time, a few
// round trips each, 3,000 claims took over ten minutes at 1,000 nodes, and
// the scheduler, finding each waiting pod unschedulable ("unbound immediate
// PersistentVolumeClaims"), tried preemption over every node at each retry.
// The order keeps the PV controller, which may bind the same pair meanwhile,
// from ever calling the claim Lost: the PV exists before the claim names it,
// and the claim is marked bound only once the PV names its UID.
func (s *scaleRun) bindVolume(ctx context.Context, d *framework.Driver, handle, claimName string, spec corev1.PersistentVolumeClaimSpec) error {
	pvs, pvcs := s.client.CoreV1().PersistentVolumes(), s.client.CoreV1().PersistentVolumeClaims("default")
	pv := scenario.StaticPV(d, handle, &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "default", Name: claimName})
	if _, err := pvs.Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return err
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claimName}, Spec: *spec.DeepCopy()}
	pvc.Spec.VolumeName = handle
	pvc, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	uid := pvc.UID
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, err := pvs.Get(ctx, handle, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pv.Spec.ClaimRef.UID == "" {
			pv.Spec.ClaimRef.UID = uid
			if pv, err = pvs.Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if pv.Spec.ClaimRef.UID != uid {
			return fmt.Errorf("PV %s is bound to another claim than %s", handle, claimName)
		}
		if pv.Status.Phase == corev1.VolumeBound {
			return nil
		}
		pv.Status.Phase = corev1.VolumeBound
		_, err = pvs.UpdateStatus(ctx, pv, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := pvcs.Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !metav1.HasAnnotation(pvc.ObjectMeta, pvhelpers.AnnBindCompleted) {
			metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, pvhelpers.AnnBindCompleted, "yes")
			if pvc, err = pvcs.Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if pvc.Status.Phase == corev1.ClaimBound {
			return nil
		}
		pvc.Status.Phase, pvc.Status.AccessModes = corev1.ClaimBound, spec.AccessModes
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		_, err = pvcs.UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
		return err
	})
}

func (s *scaleRun) createDeployment(ctx context.Context, w workload) error {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(w.replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: w.name}},
			Template: s.podTemplate(w),
		},
	}
	_, err := s.client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
	return err
}

// podTemplate keeps a workload's pods on its group's nodes; they tolerate
// an unreachable node for 2 s only, as a workload that wants to fail over
// fast does. A rack's pods spread evenly over its nodes.
func (s *scaleRun) podTemplate(w workload) corev1.PodTemplateSpec {
	labels := map[string]string{appLabel: w.name, groupLabel: w.group}
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:     w.node,
			NodeSelector: map[string]string{poolKey(w.group): "on"},
			Containers:   []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(2))},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(2))},
				{Key: framework.KwokLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			},
		},
	}
	if w.group == "rack" {
		// The nodes that lost power (tainted) do not count: their
		// replacements spread over the spares. Counted, the admitted
		// nodes' empty hostnames kept the skew at one pod per spare.
		honor := corev1.NodeInclusionPolicyHonor
		t.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: w.name}},
			NodeTaintsPolicy: &honor,
		}}
	}
	return t
}

// waitRunning waits until every replica of the workloads runs and every
// StatefulSet's volume is attached, printing the progress now and then.
func (s *scaleRun) waitRunning(ctx context.Context, ws []workload, timeout time.Duration) error {
	want := map[string]int{}
	pods, volumes := 0, map[string]bool{}
	for _, w := range ws {
		want[w.name] = w.replicas
		pods += w.replicas
	}
	for _, w := range ws {
		if w.group == "general" && strings.HasPrefix(w.name, "bulk-") {
			continue
		}
		for i := 0; i < w.replicas; i++ {
			volumes[volumeName(w.name, i)] = true
		}
	}
	return s.poll(ctx, timeout, "every pod running, every volume attached", func() (bool, string) {
		running := s.t.running(want)
		attached := s.t.attachedCount(volumes)
		return running == pods && attached == len(volumes), fmt.Sprintf("%d/%d pods running, %d/%d volumes attached", running, pods, attached, len(volumes))
	})
}

// waitInUse waits until the node's status.volumesInUse lists n volumes:
// its simulated kubelet mounted them, so that the attach/detach controller
// will not detach them from it without the product (or an operator).
func (s *scaleRun) waitInUse(ctx context.Context, node string, n int) error {
	return s.poll(ctx, 5*time.Minute, node+"'s volumes in use", func() (bool, string) {
		got := s.t.inUse(node)
		return got >= n, fmt.Sprintf("%d/%d volumes in use on %s", got, n, node)
	})
}

// poll checks cond every second until it is true, printing its progress
// every 20 s, and fails after timeout with the last progress.
func (s *scaleRun) poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) error {
	var last string
	lastPrint := time.Now()
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if s.filling && s.p.Attacher.Exited() {
			s.setupRestarts++
			s.b.Logf("csi-fence-attacher exited (%v); restarted, as its kubelet would, while the cluster is filled", s.p.Attacher.Err())
			s.p.Attacher.Kill() // ended already: marks its end as expected
			if err := s.p.StartAttacher(ctx); err != nil {
				return false, err
			}
		}
		if err := s.c.Alive(); err != nil {
			return false, err
		}
		done, progress := cond()
		last = progress
		if !done && time.Since(lastPrint) >= 20*time.Second {
			s.b.Logf("waiting for %s: %s", what, progress)
			lastPrint = time.Now()
		}
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s (%s): %w", what, last, err)
	}
	return nil
}

// steadyState restarts the attacher as deployed (external-attacher's
// defaults, the API client setting measured), lets it settle, then
// measures its and a node agent's memory and CPU and the product's API
// requests over the window.
func (s *scaleRun) steadyState(ctx context.Context) (steadyResult, error) {
	r := steadyResult{nodes: s.o.Nodes, pods: s.o.Pods, volumes: s.o.Volumes, qps: s.o.QPS, window: s.o.Window, setupRestarts: s.setupRestarts}
	if err := s.p.RestartAttacher(ctx, measureArgs(s.o.QPS, s.plan.percent, s.o.Workers)...); err != nil {
		return r, err
	}
	if err := framework.WaitFor(ctx, 90*time.Second, "csi-fence-attacher leading", func(ctx context.Context) (bool, error) {
		return framework.Leading(ctx, s.p.AttacherHTTP)
	}); err != nil {
		return r, err
	}
	s.b.Logf("csi-fence-attacher restarted with %v and leading; the window starts in %s", measureArgs(s.o.QPS, s.plan.percent, s.o.Workers), s.o.Settle)
	// The steady state is what follows the start-up (initial lists, the
	// first resync): the window begins a fixed time after.
	if err := sleepCtx(ctx, s.o.Settle); err != nil {
		return r, err
	}
	procs := []struct {
		name string
		pid  int
	}{
		{"controller (csi-fence-attacher, " + framework.DriverName + ")", s.p.Attacher.Pid()},
		{"node agent (" + s.plan.hot + ", " + strconv.Itoa(s.o.HotPods) + " volumes)", s.p.Nodes[s.plan.hot].Agent.Pid()},
	}
	var begin []procstat.Stat
	for _, p := range procs {
		st, err := procstat.Read(p.pid)
		if err != nil {
			return r, fmt.Errorf("%s: %w", p.name, err)
		}
		begin = append(begin, st)
	}
	from := time.Now()
	if err := sleepCtx(ctx, s.o.Window); err != nil {
		return r, err
	}
	to := time.Now()
	for i, p := range procs {
		st, err := procstat.Read(p.pid)
		if err != nil {
			return r, fmt.Errorf("%s: %w", p.name, err)
		}
		r.procs = append(r.procs, procstat.UsageOver(p.name, begin[i], st))
	}
	events, err := s.c.AuditEvents()
	if err != nil {
		return r, err
	}
	r.window = to.Sub(from)
	r.requests = countRequests(events, from, to)
	return r, nil
}

// sleepCtx waits d, the length of a measurement, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// productWrites counts the product's writes, by verb and resource, among
// events received from begin to end, but the leader elections' and registrations' Lease renewals
// (the storm guard's Lease is the failover's own work and counts).
func productWrites(events []framework.AuditEvent, begin, end time.Time) map[string]int {
	by := map[string]int{}
	for _, e := range events {
		if roleOf(e.User) == "" || !isWrite(e.Verb) || e.Time.Before(begin) || e.Time.After(end) {
			continue
		}
		if e.Resource == "leases" && e.Name != contract.StormGuardLeaseName {
			continue
		}
		r := e.Resource
		if e.Subresource != "" {
			r += "/" + e.Subresource
		}
		by[e.Verb+" "+r]++
	}
	return by
}

// failNode powers off node, whose pods are the set's, and measures each
// pod's failover. With outOfService, the bench adds the out-of-service
// taint as an operator would the moment the first pod is eligible.
func (s *scaleRun) failNode(ctx context.Context, path, node, set string, outOfService bool) (failoverResult, error) {
	pods := s.o.HotPods
	r := failoverResult{path: path, pods: pods, node: node}
	cpu := procstat.StartSampler(s.c.Running, 250*time.Millisecond)
	defer cpu.Finish()
	stopProfile := func() {}
	if s.o.ProfileDir != "" {
		var err error
		if stopProfile, err = procstat.ProfileCPU(filepath.Join(s.o.ProfileDir, path+".pprof")); err != nil {
			return r, err
		}
		defer stopProfile()
	}
	begin := time.Now()
	if err := s.c.ShutDown(ctx, node); err != nil {
		return r, err
	}
	s.p.Nodes[node].PowerOff()
	if outOfService {
		// The operator's taint says the node is shut down, and it is: its
		// kernel took its mounts and I/O with it. The arrays learn it, so
		// that the plain unpublish of a driver that cannot fence is not an
		// S1 violation (it would be on a node still running).
		for _, d := range s.p.Drivers {
			if err := d.Array.PowerLoss(node); err != nil {
				return r, err
			}
		}
	}
	s.b.Logf("%s: %s powered off", path, node)
	collect := func() {
		r.moves = r.moves[:0]
		for i := 0; i < pods; i++ {
			pod := podName(set, i)
			r.moves = append(r.moves, s.t.moveOf(pod, volumeName(set, i), node, begin))
		}
	}
	if outOfService {
		if err := s.poll(ctx, 3*time.Minute, "a pod of "+node+" eligible", func() (bool, string) {
			collect()
			for _, m := range r.moves {
				if !m.eligible.IsZero() {
					return true, ""
				}
			}
			return false, "none yet"
		}); err != nil {
			return r, err
		}
		if err := s.c.AddTaint(ctx, node, corev1.Taint{Key: contract.OutOfServiceTaintKey, Value: contract.OutOfServiceTaintValue, Effect: corev1.TaintEffectNoExecute}); err != nil {
			return r, err
		}
		s.b.Logf("%s: out-of-service taint added to %s", path, node)
	}
	err := s.poll(ctx, 10*time.Minute, "every pod of "+node+" attached elsewhere", func() (bool, string) {
		collect()
		moved := len(r.samples())
		return moved == pods, fmt.Sprintf("%d/%d moved", moved, pods)
	})
	stopProfile() // the failover only, not the reading of the audit log
	collect()
	var last time.Time
	for _, m := range r.moves {
		if m.attached.After(last) {
			last = m.attached
		}
	}
	events, aerr := s.c.AuditEvents()
	if aerr != nil && err == nil {
		err = aerr
	}
	r.writes = productWrites(events, begin, last)
	r.adc = adcNodeWrites(events, node, begin, last)
	cpu.Finish()
	if w, ok := cpu.Over(r.firstEligible(), last); ok {
		r.cpu = &w
	}
	if d, ok := r.span(); ok {
		s.b.Logf("%s: every pod of %s attached elsewhere, %.2fs from the first eligible", path, node, d.Seconds())
	}
	return r, err
}

// inTree adds the in-tree path's driver (the mock without UNPUBLISH_FENCE,
// so that the product's failover leaves its pods to Kubernetes), runs
// hotPods pods with its volumes on its node, and fails it with the
// out-of-service taint.
func (s *scaleRun) inTree(ctx context.Context) (failoverResult, error) {
	r := failoverResult{path: "out-of-service", pods: s.o.HotPods}
	d, err := s.p.AddDriver(ctx, framework.DriverOptions{Name: inTreeDriver, MockArgs: []string{"--disable-fence"},
		AttacherArgs: append([]string{"--kube-api-qps=" + setupQPS, "--kube-api-burst=" + setupQPS}, measureArgs(s.o.QPS, s.plan.percent, s.o.Workers)...)})
	if err != nil {
		return r, err
	}
	if err := d.Array.RegisterNodes(0, s.plan.nodes()...); err != nil {
		return r, err
	}
	if _, err := s.p.StartNode(ctx, s.plan.intree, d); err != nil {
		return r, err
	}
	w := workload{name: "intree", group: "intree", replicas: s.o.HotPods}
	if err := s.createSet(ctx, d, w); err != nil {
		return r, err
	}
	if err := s.waitRunning(ctx, []workload{w}, 10*time.Minute); err != nil {
		return r, err
	}
	if err := s.waitInUse(ctx, s.plan.intree, s.o.HotPods); err != nil {
		return r, err
	}
	if err := s.labelSpares(ctx, "intree"); err != nil {
		return r, err
	}
	return s.failNode(ctx, "out-of-service", s.plan.intree, "intree", true)
}

// failRack powers off every node of the rack at once and follows the storm
// guard: never more nodes admitted than it allows, the rest waiting with a
// FencingDeferred Event, and the admitted nodes' pods moving elsewhere.
func (s *scaleRun) failRack(ctx context.Context) (rackResult, error) {
	r := rackResult{nodes: len(s.plan.rack), totalNodes: s.o.Nodes, percent: s.plan.percent, slots: s.plan.slots}
	r.admittedBefore = len(s.t.resetMaxima())
	room := max(0, min(len(s.plan.rack), s.plan.slots-r.admittedBefore))
	// Where each rack pod runs, before.
	podNode := map[int]string{}
	for i := 0; i < len(s.plan.rack)*s.o.RackPods; i++ {
		podNode[i] = s.t.nodeOf(podName("rack", i))
	}
	begin := time.Now()
	if err := parallel(len(s.plan.rack), s.plan.rack, func(n string) error { return s.c.ShutDown(ctx, n) }); err != nil {
		return r, err
	}
	for _, n := range s.plan.rack {
		s.p.Nodes[n].PowerOff()
	}
	s.b.Logf("rack: %d nodes powered off; the storm guard has room for %d", len(s.plan.rack), room)
	collect := func() {
		admitted := s.t.admittedNow()
		r.admitted, r.waiting, r.moves = nil, nil, nil
		for _, n := range s.plan.rack {
			if slices.Contains(admitted, n) {
				r.admitted = append(r.admitted, n)
			} else {
				r.waiting = append(r.waiting, n)
			}
		}
		for i := 0; i < len(podNode); i++ {
			if n := podNode[i]; slices.Contains(r.admitted, n) {
				r.moves = append(r.moves, s.t.moveOf(podName("rack", i), volumeName("rack", i), n, begin))
			}
		}
		r.maxAdmitted, r.maxQuarantined = s.t.maxima()
	}
	// The node lifecycle controller taints one unreachable node per 10 s
	// (--node-eviction-rate 0.1): the last node's pods become eligible
	// about rack x 10 s after the power loss.
	timeout := time.Duration(len(s.plan.rack))*12*time.Second + 5*time.Minute
	var lastEvents time.Time
	err := s.poll(ctx, timeout, "the rack's admitted nodes failed over and the others deferred", func() (bool, string) {
		collect()
		if time.Since(lastEvents) > 3*time.Second {
			lastEvents = time.Now()
			r.deferred = s.deferred(ctx, r.waiting)
		}
		res := failoverResult{pods: len(r.moves), moves: r.moves}
		moved := len(res.samples())
		done := len(r.admitted) == room && moved == len(r.moves) && r.deferred == len(r.waiting)
		return done, fmt.Sprintf("%d admitted (room %d), %d/%d of their pods moved, %d/%d waiting nodes with FencingDeferred", len(r.admitted), room, moved, len(r.moves), r.deferred, len(r.waiting))
	})
	collect()
	r.deferred = s.deferred(ctx, r.waiting)
	res := failoverResult{pods: len(r.moves), moves: r.moves}
	if _, all := res.span(); all && len(r.admitted) > 0 {
		var last time.Time
		for _, m := range r.moves {
			if m.attached.After(last) {
				last = m.attached
			}
		}
		r.allMoved = last.Sub(begin)
	}
	if err == nil && r.maxAdmitted > r.slots {
		err = fmt.Errorf("the storm guard admitted %d nodes at once, over its %d", r.maxAdmitted, r.slots)
	}
	return r, err
}

// deferred counts the nodes with a FencingDeferred Event (the storm guard's
// refusal, with its reason).
func (s *scaleRun) deferred(ctx context.Context, nodes []string) int {
	list, err := s.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", "Node"), fields.OneTermEqualSelector("reason", "FencingDeferred")).String()})
	if err != nil {
		return 0
	}
	seen := map[string]bool{}
	for _, e := range list.Items {
		seen[e.InvolvedObject.Name] = true
	}
	n := 0
	for _, node := range nodes {
		if seen[node] {
			n++
		}
	}
	return n
}

// tracker follows, from the bench's own watches, the bench's pods, every
// VolumeAttachment and Node, and the storm guard's Lease, and remembers
// when each pod was first seen Terminating and each volume first seen
// attached on each node.
type tracker struct {
	pods, vas, nodes cache.Store
	now              func() time.Time // when an event is seen

	mu          sync.Mutex
	terminating map[string]podMark              // by pod name+node: the first time seen Terminating there
	attached    map[string]map[string]time.Time // PV -> node -> first seen attached
	// The milestones of a move (moveSteps), first seen: a pod's delete
	// (by name+node), each pod's UIDs, where each pod name was placed,
	// and each volume's attachments created and deleted, by node.
	podGone                     map[string]time.Time
	podUIDs                     map[string]map[types.UID]time.Time
	placed                      map[string]map[string]time.Time
	vaCreated, vaGone           map[string]map[string]time.Time
	admitted                    []string        // the storm guard's list now
	quarantined                 map[string]bool // nodes with the quarantine taint now
	maxAdmitted, maxQuarantined int
}

type podMark struct{ at time.Time }

// stormGuardListAnnotation is the storm guard's list of admitted nodes on
// its Lease (pkg/failover's stormGuardAnnotation).
const stormGuardListAnnotation = contract.Prefix + "/fencing-nodes"

// track starts the bench's watches; the returned stop ends them and waits.
func (s *scaleRun) track(ctx context.Context) (func(), error) {
	t := &tracker{terminating: map[string]podMark{}, attached: map[string]map[string]time.Time{}, quarantined: map[string]bool{},
		podGone: map[string]time.Time{}, podUIDs: map[string]map[types.UID]time.Time{}, placed: map[string]map[string]time.Time{},
		vaCreated: map[string]map[string]time.Time{}, vaGone: map[string]map[string]time.Time{}, now: time.Now}
	s.t = t
	trim := informers.WithTransform(func(o interface{}) (interface{}, error) {
		if a, ok := o.(metav1.ObjectMetaAccessor); ok {
			a.GetObjectMeta().SetManagedFields(nil)
		}
		return o, nil
	})
	f := informers.NewSharedInformerFactoryWithOptions(s.client, 0, trim)
	pods := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithTransform(slimPod), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = groupLabel
	}))
	guard := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithNamespace(sidecar.DefaultStormGuardNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", contract.StormGuardLeaseName).String()
		}))
	podInf := pods.Core().V1().Pods().Informer()
	vaInf := f.Storage().V1().VolumeAttachments().Informer()
	nodeInf := f.Core().V1().Nodes().Informer()
	leaseInf := guard.Coordination().V1().Leases().Informer()
	t.pods, t.vas, t.nodes = podInf.GetStore(), vaInf.GetStore(), nodeInf.GetStore()
	handlers := []struct {
		inf      cache.SharedIndexInformer
		fn, gone func(o interface{})
	}{{podInf, t.onPod, t.onPodGone}, {vaInf, t.onVA, t.onVAGone}, {nodeInf, t.onNode, t.onNodeGone}, {leaseInf, t.onLease, func(interface{}) {}}}
	for _, h := range handlers {
		fn, gone := h.fn, h.gone
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: fn, UpdateFunc: func(_, o interface{}) { fn(o) },
			DeleteFunc: func(o interface{}) {
				if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				gone(o)
			},
		}); err != nil {
			return nil, err
		}
	}
	stop := make(chan struct{})
	var once sync.Once
	end := func() {
		once.Do(func() {
			close(stop)
			f.Shutdown()
			pods.Shutdown()
			guard.Shutdown()
		})
	}
	for _, fac := range []informers.SharedInformerFactory{f, pods, guard} {
		fac.Start(stop)
	}
	for _, fac := range []informers.SharedInformerFactory{f, pods, guard} {
		for typ, ok := range fac.WaitForCacheSync(ctx.Done()) {
			if !ok {
				end()
				return nil, fmt.Errorf("the bench's watch of %v did not sync", typ)
			}
		}
	}
	return end, nil
}

// slimPod keeps of a pod only what the tracker reads: the bench watches
// every pod of the cluster, and a full pod costs several KiB of its memory.
func slimPod(o interface{}) (interface{}, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, DeletionTimestamp: p.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}, nil
}

func (t *tracker) onPod(o interface{}) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	firstSeen(t.podUIDs, p.Name, p.UID, now)
	if p.Spec.NodeName == "" {
		return
	}
	firstSeen(t.placed, p.Name, p.Spec.NodeName, now)
	key := p.Name + "@" + p.Spec.NodeName
	if _, seen := t.terminating[key]; !seen && p.DeletionTimestamp != nil {
		t.terminating[key] = podMark{at: now}
	}
}

func (t *tracker) onPodGone(o interface{}) {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.podGone[p.Name+"@"+p.Spec.NodeName]; !seen {
		t.podGone[p.Name+"@"+p.Spec.NodeName] = t.now()
	}
}

// firstSeen records at under m[k1][k2] unless a time is there already.
func firstSeen[K comparable](m map[string]map[K]time.Time, k1 string, k2 K, at time.Time) {
	if m[k1] == nil {
		m[k1] = map[K]time.Time{}
	}
	if _, seen := m[k1][k2]; !seen {
		m[k1][k2] = at
	}
}

// firstAfter is the earliest time of m[k1] after since whose key is not
// skip (zero: none).
func firstAfter[K comparable](m map[string]map[K]time.Time, k1 string, skip K, since time.Time) time.Time {
	var first time.Time
	for k, at := range m[k1] {
		if k != skip && at.After(since) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// seenAfter is at if it is after since, else zero.
func seenAfter(at, since time.Time) time.Time {
	if at.After(since) {
		return at
	}
	return time.Time{}
}

// moveOf is what the tracker saw of pod's move off node, with its volume
// pv, since the node failed.
func (t *tracker) moveOf(pod, pv, node string, since time.Time) podMove {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := podMove{pod: pod, eligible: t.terminating[pod+"@"+node].at, attached: firstAfter(t.attached, pv, node, since)}
	m.steps = [len(moveSteps)]time.Time{
		seenAfter(t.podGone[pod+"@"+node], since),
		seenAfter(t.vaGone[pv][node], since),
		firstAfter(t.podUIDs, pod, "", since),
		firstAfter(t.placed, pod, node, since),
		firstAfter(t.vaCreated, pv, node, since),
		m.attached,
	}
	return m
}

func (t *tracker) onVA(o interface{}) {
	va, ok := o.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Source.PersistentVolumeName == nil {
		return
	}
	pv, now := *va.Spec.Source.PersistentVolumeName, t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	firstSeen(t.vaCreated, pv, va.Spec.NodeName, now)
	if va.Status.Attached {
		firstSeen(t.attached, pv, va.Spec.NodeName, now)
	}
}

func (t *tracker) onVAGone(o interface{}) {
	va, ok := o.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Source.PersistentVolumeName == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	firstSeen(t.vaGone, *va.Spec.Source.PersistentVolumeName, va.Spec.NodeName, t.now())
}

func (t *tracker) onNodeGone(o interface{}) {
	if n, ok := o.(*corev1.Node); ok {
		t.mu.Lock()
		delete(t.quarantined, n.Name)
		t.mu.Unlock()
	}
}

func (t *tracker) onNode(o interface{}) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	q := nodestate.Taint(n, contract.QuarantineTaintKey) != nil
	t.mu.Lock()
	defer t.mu.Unlock()
	if q {
		t.quarantined[n.Name] = true
	} else {
		delete(t.quarantined, n.Name)
	}
	t.maxQuarantined = max(t.maxQuarantined, len(t.quarantined))
}

func (t *tracker) onLease(o interface{}) {
	l, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	var list []string
	if v := l.Annotations[stormGuardListAnnotation]; v != "" {
		list = strings.Split(v, ",")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.admitted = list
	t.maxAdmitted = max(t.maxAdmitted, len(list))
}

// resetMaxima starts the maxima over from now and returns the nodes
// admitted now.
func (t *tracker) resetMaxima() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maxAdmitted, t.maxQuarantined = len(t.admitted), len(t.quarantined)
	return slices.Clone(t.admitted)
}

func (t *tracker) maxima() (admitted, quarantined int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxAdmitted, t.maxQuarantined
}

func (t *tracker) admittedNow() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.admitted)
}

// attachedCount counts the PVs seen attached now.
func (t *tracker) attachedCount(pvs map[string]bool) int {
	n := 0
	for _, o := range t.vas.List() {
		va := o.(*storagev1.VolumeAttachment)
		if va.Status.Attached && va.Spec.Source.PersistentVolumeName != nil && pvs[*va.Spec.Source.PersistentVolumeName] {
			n++
		}
	}
	return n
}

// running counts the pods running of the workloads (by name: replicas).
func (t *tracker) running(want map[string]int) int {
	n := 0
	for _, o := range t.pods.List() {
		p := o.(*corev1.Pod)
		if _, ok := want[p.Labels[appLabel]]; ok && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

func (t *tracker) nodeOf(pod string) string {
	o, ok, _ := t.pods.GetByKey("default/" + pod)
	if !ok {
		return ""
	}
	return o.(*corev1.Pod).Spec.NodeName
}

// readyNodes counts the nodes Ready and rid of the not-ready taint a new
// node carries until the node lifecycle controller saw it Ready.
func (t *tracker) readyNodes(names []string) int {
	n := 0
	for _, name := range names {
		o, ok, _ := t.nodes.GetByKey(name)
		if !ok {
			continue
		}
		node := o.(*corev1.Node)
		if framework.NodeReady(node) && !framework.HasTaint(node, corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule) {
			n++
		}
	}
	return n
}

// inUse is the length of the node's status.volumesInUse.
func (t *tracker) inUse(name string) int {
	o, ok, _ := t.nodes.GetByKey(name)
	if !ok {
		return 0
	}
	return len(o.(*corev1.Node).Status.VolumesInUse)
}
