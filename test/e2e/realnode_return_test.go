//go:build e2e

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

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// returnNegativeEnv selects a negative control of TestRealNodesReturn, which
// must then fail:
//   - "no-node-agent": the node DaemonSet runs without the node agent
//     (RealDeployOptions.NoNodeAgent); nothing force-unpublishes the fenced
//     volume on the returned node, the kubelet's own plain NodeUnpublish is
//     refused by the driver, so the leftovers stay and the node stays
//     quarantined: the wait for its release times out.
const returnNegativeEnv = "FENCE_E2E_REAL_RETURN_NEGATIVE"

// The workload both return tests fail over (a static PV named as its handle).
const (
	realVolume = "vol-real-0"
	realSet    = "writer"
	realNS     = "default"
	realClass  = "fence-real"
)

// TestRealNodesReturn fails a StatefulSet writer over from a real node that
// is powered off (as TestRealNodesFailover does), then powers the node on
// again, as a machine that rebooted: its mounts and containers are gone,
// the real kubelet's directories stay. It checks what the product promises
// for a node that comes back (DESIGN.md section 5 step 7, S2, S6, S8):
//
//   - before anything of the node runs, its disk holds what the real
//     kubelet left of the volume at the paths the kubelet staged and
//     published it at (the array recorded them): the publish and staging
//     directories, each beside its vol_data.json, no longer mount points
//     (the reboot took the mounts); pkg/kubeletlayout's Scan finds exactly
//     these and attributes them to the volume;
//   - the node agent, run by the kubelet again in the node DaemonSet, calls
//     NodeUnpublishVolume and NodeUnstageVolume with force=true through the
//     real node plugin at exactly those paths (the plugin's log);
//   - the FencingRequest's entry gets its cleanedTime, and only after that
//     (etcd revisions, one etcd: the watches' order is the writes' order)
//     the quarantine taint goes and the request completes and loses its
//     finalizer; the node was Ready and still quarantined before;
//   - nothing of the volume is left on the node's disk, the array holds
//     nothing of it on the node and saw no publish there while it was
//     quarantined (S2) nor any other violation; the node ends Ready and
//     schedulable.
func TestRealNodesReturn(t *testing.T) {
	testRealNodeReturn(t, returnReboot)
}

// TestRealNodesReturnHung is TestRealNodesReturn for a node whose processes
// never died: it hangs (every process frozen where it stands) until the
// writer has failed over, then resumes. Its kubelet, containers and mounts
// are all still there: the kubelet, finding its pod deleted, stops the old
// writer and tries to unpublish the volume without force, which the driver
// refuses while the volume is quarantined there; the node agent's forced
// NodeUnpublish/NodeUnstage at the kubelet's paths unmount it. The same
// order and end state are checked. The node plugin serves its volumes with
// bind mounts here (--data-path=bind): a FUSE mount whose server is frozen
// blocks whoever looks into it, this test's look at the leftovers included;
// the fence of the FUSE data path is TestRealNodesDataPath's.
func TestRealNodesReturnHung(t *testing.T) {
	testRealNodeReturn(t, returnHung)
}

// How a node comes back.
type returnMode int

const (
	returnReboot returnMode = iota // PowerOff, then PowerOn
	returnHung                     // Hang, then Resume
)

func testRealNodeReturn(t *testing.T, mode returnMode) {
	ctx, c, nodes := startRealNodes(t, framework.RealNodeOptions{ProductImages: true})
	off, on := nodes[0], nodes[1]
	deployOpts := framework.RealDeployOptions{ControllerNode: on.Name}
	if mode == returnHung {
		// A frozen FUSE server blocks every look into its mounts.
		deployOpts.DataPath = "bind"
	}
	switch negative := os.Getenv(returnNegativeEnv); negative {
	case "":
	case "no-node-agent":
		deployOpts.NoNodeAgent = true
		t.Logf("NEGATIVE CONTROL %s: the node DaemonSet runs without the node agent; this test must fail", negative)
	default:
		t.Fatalf("%s=%q: want no-node-agent", returnNegativeEnv, negative)
	}
	dep, err := c.DeployMockExample(ctx, nodes, deployOpts)
	if err != nil {
		t.Fatal(err)
	}
	first := runRealWriter(ctx, t, c, dep, realVolume, realClass, off, on)

	// The kubelet's paths: where it staged and published the volume on
	// `off`, as the node plugin got them (the array records them).
	staged, published := kubeletPaths(t, dep, off.Name)
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{staged, published} {
		if !hasMountUnder(string(mounts), p, p) {
			t.Fatalf("%s is not a mount point before the power off", p)
		}
	}

	gone := c.PowerOff
	if mode == returnHung {
		gone = c.Hang
	}
	if err := gone(ctx, off); err != nil {
		t.Fatal(err)
	}
	wentAway := time.Now()
	second, err := c.WaitWriterRunning(ctx, realNS, realSet+"-0", first.UID, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if second.Spec.NodeName != on.Name {
		t.Fatalf("the replacement runs on %s, want %s", second.Spec.NodeName, on.Name)
	}
	t.Logf("writer failed over from %s to %s %.1fs after the node went away", off.Name, on.Name, time.Since(wentAway).Seconds())
	if err := waitFenced(ctx, c, off.Name, realVolume); err != nil {
		t.Fatal(err)
	}

	// From here on, every state of the node and of its record, in the
	// order etcd wrote them.
	tl, err := watchReturn(ctx, c, off.Name, realVolume)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.stop)

	back := time.Now()
	switch mode {
	case returnReboot:
		err = c.PowerOn(ctx, off, framework.PowerOnOptions{Inspect: func() error {
			return checkLeftovers(off, staged, published, false)
		}})
	case returnHung:
		// Everything is where it was, mounts included.
		if err = checkLeftovers(off, staged, published, true); err == nil {
			if err = c.Resume(ctx, off); err == nil {
				err = c.WaitNodeReady(ctx, off.Name, true, 2*time.Minute)
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s back and Ready %.1fs later; the real kubelet's leftovers of %s were on its disk at %s and %s",
		off.Name, time.Since(back).Seconds(), realVolume, published, staged)

	if err := waitReleased(ctx, c, off.Name, realVolume, 3*time.Minute); err != nil {
		teardowns, terr := pluginTeardowns(ctx, c, off.Name)
		t.Fatalf("%v\nthe node's record and taints as they went:\n%s\nthe node plugin's teardowns of %s on %s (%v):\n%s",
			err, tl, realVolume, off.Name, terr, strings.Join(teardowns, "\n"))
	}
	t.Logf("%s released %.1fs after it came back", off.Name, time.Since(back).Seconds())

	t.Run("Order", func(t *testing.T) {
		checkReturnOrder(t, tl)
	})
	t.Run("ForcedThroughTheNodePlugin", func(t *testing.T) {
		cleanedSeen := tl.firstSeen(func(e returnEvent) bool { return e.kind == kindRecord && e.cleaned })
		checkForcedTeardown(ctx, t, c, off.Name, staged, published, cleanedSeen)
	})
	t.Run("NothingLeft", func(t *testing.T) {
		checkNothingLeft(t, dep, off, staged, published)
	})
	t.Run("Schedulable", func(t *testing.T) {
		err := framework.WaitFor(ctx, 60*time.Second, off.Name+" Ready and schedulable", func(ctx context.Context) (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, off.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			var blocking []string
			for _, t := range n.Spec.Taints {
				if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
					blocking = append(blocking, t.Key+":"+string(t.Effect))
				}
			}
			ok := framework.NodeReady(n) && !n.Spec.Unschedulable && len(blocking) == 0
			return ok, fmt.Errorf("Ready %v, unschedulable %v, taints %v", framework.NodeReady(n), n.Spec.Unschedulable, blocking)
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// runRealWriter creates the writer StatefulSet (realSet in realNS) with its
// volume of the class, runs its pod on off (on is cordoned until it runs
// there), and waits for its first writes.
func runRealWriter(ctx context.Context, t *testing.T, c *framework.Cluster, dep *framework.RealDeployment, volume, class string, off, on *framework.RealNode) *corev1.Pod {
	t.Helper()
	if err := c.StaticVolume(ctx, dep, volume, realNS, "data-"+realSet+"-0", class); err != nil {
		t.Fatal(err)
	}
	if err := c.SetUnschedulable(ctx, on.Name, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().StatefulSets(realNS).Create(ctx, framework.WriterStatefulSet(realSet, class), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, err := c.WaitWriterRunning(ctx, realNS, realSet+"-0", "", 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if first.Spec.NodeName != off.Name {
		t.Fatalf("the writer runs on %s, want %s", first.Spec.NodeName, off.Name)
	}
	if err := c.SetUnschedulable(ctx, on.Name, false); err != nil {
		t.Fatal(err)
	}
	if err := waitLog(ctx, c, realNS, first.Name, "write 5 to /data/writes.log ok", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	return first
}

// kubeletPaths returns where the kubelet of node staged and published the
// volume, as the array recorded the node plugin's calls.
func kubeletPaths(t *testing.T, dep *framework.RealDeployment, node string) (staged, published string) {
	t.Helper()
	arr, err := dep.Array()
	if err != nil {
		t.Fatal(err)
	}
	s, err := arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	p := s.Volumes[realVolume].Publications[node]
	if p == nil || p.Staged == "" || len(p.Published) != 1 {
		t.Fatalf("the array does not hold %s staged and published once on %s: %+v", realVolume, node, p)
	}
	return p.Staged, p.Published[0]
}

// waitFenced waits until node's FencingRequest records volume fenced and
// the node carries the quarantine taint.
func waitFenced(ctx context.Context, c *framework.Cluster, node, volume string) error {
	frs := fencingv1alpha1.NewClient(c.Dynamic)
	return framework.WaitFor(ctx, 60*time.Second, volume+" recorded fenced on quarantined "+node, func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, node)
		if err != nil {
			return false, err
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v := fencerecord.Find(fr, framework.DriverName, volume)
		fenced := v != nil && v.FencedTime != nil
		quarantined := framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule)
		return fenced && quarantined, fmt.Errorf("entry %+v, quarantined %v", v, quarantined)
	})
}

// checkLeftovers checks the node's disk as the node's return finds it,
// before its processes run again: at the kubelet's own paths, the publish
// and the staging directories of the volume, each beside the vol_data.json
// the kubelet wrote, mount points or not (a reboot takes the mounts, a hang
// keeps them); and pkg/kubeletlayout's Scan finds exactly these, attributed
// to the volume by their metadata.
func checkLeftovers(node *framework.RealNode, staged, published string, mounted bool) error {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range []string{published, staged} {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("the kubelet's %s is not a directory on the rebooted node's disk: %v", p, err))
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), kubeletlayout.VolDataFileName)); err != nil {
			errs = append(errs, fmt.Errorf("no vol_data.json beside %s: %w", p, err))
		}
		if got := hasMountUnder(string(mounts), p, p); got != mounted {
			errs = append(errs, fmt.Errorf("%s is a mount point: %v, want %v", p, got, mounted))
		}
	}
	l := kubeletlayout.New(node.KubeletDir())
	inv, err := l.Scan()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	vol := kubeletlayout.Volume{Driver: framework.DriverName, VolumeHandle: realVolume, PVName: realVolume}
	m := inv.Match(vol)
	switch {
	case len(inv.PodVolumes) != 1 || len(inv.Staged) != 1 || len(inv.Block) != 0:
		errs = append(errs, fmt.Errorf("kubeletlayout found %d publish, %d staging and %d block directories under %s, want 1, 1, 0: %v",
			len(inv.PodVolumes), len(inv.Staged), len(inv.Block), l.Root, m.Paths(l)))
	case len(m.PodVolumes) != 1 || len(m.Staged) != 1 || len(m.UnverifiedPodVolumes) != 0:
		errs = append(errs, fmt.Errorf("kubeletlayout attributes %d publish (%d unverified) and %d staging directories to %s, want 1, 0, 1",
			len(m.PodVolumes), len(m.UnverifiedPodVolumes), len(m.Staged), realVolume))
	case m.PodVolumes[0].TargetPath != published || m.PodVolumes[0].Data == nil:
		errs = append(errs, fmt.Errorf("kubeletlayout's publish path %s (metadata %+v, %v); the kubelet published at %s",
			m.PodVolumes[0].TargetPath, m.PodVolumes[0].Data, m.PodVolumes[0].DataErr, published))
	case m.Staged[0].StagingPath != staged || m.Staged[0].Data == nil:
		errs = append(errs, fmt.Errorf("kubeletlayout's staging path %s (metadata %+v, %v); the kubelet staged at %s",
			m.Staged[0].StagingPath, m.Staged[0].Data, m.Staged[0].DataErr, staged))
	}
	if left := inv.Unattributed(l, framework.DriverName, []kubeletlayout.Volume{vol}); len(left) > 0 {
		errs = append(errs, fmt.Errorf("kubeletlayout cannot attribute %v", left))
	}
	return errors.Join(errs...)
}

// waitReleased waits until the node has no quarantine taint and its
// FencingRequest is complete without the product's finalizer.
func waitReleased(ctx context.Context, c *framework.Cluster, node, volume string, timeout time.Duration) error {
	frs := fencingv1alpha1.NewClient(c.Dynamic)
	return framework.WaitFor(ctx, timeout, node+" released from quarantine, its FencingRequest complete", func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		fr, err := frs.Get(ctx, node)
		if err != nil {
			return false, err
		}
		quarantined := framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule)
		finalizer := slices.Contains(fr.Finalizers, contract.RecordFinalizer)
		done := !quarantined && fr.Status.Phase == fencingv1alpha1.PhaseComplete && !finalizer
		v := fencerecord.Find(fr, framework.DriverName, volume)
		if v == nil {
			return done, fmt.Errorf("node quarantined %v; record phase %q, finalizer %v, no entry for %s", quarantined, fr.Status.Phase, finalizer, volume)
		}
		return done, fmt.Errorf("node Ready %v, quarantined %v; record phase %q, finalizer %v; %s cleaned %v, cleanup error %q",
			framework.NodeReady(n), quarantined, fr.Status.Phase, finalizer, volume, v.CleanedTime != nil, v.CleanupError)
	})
}

// checkReturnOrder checks the order of the writes the watches saw: the
// record's entry was cleaned before the quarantine taint went and before
// the request lost its finalizer, the request completed last (so that a
// crash before it leaves the request active and the next pass finishes the
// release), and the node was Ready and still quarantined before its release
// (it is not released for being back).
func checkReturnOrder(t *testing.T, tl *returnTimeline) {
	events := tl.snapshot()
	// The first of each kind is the state read before the power on: every
	// event watched since is a later write.
	firstNode := slices.IndexFunc(events, func(e returnEvent) bool { return e.kind == kindNode })
	firstRecord := slices.IndexFunc(events, func(e returnEvent) bool { return e.kind == kindRecord })
	if firstNode < 0 || firstRecord < 0 {
		t.Fatalf("the timeline lacks the node's or the record's state before the power on:\n%s", tl)
	}
	if !events[firstNode].quarantined || events[firstRecord].cleaned {
		t.Fatalf("before the power on the node should be quarantined and the volume not cleaned:\n%s", tl)
	}
	rv := func(what string, f func(returnEvent) bool) uint64 {
		for _, e := range events {
			if f(e) {
				return e.rv
			}
		}
		t.Fatalf("never saw %s:\n%s", what, tl)
		return 0
	}
	cleaned := rv("the entry cleaned", func(e returnEvent) bool { return e.kind == kindRecord && e.cleaned })
	released := rv("the quarantine lifted", func(e returnEvent) bool { return e.kind == kindNode && !e.quarantined })
	waiting := rv("the node Ready and quarantined", func(e returnEvent) bool { return e.kind == kindNode && e.ready && e.quarantined })
	complete := rv("the request complete", func(e returnEvent) bool { return e.kind == kindRecord && e.complete })
	unfinalized := rv("the finalizer removed", func(e returnEvent) bool { return e.kind == kindRecord && (!e.finalizer || e.deleted) })
	for _, c := range []struct {
		what          string
		before, after uint64
	}{
		{"the entry cleaned before the quarantine lifted (S2, S6)", cleaned, released},
		{"the entry cleaned before the finalizer went (S8)", cleaned, unfinalized},
		{"the finalizer gone before the request completed, the release's last write (S6)", unfinalized, complete},
		{"the node Ready and quarantined before its release", waiting, released},
	} {
		if c.before >= c.after {
			t.Errorf("%s: revision %d, then %d", c.what, c.before, c.after)
		}
	}
	for _, e := range events {
		if e.kind == kindNode && !e.quarantined && e.rv < cleaned {
			t.Errorf("the node was without quarantine at revision %d, before the cleanup was recorded at %d", e.rv, cleaned)
		}
	}
	if t.Failed() {
		t.Logf("timeline:\n%s", tl)
	}
}

// teardownLine matches the node plugin's log of a teardown, done or failed
// (mock-driver/server logRPC, klog's text format).
var teardownLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*"GRPC (done|failed)" method="(NodeUnpublishVolume|NodeUnstageVolume)" volumeID="([^"]*)" path="([^"]*)" force=(true|false)`)

// checkForcedTeardown reads the log of the node plugin that runs on the
// returned node since its boot: it must have unpublished the volume at the
// kubelet's publish path and unstaged it at the kubelet's staging path with
// force=true, both before the cleanup was recorded.
func checkForcedTeardown(ctx context.Context, t *testing.T, c *framework.Cluster, node, staged, published string, cleanedSeen time.Time) {
	teardowns, err := pluginTeardowns(ctx, c, node)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"NodeUnpublishVolume": published, "NodeUnstageVolume": staged}
	for _, l := range teardowns {
		m := teardownLine.FindStringSubmatch(l)
		if m[2] != "done" || m[6] != "true" || m[5] != want[m[3]] {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.UTC)
		if err != nil {
			t.Fatalf("the time of %q: %v", l, err)
		}
		at = at.AddDate(cleanedSeen.UTC().Year(), 0, 0)
		if !at.Before(cleanedSeen) {
			t.Errorf("forced %s at %s, not before the cleanup was seen recorded at %s", m[3], at.Format(time.StampMicro), cleanedSeen.UTC().Format(time.StampMicro))
		}
		delete(want, m[3])
	}
	for method, path := range want {
		t.Errorf("the node plugin on %s logged no successful %s of %s at %s with force=true; its teardowns of the volume:\n%s",
			node, method, realVolume, path, strings.Join(teardowns, "\n"))
	}
	t.Logf("the node plugin's teardowns of %s on %s:\n%s", realVolume, node, strings.Join(teardowns, "\n"))
}

// pluginTeardowns returns the lines of the log of the node plugin on node
// (its current container: since the node's boot) that say a teardown of
// the volume was done or failed.
func pluginTeardowns(ctx context.Context, c *framework.Cluster, node string) ([]string, error) {
	pods, err := c.Client.CoreV1().Pods(realNS).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{"app": "csi-fence-mock-node"}.String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) != 1 {
		return nil, fmt.Errorf("%d node plugin pods on %s, want 1", len(pods.Items), node)
	}
	log, err := c.Client.CoreV1().Pods(realNS).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{Container: "csi-fence-mock"}).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(log), "\n") {
		if m := teardownLine.FindStringSubmatch(l); m != nil && m[4] == realVolume {
			out = append(out, l)
		}
	}
	return out, nil
}

// checkNothingLeft checks that nothing of the volume is left on the node's
// disk or on the array's side, and that the array saw no publish to the
// quarantined node and no other violation.
func checkNothingLeft(t *testing.T, dep *framework.RealDeployment, node *framework.RealNode, staged, published string) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{published, filepath.Dir(published), staged, filepath.Dir(staged)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left on %s: %v", p, node.Name, err)
		}
		if hasMountUnder(string(mounts), p, "") {
			t.Errorf("something is still mounted at or under %s", p)
		}
	}
	l := kubeletlayout.New(node.KubeletDir())
	inv, err := l.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if m := inv.Match(kubeletlayout.Volume{Driver: framework.DriverName, VolumeHandle: realVolume, PVName: realVolume}); !m.Empty() {
		t.Errorf("kubeletlayout still finds %v", m.Paths(l))
	}
	arr, err := dep.Array()
	if err != nil {
		t.Fatal(err)
	}
	s, err := arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Volumes[realVolume].Publications[node.Name]; p != nil {
		t.Errorf("the array still holds %s on %s: %+v", realVolume, node.Name, p)
	}
	expectArraySafe(t, s, "")
}

// ---- the order of a node's return, as etcd wrote it ----

const (
	kindNode   = "node"
	kindRecord = "record"
)

// returnEvent is one state of the returning node or of its FencingRequest,
// as a watch delivered it. rv is the revision of the write: both come from
// one etcd, whose revisions order every write of the cluster.
type returnEvent struct {
	kind string
	rv   uint64
	seen time.Time
	// node
	ready, quarantined bool
	// record
	cleaned, complete, finalizer, deleted bool
}

func (e returnEvent) String() string {
	if e.kind == kindNode {
		return fmt.Sprintf("%d %s node Ready=%v quarantined=%v", e.rv, e.seen.UTC().Format("15:04:05.000"), e.ready, e.quarantined)
	}
	return fmt.Sprintf("%d %s record cleaned=%v complete=%v finalizer=%v deleted=%v", e.rv, e.seen.UTC().Format("15:04:05.000"),
		e.cleaned, e.complete, e.finalizer, e.deleted)
}

type returnTimeline struct {
	mu     sync.Mutex
	events []returnEvent
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (tl *returnTimeline) add(e returnEvent) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, e)
}

// snapshot returns the events so far in revision order.
func (tl *returnTimeline) snapshot() []returnEvent {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := slices.Clone(tl.events)
	slices.SortStableFunc(out, func(a, b returnEvent) int {
		switch {
		case a.rv < b.rv:
			return -1
		case a.rv > b.rv:
			return 1
		}
		return 0
	})
	return out
}

// firstSeen is when the first event f accepts arrived (zero if none).
func (tl *returnTimeline) firstSeen(f func(returnEvent) bool) time.Time {
	for _, e := range tl.snapshot() {
		if f(e) {
			return e.seen
		}
	}
	return time.Time{}
}

func (tl *returnTimeline) String() string {
	var b strings.Builder
	for _, e := range tl.snapshot() {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

func (tl *returnTimeline) stop() {
	tl.cancel()
	tl.done.Wait()
}

// watchReturn records every state of node and of its FencingRequest from
// now on, starting with the current ones.
func watchReturn(ctx context.Context, c *framework.Cluster, node, volume string) (*returnTimeline, error) {
	ctx, cancel := context.WithCancel(ctx)
	tl := &returnTimeline{cancel: cancel}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	nodeEvent := func(n *corev1.Node) returnEvent {
		rv, _ := strconv.ParseUint(n.ResourceVersion, 10, 64)
		return returnEvent{kind: kindNode, rv: rv, seen: time.Now(), ready: framework.NodeReady(n),
			quarantined: framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule)}
	}
	tl.add(nodeEvent(n))
	frs := fencingv1alpha1.NewClient(c.Dynamic)
	fr, err := frs.Get(ctx, node)
	if err != nil {
		cancel()
		return nil, err
	}
	recordEvent := func(fr *fencingv1alpha1.FencingRequest, deleted bool) returnEvent {
		rv, _ := strconv.ParseUint(fr.ResourceVersion, 10, 64)
		v := fencerecord.Find(fr, framework.DriverName, volume)
		return returnEvent{kind: kindRecord, rv: rv, seen: time.Now(), cleaned: v != nil && v.CleanedTime != nil,
			complete: fr.Status.Phase == fencingv1alpha1.PhaseComplete, finalizer: slices.Contains(fr.Finalizers, contract.RecordFinalizer), deleted: deleted}
	}
	tl.add(recordEvent(fr, false))

	byName := fields.OneTermEqualSelector("metadata.name", node).String()
	err = followWatch(ctx, &tl.done, n.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = byName
		return c.Client.CoreV1().Nodes().Watch(ctx, o)
	}, func(ev watch.Event) {
		if n, ok := ev.Object.(*corev1.Node); ok {
			tl.add(nodeEvent(n))
		}
	})
	if err != nil {
		cancel()
		return nil, err
	}
	err = followWatch(ctx, &tl.done, fr.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = byName
		return frs.Watch(ctx, o)
	}, func(ev watch.Event) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return
		}
		if fr, err := fencingv1alpha1.FromUnstructured(u); err == nil {
			tl.add(recordEvent(fr, ev.Type == watch.Deleted))
		}
	})
	if err != nil {
		tl.stop()
		return nil, err
	}
	return tl, nil
}
