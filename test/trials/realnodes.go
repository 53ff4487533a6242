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

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/images/writer/records"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// Trials on real nodes (issue 41): a kubelet and containerd per node, the
// product deployed from deploy/kubernetes/mock-example with the images
// built here, the workload a StatefulSet whose container writes numbered
// records through the mock's FUSE data path (which a fence cuts). A trial
// fails a node as on KWOK nodes, follows the failover until the
// replacement writes, brings the node back and runs the checks of every
// trial (S1 and S2 on the array, S3 from the audit log, S6 once the node is
// back) and one more: the records on the volume numbered without a gap or
// a repeat, none from the old node after the replacement's first.

// RealHooks are a schedule's faults on real nodes, where the product runs
// in pods (the controller Deployment's csi-fence-attacher, the node
// DaemonSet's node plugin and node agent) rather than as the harness's
// processes. Each has the meaning of the Schedule field of its name.
type RealHooks struct {
	Before      func(ctx context.Context, t *Trial) ([]string, error)
	During      func(ctx context.Context, t *Trial) ([]string, error)
	AfterReturn func(ctx context.Context, t *Trial) ([]string, error)
}

// RealEnv is what trials on real nodes run on: the real nodes and the mock
// example deployed on them.
type RealEnv struct {
	Cluster *framework.Cluster
	// Workers are the nodes a trial fails (and may move a replica to).
	Workers []*framework.RealNode
	// Controller runs the controller Deployment's pod; it is never failed
	// (the product's failover of its own controller is the Deployment's,
	// not this product's), but may run a replacement.
	Controller *framework.RealNode
	Deployment *framework.RealDeployment
	// Second is the example installed once more as a second driver
	// (realSecondPrefix), on the first trial that needs it
	// (Schedule.SecondDriver; nil until then). It stays: the trials of
	// other schedules use the first driver's volumes only, and kill the
	// first driver's processes only.
	Second *framework.RealDeployment
}

// realPrefix names the real nodes (framework.RealNodeOptions.Prefix);
// maxSocketPath is the longest path a unix socket may have.
const (
	realPrefix    = "trial"
	maxSocketPath = 107
)

// realWorkers is how many nodes a trial may fail at once (two-nodes).
const realWorkers = 2

// realSecondPrefix is the name prefix of the second driver's install
// (framework.RealDeployOptions.NamePrefix): the driver is
// t2-fence.csi-fence.io. Short: its registration socket's path below a
// real node's kubelet root is within a unix socket's 107 bytes with a
// -workdir like /work/rt2d (trial2- made it 108).
const realSecondPrefix = "t2-"

// socketFits returns an error when the registration socket of driver on
// the real nodes of c would be longer than a unix socket path may be: the
// kubelet's plugin watcher dials it below its root, a longer path fails
// with "invalid argument", and the driver never registers.
func socketFits(c *framework.Cluster, driver string) error {
	sock := filepath.Join(c.NodesDir(), realPrefix+"-0", "kubelet", "plugins_registry", driver+"-reg.sock")
	if len(sock) > maxSocketPath {
		return fmt.Errorf("the work dir %s is too deep for real nodes: the registration socket %s would be %d bytes, a unix socket path has at most %d (pick a shorter -workdir)", c.WorkDir, sock, len(sock), maxSocketPath)
	}
	return nil
}

// StartReal starts the real nodes on c and deploys the mock example on
// them, its controller on a node of its own.
func StartReal(ctx context.Context, c *framework.Cluster) (*RealEnv, error) {
	if err := socketFits(c, framework.DriverName); err != nil {
		return nil, err
	}
	nodes, err := c.StartRealNodes(ctx, realWorkers+1, framework.RealNodeOptions{Prefix: realPrefix, ProductImages: true})
	if err != nil {
		return nil, err
	}
	ctrl := nodes[len(nodes)-1]
	dep, err := c.DeployMockExample(ctx, nodes, framework.RealDeployOptions{ControllerNode: ctrl.Name})
	if err != nil {
		return nil, err
	}
	return &RealEnv{Cluster: c, Workers: nodes[:len(nodes)-1], Controller: ctrl, Deployment: dep}, nil
}

// secondDriver returns the second driver's install, deploying it on the
// real nodes first if it is not there yet, its controller on the first's
// node; the steps say when it was deployed.
func (env *RealEnv) secondDriver(ctx context.Context) (*framework.RealDeployment, []string, error) {
	if env.Second != nil {
		return env.Second, nil, nil
	}
	if err := socketFits(env.Cluster, realSecondPrefix+framework.DriverName); err != nil {
		return nil, nil, err
	}
	begin := time.Now()
	nodes := append(slices.Clone(env.Workers), env.Controller)
	d, err := env.Cluster.DeployMockExample(ctx, nodes, framework.RealDeployOptions{ControllerNode: env.Controller.Name, NamePrefix: realSecondPrefix})
	if err != nil {
		return nil, nil, fmt.Errorf("deploying the second driver: %w", err)
	}
	env.Second = d
	return d, []string{fmt.Sprintf("second driver %s deployed (%.1fs)", d.Driver, time.Since(begin).Seconds())}, nil
}

// deployments are the env's installs of the example: the first driver's,
// and the second's once deployed.
func (env *RealEnv) deployments() []*framework.RealDeployment {
	if env.Second == nil {
		return []*framework.RealDeployment{env.Deployment}
	}
	return []*framework.RealDeployment{env.Deployment, env.Second}
}

// SchedulesOn returns the schedules that run on real nodes (real) or on
// KWOK nodes, in the order a fixed run covers them.
func SchedulesOn(real bool) []Schedule {
	var out []Schedule
	for _, s := range Schedules {
		if real && s.Real != nil || !real && !s.RealOnly {
			out = append(out, s)
		}
	}
	return out
}

// ScheduleOn returns the schedule called name that runs on real nodes
// (real) or on KWOK nodes, or an error that says why there is none.
func ScheduleOn(name string, real bool) (Schedule, error) {
	s, ok := ByName(name)
	switch {
	case !ok:
		return Schedule{}, fmt.Errorf("unknown schedule %q", name)
	case real && s.Real == nil:
		return Schedule{}, fmt.Errorf("schedule %q runs on KWOK nodes only (it drives what only the simulated kubelet or the harness's own processes have)", name)
	case !real && s.RealOnly:
		return Schedule{}, fmt.Errorf("schedule %q runs on real nodes only (--nodes=real)", name)
	}
	return s, nil
}

// RunReal runs one trial of s (which must have Real hooks) with seed on
// the real nodes of env.
func RunReal(ctx context.Context, env *RealEnv, s Schedule, seed int64) Result {
	t := &Trial{Seed: seed, Schedule: s, Rng: rand.New(rand.NewSource(seed)), c: env.Cluster, real: env}
	return t.runChecked(ctx, func(res *Result) ([]string, error) { return t.runReal(ctx, res) }, func() error { return t.teardownReal(ctx) })
}

// realClass is the StorageClass name of the trials' static volumes (no
// StorageClass object: a static PersistentVolume binds by the name).
const realClass = "fence-trial"

func (t *Trial) runReal(ctx context.Context, res *Result) ([]string, error) {
	h := t.Schedule.Real
	if h == nil {
		return nil, fmt.Errorf("schedule %s does not run on real nodes", t.Schedule.Name)
	}
	env := t.real
	n := max(t.Schedule.Victims, 1)
	if n > len(env.Workers) {
		return nil, fmt.Errorf("schedule %s fails %d nodes, the real nodes have %d workers", t.Schedule.Name, n, len(env.Workers))
	}
	var steps []string
	if t.Schedule.SecondDriver {
		_, more, err := env.secondDriver(ctx)
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
	}
	t.ns = fmt.Sprintf("t%d", t.Seed%100000)
	if _, err := t.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t.ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	defer close(stop)
	t.stop = stop
	if err := t.pods.watch(t.c.Client, t.ns, stop); err != nil {
		return nil, err
	}
	go t.supervise(ctx, stop)
	defer t.runAtEnd(ctx, res)
	// A trial that ended early brings its nodes back all the same: the
	// next trials share them (RealEnv.Usable).
	defer func() {
		for _, v := range t.victims {
			if more, err := t.bringBack(ctx, v); err != nil {
				res.Problems = append(res.Problems, "bringing "+v.node+" back after the trial: "+err.Error())
			} else if len(more) > 0 {
				t.mu.Lock()
				t.supervised = append(t.supervised, "after the trial's end: "+strings.Join(more, ", "))
				t.mu.Unlock()
			}
		}
	}()
	for i, w := range t.Rng.Perm(len(env.Workers))[:n] {
		v, err := t.startRealWriter(ctx, i, env.Workers[w].Name)
		if err != nil {
			return steps, err
		}
		v.rec = timeline.New(timeline.Target{Node: v.node, Namespace: t.ns, Pod: v.pod, PVName: v.volume}, nil)
		if err := v.rec.Watch(t.c.Client, t.c.Dynamic, stop); err != nil {
			return steps, err
		}
		if err := t.watchReady(v.node, stop); err != nil {
			return steps, err
		}
		if err := t.watchLease(v.node, stop); err != nil {
			return steps, err
		}
		t.victims = append(t.victims, v)
	}
	t.Victim, t.Volume = t.victims[0].node, t.victims[0].volume
	if t.Schedule.SecondDriver {
		more, err := t.secondDriverRefuses()
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
	}
	if h.Before != nil {
		more, err := h.Before(ctx, t)
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
	}
	how := "power-off"
	if t.Schedule.Partition {
		how = "partition (its writer keeps writing)"
	}
	for _, v := range t.victims {
		v.rec.Mark(timeline.NodeDown, v.node+" "+how)
		steps = append(steps, how+" of "+v.node)
		var err error
		if t.Schedule.Partition {
			err = t.c.Node(v.node).Partition(ctx)
		} else {
			err = t.c.Node(v.node).PowerOff(ctx)
		}
		v.down = true
		if err != nil {
			return steps, err
		}
	}
	for _, v := range t.victims {
		if err := t.c.WaitNodeNotReady(ctx, v.node, 60*time.Second); err != nil {
			return steps, err
		}
	}
	if h.During != nil {
		more, err := h.During(ctx, t)
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
	}
	// Each replica runs (and writes) elsewhere, or, when its node came
	// back first, anywhere; then its node comes back. The replicas are
	// followed together: the storm guard may fence the next node only once
	// the first is back and released (two of the three real nodes are
	// more than its default share).
	err := framework.WaitFor(ctx, 300*time.Second, "every replica running and writing again", func(ctx context.Context) (bool, error) {
		var waiting []string
		for _, v := range t.victims {
			if v.newNode != "" {
				continue
			}
			if on := t.heldOnFailedNode(ctx, v); on != "" {
				// The storm guard fences that node only once v's
				// is back and released: bring v's back first.
				steps = append(steps, fmt.Sprintf("the replacement of %s is bound to %s, which failed too", v.pod, on))
				more, err := t.bringBack(ctx, v)
				steps = append(steps, more...)
				if err != nil {
					return false, err
				}
				v.backEarly = true
			}
			pod, why := t.replacement(ctx, v)
			if pod == nil {
				waiting = append(waiting, why)
				continue
			}
			if d, ok := v.rec.Since(timeline.NodeDown, timeline.AttachedElsewhere); ok {
				res.Recovery = max(res.Recovery, d)
			}
			if d, ok := v.rec.Since(timeline.PodEvicted, timeline.AttachedElsewhere); ok {
				res.Failover = max(res.Failover, d)
			}
			if err := t.c.WaitWrites(ctx, t.ns, pod.Name, 3, 60*time.Second); err != nil {
				return false, fmt.Errorf("the replacement on %s: %w", pod.Spec.NodeName, err)
			}
			v.newNode = pod.Spec.NodeName
			steps = append(steps, fmt.Sprintf("%s writes on %s", v.pod, v.newNode))
			more, err := t.bringBack(ctx, v)
			steps = append(steps, more...)
			if err != nil {
				return false, err
			}
		}
		return len(waiting) == 0, errors.New(strings.Join(waiting, "; "))
	})
	if err != nil {
		return steps, err
	}
	if h.AfterReturn != nil {
		more, err := h.AfterReturn(ctx, t)
		steps = append(steps, more...)
		if err != nil {
			return steps, err
		}
	}
	return steps, t.waitSettled(ctx)
}

// startRealWriter makes replica i's volume and runs its writer on node (the
// other nodes cordoned until it runs), and waits for its first writes.
func (t *Trial) startRealWriter(ctx context.Context, i int, node string) (*victim, error) {
	set := fmt.Sprintf("w%d", i)
	v := &victim{node: node, volume: fmt.Sprintf("%s-v%d", t.ns, i), replica: i, pod: set + "-0"}
	if err := t.c.StaticVolume(ctx, t.real.Deployment, v.volume, t.ns, "data-"+v.pod, realClass); err != nil {
		return nil, err
	}
	sts := framework.WriterStatefulSet(set, realClass)
	if t.Schedule.SecondDriver {
		v.volume2 = v.volume + "-2"
		if err := t.c.StaticVolume(ctx, t.real.Second, v.volume2, t.ns, realClaim2+"-"+v.pod, realClass2); err != nil {
			return nil, err
		}
		withSecondVolume(sts)
	}
	others := t.realNodeNames()
	others = slices.DeleteFunc(others, func(n string) bool { return n == node })
	for _, o := range others {
		if err := t.c.SetUnschedulable(ctx, o, true); err != nil {
			return nil, err
		}
	}
	uncordon := func() error {
		var errs []error
		for _, o := range others {
			errs = append(errs, t.c.SetUnschedulable(ctx, o, false))
		}
		return errors.Join(errs...)
	}
	if _, err := t.c.Client.AppsV1().StatefulSets(t.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return nil, errors.Join(err, uncordon())
	}
	pod, err := t.c.WaitWriterRunning(ctx, t.ns, v.pod, "", 3*time.Minute)
	if err := errors.Join(err, uncordon()); err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != node {
		return nil, fmt.Errorf("the writer %s runs on %s, want %s", v.pod, pod.Spec.NodeName, node)
	}
	v.uid = pod.UID
	return v, t.c.WaitWrites(ctx, t.ns, v.pod, 5, time.Minute)
}

// The second driver's volume of a writer (Schedule.SecondDriver): a claim
// template of a class of its own, mounted beside the records' volume. The
// writer does not write to it; it is attached, fenced and moved with the
// pod all the same.
const (
	realClass2 = "fence-trial2"
	realClaim2 = "data2"
)

// withSecondVolume adds the second driver's volume to the writer sts.
func withSecondVolume(sts *appsv1.StatefulSet) {
	claim := *sts.Spec.VolumeClaimTemplates[0].DeepCopy()
	claim.Name, claim.Spec.StorageClassName = realClaim2, ptr.To(realClass2)
	sts.Spec.VolumeClaimTemplates = append(sts.Spec.VolumeClaimTemplates, claim)
	c := &sts.Spec.Template.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: realClaim2, MountPath: "/" + realClaim2})
}

// secondDriverRefuses has the second driver refuse its next 1 to 3
// ControllerUnpublishVolume calls (its fault store, in its state dir): the
// fences of its volumes, the only ones it gets in the trial. At the
// trial's end, the refusals must have been used up (the volume was fenced
// after them), and what is left is cleared for the trials after.
func (t *Trial) secondDriverRefuses() ([]string, error) {
	d := t.real.Second
	n := 1 + t.Rng.Intn(3)
	store := faults.NewStore(d.StateDir)
	const method = "ControllerUnpublishVolume"
	if err := store.Set(method, faults.Fault{Code: codes.FailedPrecondition, Count: n}); err != nil {
		return nil, err
	}
	t.atEnd(func(context.Context) error {
		left, err := store.List()
		if err != nil {
			return err
		}
		moved := !slices.ContainsFunc(t.victims, func(v *victim) bool { return v.newNode == "" })
		if f, ok := left[method]; ok && moved {
			t.broken("the second driver %s refused %d of its %d fences only, yet its volumes moved", d.Driver, n-f.Count, n)
		}
		return store.Clear()
	})
	return []string{fmt.Sprintf("second driver %s refuses its next %d fences", d.Driver, n)}, nil
}

// realNodeNames are the names of every real node of the trial's env.
func (t *Trial) realNodeNames() []string {
	var out []string
	for _, n := range append(slices.Clone(t.real.Workers), t.real.Controller) {
		out = append(out, n.Name)
	}
	return out
}

// replacement returns v's replacement pod if it runs elsewhere (or,
// SameNodeOK, anywhere), else nil and why not.
func (t *Trial) replacement(ctx context.Context, v *victim) (*corev1.Pod, string) {
	p, err := t.c.Client.CoreV1().Pods(t.ns).Get(ctx, v.pod, metav1.GetOptions{})
	switch {
	case err != nil:
		return nil, err.Error()
	case p.UID == v.uid || p.Status.Phase != corev1.PodRunning:
		return nil, fmt.Sprintf("pod %s (old: %t) %s on %q", p.Name, p.UID == v.uid, p.Status.Phase, p.Spec.NodeName)
	case p.Spec.NodeName == v.node && !t.Schedule.SameNodeOK && !v.backEarly:
		return nil, fmt.Sprintf("the replacement of %s runs on the failed node %s", p.Name, v.node)
	}
	return p, ""
}

// heldOnFailedNode returns the node of another victim, failed and not back,
// that v's replacement is bound to, or "". The scheduler may bind it there
// when that node's failure is not yet noticed (no unreachable taint): both
// nodes fail within a second, and each goes NotReady up to a lease renewal
// period apart.
func (t *Trial) heldOnFailedNode(ctx context.Context, v *victim) string {
	if !v.down {
		return ""
	}
	p, err := t.c.Client.CoreV1().Pods(t.ns).Get(ctx, v.pod, metav1.GetOptions{})
	if err != nil || p.UID == v.uid || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodPending {
		return ""
	}
	for _, u := range t.victims {
		if u != v && u.down && u.node == p.Spec.NodeName {
			return u.node
		}
	}
	return ""
}

// bringBack powers v's node on, or connects it again, unless a schedule
// did already.
func (t *Trial) bringBack(ctx context.Context, v *victim) ([]string, error) {
	if !v.down {
		return nil, nil
	}
	v.down = false
	v.rec.Mark(timeline.NodeBack, v.node)
	if t.Schedule.Partition {
		return []string{"connect " + v.node + " again"}, t.c.Node(v.node).Heal(ctx)
	}
	return []string{"power on " + v.node}, t.c.Node(v.node).PowerOn(ctx)
}

// atEnd registers f to run when the trial's faults are over, before its
// checks (a schedule's undoing of what it changed in the deployment).
func (t *Trial) atEnd(f func(ctx context.Context) error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ends = append(t.ends, f)
}

func (t *Trial) runAtEnd(ctx context.Context, res *Result) {
	t.mu.Lock()
	ends := t.ends
	t.ends = nil
	t.mu.Unlock()
	for i := len(ends) - 1; i >= 0; i-- {
		if err := ends[i](ctx); err != nil {
			res.Problems = append(res.Problems, "restoring the deployment: "+err.Error())
		}
	}
}

// checkRecords checks the writer's records on each replica's volume:
// numbered 1, 2, 3, ... without a gap, a repeat or a torn record, at least
// one from the replacement, and none from the failed node after the
// replacement's first (the fence cut the old writer off before the new one
// wrote).
func (t *Trial) checkRecords() []string {
	var out []string
	for _, v := range t.victims {
		data, err := os.ReadFile(filepath.Join(t.real.Deployment.DataDir(v.volume), "writes.log"))
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		out = append(out, recordProblems(v.volume, data, v.node, v.newNode)...)
	}
	return out
}

// recordProblems returns what is wrong with the records data of volume,
// written first on node old and then on node replacement ("": the
// replacement never ran, nothing is checked of it; old: it ran on the same
// node again).
func recordProblems(volume string, data []byte, old, replacement string) []string {
	recs, err := records.Check(data)
	var out []string
	if err != nil {
		out = append(out, fmt.Sprintf("records on %s: %v", volume, err))
	}
	if replacement == "" || replacement == old {
		return out
	}
	first := slices.IndexFunc(recs, func(r records.Record) bool { return r.Node == replacement })
	if first < 0 {
		return append(out, fmt.Sprintf("records on %s: none from the replacement on %s", volume, replacement))
	}
	for _, r := range recs[first:] {
		if r.Node == old {
			out = append(out, fmt.Sprintf("records on %s: record %d from the failed node %s after the replacement's first (%d)", volume, r.Seq, old, recs[first].Seq))
			break
		}
	}
	return out
}

// teardownReal removes the trial's namespace (its StatefulSets, pods and
// claims) and, once detached, its PersistentVolumes.
func (t *Trial) teardownReal(ctx context.Context) error {
	if t.ns == "" {
		return nil
	}
	if err := t.c.Client.CoreV1().Namespaces().Delete(ctx, t.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	var volumes []string
	for _, v := range t.victims {
		volumes = append(volumes, v.volume)
		if v.volume2 != "" {
			volumes = append(volumes, v.volume2)
		}
	}
	err := framework.WaitFor(ctx, teardownTimeout, "namespace "+t.ns+" gone and its volumes detached", func(ctx context.Context) (bool, error) {
		if _, err := t.c.Client.CoreV1().Namespaces().Get(ctx, t.ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("namespace still there (%v)", err)
		}
		vas, err := t.c.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, va := range vas.Items {
			if pv := va.Spec.Source.PersistentVolumeName; pv != nil && slices.Contains(volumes, *pv) {
				return false, fmt.Errorf("%s still attached to %s", *pv, va.Spec.NodeName)
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range volumes {
		if err := t.c.Client.CoreV1().PersistentVolumes().Delete(ctx, v, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Real-node faults of the product's pods: processes found in a node's
// cgroup by their command line, killed as a crash kills them; their
// kubelet restarts them as it restarts any container.

// productProcesses returns the pids of node's processes whose executable is
// bin and whose --role flag is role ("" for none or --role=controller).
func (t *Trial) productProcesses(node *framework.RealNode, bin, role string) ([]int, error) {
	pids, err := t.c.Processes(node)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != bin {
			continue
		}
		has := ""
		for _, a := range args[1:] {
			if r, ok := strings.CutPrefix(a, "--role="); ok {
				has = r
			}
		}
		if (has == role || role == "" && has == "controller") && !t.ofSecondDriver(pid) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// ofSecondDriver says whether process pid runs in a pod of the second
// driver's install: its host name, the pod's, has the install's prefix.
// The schedules' faults of the product's processes are the first driver's.
func (t *Trial) ofSecondDriver(pid int) bool {
	if t.real.Second == nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if host, ok := strings.CutPrefix(kv, "HOSTNAME="); ok {
			return strings.HasPrefix(host, t.real.Second.NamePrefix)
		}
	}
	return false
}

// killProduct kills (SIGKILL) node's processes of bin in role; there must
// be at least one.
func (t *Trial) killProduct(node *framework.RealNode, bin, role string) (int, error) {
	pids, err := t.productProcesses(node, bin, role)
	if err != nil {
		return 0, err
	}
	if len(pids) == 0 {
		return 0, fmt.Errorf("no %s --role=%q on %s", bin, role, node.Name)
	}
	for _, pid := range pids {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill() // it may have exited meanwhile
		}
	}
	return len(pids), nil
}

// realNode returns the real node called name.
func (t *Trial) realNode(name string) *framework.RealNode {
	for _, n := range append(slices.Clone(t.real.Workers), t.real.Controller) {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// realKillController kills the controller's csi-fence-attacher (kill -9)
// at a random moment after NotReady; its kubelet restarts the container.
func realKillController(ctx context.Context, t *Trial) ([]string, error) {
	d := t.between(0, 4*time.Second)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	if _, err := t.killProduct(t.real.Controller, "csi-fence-attacher", ""); err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("kill -9 controller at NotReady+%.2fs (its kubelet restarts it)", d.Seconds())}, nil
}

// realReturnMidFence makes the fence slow and brings the node back while
// its RPC is in flight.
func realReturnMidFence(ctx context.Context, t *Trial) ([]string, error) {
	if err := t.waitFenceInFlight(ctx); err != nil {
		return nil, err
	}
	steps := []string{"node back mid-fence"}
	more, err := t.bringBack(ctx, t.victims[0])
	return append(steps, more...), err
}

// realSlowFence returns a Before hook that makes the next
// ControllerUnpublishVolume, the trial's fence, take a random latency in
// [lo, hi) (Trial.slowLatency), until the trial's end. On real nodes it is
// set before the node fails: set once the node is NotReady, as on KWOK, a
// fence that a loaded machine let start before the harness saw NotReady
// was over at once (seed 12070, at a load of 40), and the schedule never
// saw it in flight.
func realSlowFence(lo, hi time.Duration) func(context.Context, *Trial) ([]string, error) {
	return func(_ context.Context, t *Trial) ([]string, error) {
		latency, clear, err := t.slowFenceNoWait(lo, hi)
		if err != nil {
			return nil, err
		}
		t.slowLatency = latency
		t.atEnd(func(context.Context) error { clear(); return nil })
		return []string{fmt.Sprintf("fence latency %.2fs", latency.Seconds())}, nil
	}
}

// realRebootDuringCleanup reboots the node that came back (power off and
// on: its node agent and node plugin killed with everything else) at a
// random moment of its cleanup.
func realRebootDuringCleanup(ctx context.Context, t *Trial) ([]string, error) {
	d := t.between(0, 1500*time.Millisecond)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	n := t.c.Node(t.Victim)
	if err := n.PowerOff(ctx); err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("reboot %.2fs after it was Ready again", d.Seconds())}, n.PowerOn(ctx)
}

// realNodePluginCrash kills the node plugin (csi-fence-mock --role=node)
// of the node that came back at a random moment of its cleanup, 0-1.5 s
// after it started again: the node
// agent's forced unpublish and unstage meet a plugin that is gone, its
// FUSE mounts dead, until the kubelet restarts it and the plugin watcher
// registers it again.
func realNodePluginCrash(ctx context.Context, t *Trial) ([]string, error) {
	// The node is Ready before its DaemonSet's containers run again
	// (seed 4105 found none): the moment is drawn from the plugin's start.
	node := t.realNode(t.Victim)
	begin := time.Now()
	err := framework.WaitFor(ctx, 90*time.Second, "the node plugin of "+t.Victim+" running again", func(context.Context) (bool, error) {
		pids, err := t.productProcesses(node, "csi-fence-mock", "node")
		return len(pids) > 0, err
	})
	if err != nil {
		return nil, err
	}
	started := time.Since(begin)
	d := t.between(0, 1500*time.Millisecond)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	k, err := t.killProduct(node, "csi-fence-mock", "node")
	if err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("kill -9 node plugin (%d processes) %.2fs after it started again, %.2fs after the node was Ready", k, d.Seconds(), started.Seconds())}, nil
}

// controllerReplicas sets the controller Deployment's replicas.
func (t *Trial) controllerReplicas(ctx context.Context, n int) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := t.c.Client.AppsV1().Deployments(realNamespace).Patch(ctx, realController, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// Names of the mock example's controller (framework's, deploy/kubernetes/mock-example).
const (
	realNamespace  = "default"
	realController = "csi-driver-controller"
)

// waitControllerSettled waits until the controller Deployment runs its
// replicas, all updated and ready, and nothing else.
func (t *Trial) waitControllerSettled(ctx context.Context) error {
	return framework.WaitFor(ctx, 3*time.Minute, "the controller Deployment settled", func(ctx context.Context) (bool, error) {
		d, err := t.c.Client.AppsV1().Deployments(realNamespace).Get(ctx, realController, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.Replicas == want && s.UpdatedReplicas == want && s.ReadyReplicas == want,
			fmt.Errorf("status %+v", s)
	})
}

// realLeaderLoss runs a second controller replica and deletes the leader's
// pod (SIGTERM) at a random moment after NotReady; the steps say when the
// fence of the trial's volume reached the array against the takeover.
func realLeaderLoss(ctx context.Context, t *Trial) ([]string, error) {
	t.atEnd(func(ctx context.Context) error {
		if err := t.controllerReplicas(ctx, 1); err != nil {
			return err
		}
		return t.waitControllerSettled(ctx)
	})
	started := time.Now()
	if err := t.controllerReplicas(ctx, 2); err != nil {
		return nil, err
	}
	if err := t.waitControllerSettled(ctx); err != nil {
		return nil, err
	}
	d := t.between(0, 3*time.Second)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	held, err := t.handedOverLeases(ctx)
	if err != nil {
		return nil, err
	}
	leader, err := t.leaderPod(held)
	if err != nil {
		return nil, err
	}
	if err := t.c.Client.CoreV1().Pods(realNamespace).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	sigterm := time.Now()
	steps := []string{fmt.Sprintf("second replica Ready %.2fs after the scale-up; leader %s deleted at +%.2fs", sigterm.Sub(started).Seconds()-d.Seconds(), leader, d.Seconds())}
	if err := t.waitLeasesTakenOver(ctx, held, "the other replica holding the leader's Leases"); err != nil {
		return steps, err
	}
	t.stall = time.Since(sigterm)
	return append(steps, fmt.Sprintf("Leases taken over %.2fs after the deletion", t.stall.Seconds())), nil
}

// leaderPod returns the controller pod that holds the Leases in held
// (handedOverLeases): the holder of the node-fencing Lease, whose identity
// is the pod's host name, then "_" and the driver, when this driver's
// controller holds it; else the holder of external-attacher's Lease, whose
// identity is the host name alone. The node-fencing Lease may be the second
// driver's (a power-off+two-drivers trial before this one installed it),
// and then is not in held.
func (t *Trial) leaderPod(held map[string]string) (string, error) {
	for _, holder := range held {
		if pod, _, ok := strings.Cut(holder, "_"); ok && pod != "" {
			return pod, nil
		}
	}
	if pod := held["default/"+contract.AttacherLeaseName(framework.DriverName)]; pod != "" {
		return pod, nil
	}
	return "", fmt.Errorf("no leader pod among the Lease holders %v", held)
}

// realRollingUpdate rolls the controller Deployment (its pod template
// changed, as `kubectl rollout restart` does) in the middle of a slow
// fence: the new pod starts and is Ready as a standby, the old one is
// terminated and hands its Leases over. Its stall is the leader's
// termination to the Leases held by the new pod.
func realRollingUpdate(ctx context.Context, t *Trial) ([]string, error) {
	if err := t.waitFenceInFlight(ctx); err != nil {
		return nil, err
	}
	d := t.between(0, t.slowLatency/2)
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	held, err := t.handedOverLeases(ctx)
	if err != nil {
		return nil, err
	}
	old, err := t.leaderPod(held)
	if err != nil {
		return nil, err
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := t.c.Client.AppsV1().Deployments(realNamespace).Patch(ctx, realController, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return nil, err
	}
	rolled := time.Now()
	steps := []string{fmt.Sprintf("rolling update %.2fs into a %.2fs fence", d.Seconds(), t.slowLatency.Seconds())}
	var terminated time.Time
	err = framework.WaitFor(ctx, 3*time.Minute, "the old leader "+old+" terminating", func(ctx context.Context) (bool, error) {
		p, err := t.c.Client.CoreV1().Pods(realNamespace).Get(ctx, old, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil {
			terminated = time.Now()
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return steps, err
	}
	if err := t.waitLeasesTakenOver(ctx, held, "the new pod holding the leader's Leases"); err != nil {
		return steps, err
	}
	t.stall = time.Since(terminated)
	steps = append(steps, fmt.Sprintf("old leader terminating %.2fs after the update, Leases held by the new pod %.2fs later", terminated.Sub(rolled).Seconds(), t.stall.Seconds()))
	return steps, t.waitControllerSettled(ctx)
}

// Usable waits up to timeout until every real node is Ready, schedulable
// and holds nothing of a failover (the S6 leftovers). The trials share the
// nodes: after a trial that failed and left one quarantined, every later
// trial would fail in its setup and say nothing of the product, so a run
// stops instead (cmd/fence-trials).
func (env *RealEnv) Usable(ctx context.Context, timeout time.Duration) error {
	t := &Trial{c: env.Cluster, real: env}
	var left []string
	err := framework.WaitFor(ctx, timeout, "the real nodes usable", func(ctx context.Context) (bool, error) {
		left = nil
		for _, name := range t.realNodeNames() {
			n, err := env.Cluster.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !framework.NodeReady(n) {
				left = append(left, name+": not Ready")
			}
			if n.Spec.Unschedulable {
				left = append(left, name+": cordoned")
			}
			left = append(left, t.leftovers(ctx, name)...)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.Join(left, "; "))
	}
	return nil
}
