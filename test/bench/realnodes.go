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
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/images/writer/records"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// RealNodePaths are the failover paths fence-bench measures on real nodes:
// the product's, and the in-tree out-of-service path on the same nodes
// (the power path's BMC simulator needs a node of the KWOK kind).
var RealNodePaths = []string{"automatic", "out-of-service"}

// The milestones of a failover on real nodes that the API does not show:
// the new node's kubelet's and containerd's steps, read from their logs,
// and the writer's first record on the volume (its own timestamp). All are
// this host's clock, as the watches' are.
const (
	AttachVerified     = "kubelet: attach verified"
	VolumeStaged       = "kubelet: volume staged"
	VolumeMounted      = "kubelet: volume published"
	SandboxReady       = "pod sandbox ready"
	ContainerStarted   = "container started"
	ReplacementWriting = "replacement writing"
)

// The real-node bench's workload: for each trial, a StatefulSet of one
// writer (framework.WriterStatefulSet: NotReady and unreachable tolerated
// for 2 s) on a static volume of the mock's array of its own, deployed as
// a user deploys it (deploy/kubernetes/mock-example). A volume of its own:
// a kubelet rebooted after holding a volume finds it in its reconstructed
// state and mounts it again without waiting for what a volume new to it
// waits for (its own volumesInUse reported), which would make every other
// trial's figures those of a node that happened to hold the volume.
const (
	realNS     = "default"
	realSet    = "bench-writer-%d"
	realVolume = "bench-vol-%d"
	realClass  = "fence-bench"
	// The control plane's --node-monitor-grace-period and the writer's
	// toleration: the node down -> replacement writing goal is their sum
	// plus 1.5 s.
	realGrace      = 10 * time.Second
	realToleration = 2 * time.Second
	recoveryGoal   = realGrace + realToleration + 1500*time.Millisecond
)

// realBench is the real-node bench's cluster: three real nodes, the
// controller pod on the third (cordoned: the writers run on the first two
// only); trial i's writer starts on nodes[i%2] and fails over to the other.
type realBench struct {
	b     *bench
	c     *framework.Cluster
	dep   *framework.RealDeployment
	nodes []*framework.RealNode
	n     int // trials so far, of every path
}

// runReal measures the given paths on one cluster of real nodes, one path
// after the other, and prints their tables, also when a trial fails (the
// trials so far) or the run is interrupted.
func (b *bench) runReal(ctx context.Context, trials int, paths []string) (err error) {
	var results []pathResult
	defer func() {
		if len(results) > 0 {
			b.printf("\n%s", realTables(results))
		}
	}()
	c, err := framework.Start(ctx, b, b.opts)
	if err != nil {
		return err
	}
	defer func() { b.cleanup(ctx, c, err) }()
	b.Logf("starting three real nodes and building the product's images")
	nodes, err := c.StartRealNodes(ctx, 3, framework.RealNodeOptions{Prefix: "bench", ProductImages: true})
	if err != nil {
		return err
	}
	ctrl := nodes[2]
	b.Logf("applying deploy/kubernetes/mock-example (the controller pod on %s)", ctrl.Name)
	dep, err := c.DeployMockExample(ctx, nodes, framework.RealDeployOptions{ControllerNode: ctrl.Name})
	if err != nil {
		return err
	}
	if err := c.SetUnschedulable(ctx, ctrl.Name, true); err != nil {
		return err
	}
	rb := &realBench{b: b, c: c, dep: dep, nodes: nodes[:2]}
	for _, path := range paths {
		if err := rb.setInTree(ctx, path == "out-of-service"); err != nil {
			return err
		}
		r := pathResult{path: path, trials: trials}
		for i := 0; i < trials; i++ {
			var t realTrial
			t, err = rb.trial(ctx, path)
			if err != nil {
				err = fmt.Errorf("%s trial %d: %w", path, i, err)
				break
			}
			b.printf("%s trial %d: eligible -> attached %.2fs, node down -> replacement writing %.2fs\n", path, i, t.failover.Seconds(), t.recovery.Seconds())
			r.samples = append(r.samples, t.failover)
			r.recovery = append(r.recovery, t.recovery)
			r.timelines = append(r.timelines, t.events)
		}
		if len(r.samples) > 0 {
			results = append(results, r)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// realTables are the real-node run's tables: eligible -> attached
// elsewhere and node down -> replacement writing per path, then each
// path's budget from the node down.
func realTables(results []pathResult) string {
	var sb strings.Builder
	sb.WriteString("eligible -> attached elsewhere (real nodes):\n")
	sb.WriteString(failoverTable(results))
	var rec []pathResult
	for _, r := range results {
		if len(r.recovery) > 0 {
			rec = append(rec, pathResult{path: r.path, trials: r.trials, samples: r.recovery})
		}
	}
	if len(rec) > 0 {
		fmt.Fprintf(&sb, "\nnode down -> replacement writing (real nodes; goal %.1fs: grace period %s + toleration %s + 1.5s):\n",
			recoveryGoal.Seconds(), realGrace, realToleration)
		sb.WriteString(failoverTable(rec))
		sb.WriteString("\nof which the cluster's own (node down -> replacement writing less eligible -> attached, trial by trial):\n")
		sb.WriteString(failoverTable(clusterOwn(results)))
	}
	for _, r := range results {
		if t := recoveryTable(r); t != "" {
			fmt.Fprintf(&sb, "\n%s", t)
		}
	}
	return sb.String()
}

// clusterOwn is, per path, each trial's node down -> replacement writing
// less its eligible -> attached: the control plane's detection and eviction
// and the new node's kubelet and containerd. It is what the recovery would
// be were the product's part (and the attach/detach controller's, which it
// includes) to take no time: the floor of what any failover gets on these
// nodes and timers.
func clusterOwn(results []pathResult) []pathResult {
	var own []pathResult
	for _, r := range results {
		if len(r.recovery) == 0 || len(r.recovery) != len(r.samples) {
			continue
		}
		o := pathResult{path: r.path, trials: r.trials}
		for i := range r.recovery {
			o.samples = append(o.samples, r.recovery[i]-r.samples[i])
		}
		own = append(own, o)
	}
	return own
}

// startWriter makes trial i's volume and runs its writer on on (other
// cordoned until it runs), and waits for its first writes.
func (rb *realBench) startWriter(ctx context.Context, i int, on, other *framework.RealNode) (*corev1.Pod, error) {
	c := rb.c
	set, vol := fmt.Sprintf(realSet, i), fmt.Sprintf(realVolume, i)
	if err := c.StaticVolume(ctx, rb.dep, vol, realNS, "data-"+set+"-0", realClass); err != nil {
		return nil, err
	}
	if err := c.SetUnschedulable(ctx, other.Name, true); err != nil {
		return nil, err
	}
	if _, err := c.Client.AppsV1().StatefulSets(realNS).Create(ctx, framework.WriterStatefulSet(set, realClass), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	pod, err := c.WaitWriterRunning(ctx, realNS, set+"-0", "", 3*time.Minute)
	if err != nil {
		return nil, err
	}
	if err := c.SetUnschedulable(ctx, other.Name, false); err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != on.Name {
		return nil, fmt.Errorf("the writer runs on %s, want %s", pod.Spec.NodeName, on.Name)
	}
	return pod, c.WaitWrites(ctx, realNS, pod.Name, 3, time.Minute)
}

// stopWriter deletes trial i's writer and waits until its pod is gone, so
// that the next trial's node runs its own writer only.
func (rb *realBench) stopWriter(ctx context.Context, i int) error {
	set := fmt.Sprintf(realSet, i)
	if err := rb.c.Client.AppsV1().StatefulSets(realNS).Delete(ctx, set, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return framework.WaitFor(ctx, 2*time.Minute, "writer "+set+" gone", func(ctx context.Context) (bool, error) {
		_, err := rb.c.Client.CoreV1().Pods(realNS).Get(ctx, set+"-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// setInTree turns the product's automatic failover off (the in-tree path:
// only Kubernetes' pod GC and attach/detach controller act on the
// out-of-service taint, as the KWOK bench's control plane of its own for
// that path) or on again, in the controller Deployment's csi-attacher
// container as an operator would, and waits until the new controller pod
// leads.
func (rb *realBench) setInTree(ctx context.Context, inTree bool) error {
	c := rb.c
	from, to := "NonGracefulFailover=true", "NonGracefulFailover=false"
	if !inTree {
		from, to = to, from
	}
	changed := false
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := c.Client.AppsV1().Deployments(realNS).Get(ctx, "csi-driver-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed = false
		for i, ct := range d.Spec.Template.Spec.Containers {
			if ct.Name != "csi-attacher" {
				continue
			}
			for j, a := range ct.Args {
				if strings.HasPrefix(a, "--feature-gates=") && strings.Contains(a, from) {
					d.Spec.Template.Spec.Containers[i].Args[j] = strings.Replace(a, from, to, 1)
					changed = true
				}
			}
		}
		if !changed {
			return nil
		}
		_, err = c.Client.AppsV1().Deployments(realNS).Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil || !changed {
		return err
	}
	rb.b.Logf("csi-attacher --feature-gates=%s: rolling the controller pod", to)
	lease := contract.AttacherLeaseName(framework.DriverName)
	return framework.WaitFor(ctx, 3*time.Minute, "the controller pod with "+to+" leading", func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(realNS).Get(ctx, "csi-driver-controller", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != 1 || d.Status.Replicas != 1 || d.Status.ReadyReplicas != 1 {
			return false, fmt.Errorf("rollout: %+v", d.Status)
		}
		pods, err := c.Client.CoreV1().Pods(realNS).List(ctx, metav1.ListOptions{LabelSelector: "app=csi-fence-mock-controller"})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != 1 {
			return false, fmt.Errorf("%d controller pods", len(pods.Items))
		}
		l, err := c.Client.CoordinationV1().Leases(realNS).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return strings.HasPrefix(holder, pods.Items[0].Name), fmt.Errorf("lease %s held by %q", lease, holder)
	})
}

// realTrial is what one trial measured.
type realTrial struct {
	failover time.Duration // the pod eligible -> its volume attached elsewhere
	recovery time.Duration // the node down -> the replacement's first record
	events   []timeline.Event
}

// trial runs the next trial: its writer on one of the two nodes, that node
// powered off, the writer failing over to the other; it reads the new
// node's logs and the volume for the milestones the API does not show,
// then powers the node back on and waits until it is released (on the
// out-of-service path, the operator removes the taint once it is back),
// and deletes the writer.
func (rb *realBench) trial(ctx context.Context, path string) (t realTrial, err error) {
	i := rb.n
	rb.n++
	c, victim, other := rb.c, rb.nodes[i%2], rb.nodes[(i+1)%2]
	set, vol := fmt.Sprintf(realSet, i), fmt.Sprintf(realVolume, i)
	first, err := rb.startWriter(ctx, i, victim, other)
	if err != nil {
		return t, err
	}
	rec := timeline.New(timeline.Target{Node: victim.Name, Namespace: realNS, Pod: set + "-0", PVName: vol}, nil)
	stop := make(chan struct{})
	defer func() { close(stop); rec.Wait() }()
	if err := rec.Watch(c.Client, c.Dynamic, stop); err != nil {
		return t, err
	}
	rec.Mark(timeline.NodeDown, victim.Name+" powered off")
	if err := c.Node(victim.Name).PowerOff(ctx); err != nil {
		return t, err
	}
	if path == "out-of-service" {
		// A person's taint, the moment the pod is eligible (as on KWOK).
		if err := framework.WaitFor(ctx, 2*time.Minute, "pod evicted", func(context.Context) (bool, error) { return rec.Has(timeline.PodEvicted), nil }); err != nil {
			return t, err
		}
		if err := c.AddTaint(ctx, victim.Name, corev1.Taint{Key: contract.OutOfServiceTaintKey, Value: contract.OutOfServiceTaintValue, Effect: corev1.TaintEffectNoExecute}); err != nil {
			return t, err
		}
		rec.Mark("out-of-service taint added", "by the operator")
	}
	second, err := c.WaitWriterRunning(ctx, realNS, set+"-0", first.UID, 4*time.Minute)
	if err != nil {
		return t, err
	}
	if second.Spec.NodeName != other.Name {
		return t, fmt.Errorf("the replacement runs on %s, want %s", second.Spec.NodeName, other.Name)
	}
	down, _ := rec.At(timeline.NodeDown)
	var written records.Record
	if err := framework.WaitFor(ctx, time.Minute, "the replacement's first record on the volume", func(context.Context) (bool, error) {
		var ok bool
		written, ok, err = firstRecordOf(filepath.Join(rb.dep.DataDir(vol), "writes.log"), other.Name, down)
		return ok, err
	}); err != nil {
		return t, err
	}
	if err := framework.WaitFor(ctx, time.Minute, "the volume attached to "+other.Name, func(context.Context) (bool, error) {
		return rec.Has(timeline.AttachedElsewhere), nil
	}); err != nil {
		return t, err
	}
	// What the watches saw of an earlier trial (a FencingRequest's
	// record of the same node) is not this trial's.
	var events []timeline.Event
	for _, e := range rec.Events() {
		if !e.At.Before(down) {
			events = append(events, e)
		}
	}
	events = append(events, timeline.Event{At: written.Time, What: ReplacementWriting, Detail: fmt.Sprintf("record %d on %s", written.Seq, other.Name)})
	logged, err := nodeMilestones(other.KubeletLog(), other.ContainerdLog(), second.UID, down)
	if err != nil {
		return t, err
	}
	events = append(events, logged...)
	slices.SortStableFunc(events, func(a, b timeline.Event) int { return a.At.Compare(b.At) })
	t.events = events
	var ok bool
	if t.failover, ok = rec.Since(timeline.PodEvicted, timeline.AttachedElsewhere); !ok {
		return t, fmt.Errorf("milestones missing: %v", events)
	}
	t.recovery = written.Time.Sub(down)

	// The node back, released; the next trial fails the other one.
	if err := c.Node(victim.Name).PowerOn(ctx); err != nil {
		return t, err
	}
	if path == "out-of-service" {
		if err := c.RemoveTaint(ctx, victim.Name, contract.OutOfServiceTaintKey); err != nil {
			return t, err
		}
	}
	if err := framework.WaitFor(ctx, 3*time.Minute, victim.Name+" Ready and released", func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, tt := range n.Spec.Taints {
			switch tt.Key {
			case contract.QuarantineTaintKey, corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, contract.OutOfServiceTaintKey:
				return false, fmt.Errorf("taint %s", tt.Key)
			}
		}
		return framework.NodeReady(n), nil
	}); err != nil {
		return t, err
	}
	if err := c.WaitWrites(ctx, realNS, second.Name, 3, time.Minute); err != nil {
		return t, err
	}
	return t, rb.stopWriter(ctx, i)
}

// firstRecordOf is the first record node wrote to the writer's log at
// path after since, if any yet. The volume's records must be intact.
func firstRecordOf(path, node string, since time.Time) (records.Record, bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return records.Record{}, false, err
	}
	// A record being written may be torn at the end; those before it
	// must be whole and in order.
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	}
	recs, err := records.Check(data)
	if err != nil {
		return records.Record{}, false, fmt.Errorf("%s: %w", path, err)
	}
	for _, r := range recs {
		if r.Node == node && r.Time.After(since) {
			return r, true, nil
		}
	}
	return records.Record{}, false, nil
}

// nodeMilestones reads the replacement pod's steps on its node from its
// kubelet's log (--v=2: the attach verified in the Node's status, the
// volume staged, published) and its containerd's (the sandbox, the
// container started), those after since.
func nodeMilestones(kubeletLog, containerdLog string, pod types.UID, since time.Time) ([]timeline.Event, error) {
	kl, err := os.ReadFile(kubeletLog)
	if err != nil {
		return nil, err
	}
	cl, err := os.ReadFile(containerdLog)
	if err != nil {
		return nil, err
	}
	out := kubeletMilestones(kl, pod, since)
	return append(out, containerdMilestones(cl, pod, since)...), nil
}

// kubeletSteps are the kubelet's log messages (operation_generator.go) that
// end a step of the replacement's volume, with the milestone each ends.
var kubeletSteps = []struct{ msg, what string }{
	{"Controller attach succeeded", AttachVerified},
	{"MountVolume.MountDevice succeeded", VolumeStaged},
	{"MountVolume.SetUp succeeded", VolumeMounted},
}

// kubeletMilestones finds kubeletSteps for pod (its UID is in each message)
// in a kubelet's klog output, the first of each after since.
func kubeletMilestones(log []byte, pod types.UID, since time.Time) []timeline.Event {
	var out []timeline.Event
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, string(pod)) {
			continue
		}
		for _, st := range kubeletSteps {
			if seen[st.what] || !strings.Contains(line, st.msg) {
				continue
			}
			at, err := klogTime(line, since)
			if err != nil || at.Before(since) {
				continue
			}
			seen[st.what] = true
			out = append(out, timeline.Event{At: at, What: st.what, Detail: "kubelet log"})
		}
	}
	return out
}

// klogTime reads the time of a klog line ("I1206 07:01:02.123456 ..."),
// in the year of near and the local zone (klog's).
func klogTime(line string, near time.Time) (time.Time, error) {
	if len(line) < 21 || !strings.ContainsRune("IWEF", rune(line[0])) {
		return time.Time{}, errors.New("not a klog line")
	}
	t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}, err
	}
	return t.AddDate(near.In(time.Local).Year(), 0, 0), nil
}

var (
	containerdTime = regexp.MustCompile(`^time="([^"]+)"`)
	sandboxID      = regexp.MustCompile(`returns sandbox id \\"([0-9a-f]+)\\"`)
	containerID    = regexp.MustCompile(`returns container id \\"([0-9a-f]+)\\"`)
)

// containerdMilestones finds, in a containerd's log, the replacement pod's
// sandbox ready (RunPodSandbox returned) and its container started
// (StartContainer returned), those after since.
func containerdMilestones(log []byte, pod types.UID, since time.Time) []timeline.Event {
	var out []timeline.Event
	sandbox, container := "", ""
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := containerdTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || at.Before(since) {
			continue
		}
		switch {
		case sandbox == "" && strings.Contains(line, "RunPodSandbox for") && strings.Contains(line, string(pod)):
			if s := sandboxID.FindStringSubmatch(line); s != nil {
				sandbox = s[1]
				out = append(out, timeline.Event{At: at, What: SandboxReady, Detail: "containerd log"})
			}
		case sandbox != "" && container == "" && strings.Contains(line, `CreateContainer within sandbox \"`+sandbox+`\"`):
			if s := containerID.FindStringSubmatch(line); s != nil {
				container = s[1]
			}
		case container != "" && strings.Contains(line, `StartContainer for \"`+container+`\" returns successfully`):
			out = append(out, timeline.Event{At: at, What: ContainerStarted, Detail: "containerd log"})
			return out
		}
	}
	return out
}
