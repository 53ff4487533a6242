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
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/fusefs"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/images/writer/records"
)

// dataPathNegativeEnv selects a negative control of TestRealNodesDataPath,
// which must then fail:
//   - "broken-fence": the controller's mock driver runs with --broken-fence:
//     the fence reports success without cutting the node's data path, so
//     the partitioned writer's writes keep succeeding after the volume
//     moved; the array counts them (S1), the writer's log shows them ok,
//     and the two writers' records collide on the volume.
const dataPathNegativeEnv = "FENCE_E2E_REAL_DATAPATH_NEGATIVE"

// TestRealNodesDataPath proves the fence on a real data path: the mock
// example deployed as shipped (its node plugin serving each volume with
// FUSE, every change asking the array), a StatefulSet writer on the first
// real node appending checksummed, numbered records with ordinary syscalls,
// then that node partitioned (its kubelet, containerd and the writer keep
// running, cut off the apiserver). The product fails the pod over to the
// second node; then the volume's fence is recorded on the node's
// FencingRequest and the array holds it fenced there; the replacement runs
// on the second node and writes; the volume holds every record intact, in
// order, without a gap: the first node's records exactly as many as the
// array accepted from it, every one its writer reported ok among them, and
// the replacement's after them; the old container still runs on the
// partitioned node and every write it tries after the fence fails with EIO
// (its own log, read from the node's log directory: the node's kubelet is
// out of reach); the array counted no S1 or S2 violation. Healing the
// partition brings the node back Ready.
func TestRealNodesDataPath(t *testing.T) {
	begin := time.Now()
	ctx, c, nodes := startRealNodes(t, framework.RealNodeOptions{ProductImages: true})
	cut, on := nodes[0], nodes[1]
	deployOpts := framework.RealDeployOptions{ControllerNode: on.Name}
	negative := os.Getenv(dataPathNegativeEnv)
	switch negative {
	case "":
	case "broken-fence":
		deployOpts.MockControllerArgs = []string{"--broken-fence"}
	default:
		t.Fatalf("%s=%q: want broken-fence", dataPathNegativeEnv, negative)
	}
	if negative != "" {
		t.Logf("NEGATIVE CONTROL %s: the controller's csi-fence-mock %v; this test must fail", negative, deployOpts.MockControllerArgs)
	}
	dep := deployMockExample(ctx, t, c, nodes, deployOpts)

	const (
		volume = "vol-datapath-0"
		sts    = realSet // runRealWriter's
		ns     = realNS
		class  = "fence-datapath"
		logRel = "writes.log"
	)
	first := runRealWriter(ctx, t, c, dep, volume, class, cut, on)

	// The data path is the node plugin's FUSE mount, and the writes go
	// through the array.
	staging := filepath.Join(cut.KubeletDir(), "plugins", "kubernetes.io", "csi", framework.DriverName)
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if fst := mountTypeUnder(string(mounts), staging, "/globalmount"); fst != fusefs.FSType {
		t.Fatalf("the staging mount under %s is of type %q, want %s", staging, fst, fusefs.FSType)
	}
	arr, err := dep.Array()
	if err != nil {
		t.Fatal(err)
	}
	s, err := arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Volumes[volume].Writes[cut.Name]; w < 5 {
		t.Fatalf("the array counted %d writes of %s through the data path, want at least 5", w, cut.Name)
	}

	partitioned := time.Now()
	if err := c.Node(cut.Name).Partition(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := c.WaitWriterRunning(ctx, ns, sts+"-0", first.UID, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writer failed over from %s to %s %.1fs after the partition", cut.Name, second.Spec.NodeName, time.Since(partitioned).Seconds())
	if second.Spec.NodeName != on.Name {
		t.Fatalf("the replacement runs on %s, want %s", second.Spec.NodeName, on.Name)
	}
	if err := c.WaitWrites(ctx, ns, second.Name, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}

	// The fence, recorded (write-ahead) on the node's FencingRequest, and
	// held by the array; its time there is when the data path was cut.
	fr, err := fencingv1alpha1.NewClient(c.Dynamic).Get(ctx, cut.Name)
	if err != nil {
		t.Fatalf("no FencingRequest for %s: %v", cut.Name, err)
	}
	if v := fencerecord.Find(fr, framework.DriverName, volume); v == nil || v.FencedTime == nil {
		t.Errorf("volume %s not recorded as fenced on %s: %+v", volume, cut.Name, fr.Status)
	}
	s, err = arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	pub := s.Volumes[volume].Publications[cut.Name]
	if pub == nil || pub.Access != array.AccessFenced {
		t.Fatalf("the array does not hold %s fenced on %s: %+v", volume, cut.Name, pub)
	}
	fencedAt := pub.Since
	t.Logf("volume %s fenced on %s %.1fs after the partition", volume, cut.Name, fencedAt.Sub(partitioned).Seconds())

	// The old container runs on: its node's cgroup still holds the writer,
	// and its log (read from the node's own log directory) grows with
	// writes tried after the fence, every one failing with EIO. A write
	// whose log line is stamped within the margin after the fence may have
	// been accepted just before it.
	const margin = 500 * time.Millisecond
	const wantFailed = 5
	var oldLog []framework.LogLine
	err = framework.WaitFor(ctx, 30*time.Second, fmt.Sprintf("%d writes tried after the fence in the old container's log", wantFailed), func(context.Context) (bool, error) {
		oldLog, err = cut.ContainerLog(ns, first.Name, first.UID, "writer")
		if err != nil {
			return false, err
		}
		return len(linesAfter(oldLog, fencedAt.Add(margin), "write ")) >= wantFailed, nil
	})
	if err != nil {
		t.Errorf("%v; the old container's log:\n%s", err, logText(oldLog))
	}
	if after := linesAfter(oldLog, fencedAt, "write "); len(after) > 0 {
		t.Logf("the old container's first write after the fence: %s %s", after[0].Time.Format(time.RFC3339Nano), after[0].Text)
	}
	var notEIO []string
	for _, l := range linesAfter(oldLog, fencedAt.Add(margin), "write ") {
		if !strings.Contains(l.Text, " failed: errno=EIO ") {
			notEIO = append(notEIO, l.Time.Format(time.RFC3339Nano)+" "+l.Text)
		}
	}
	if len(notEIO) > 0 {
		t.Errorf("the old container on %s wrote after the fence (%s) without EIO, %d times:\n%s", cut.Name, fencedAt.Format(time.RFC3339Nano), len(notEIO), strings.Join(head(notEIO, 10), "\n"))
	}
	pids, err := c.Processes(cut)
	if err != nil {
		t.Fatal(err)
	}
	if names := commands(pids); !strings.Contains(" "+strings.Join(names, " ")+" ", " writer ") {
		t.Errorf("the old writer no longer runs on the partitioned %s: %v", cut.Name, names)
	}

	// The volume's data: every record intact and in order; the cut node's
	// exactly as many as the array accepted from it, with every write its
	// writer reported ok; the replacement's after them.
	data, err := os.ReadFile(filepath.Join(dep.DataDir(volume), logRel))
	if err != nil {
		t.Fatal(err)
	}
	recs, checkErr := records.Check(data)
	if checkErr != nil {
		t.Errorf("the volume's records are not intact: %v", checkErr)
	}
	s, err = arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	accepted := s.Volumes[volume].Writes[cut.Name]
	fromCut := 0
	for fromCut < len(recs) && recs[fromCut].Node == cut.Name {
		fromCut++
	}
	if int64(fromCut) != accepted {
		t.Errorf("the volume begins with %d records of %s, the array accepted %d writes from it", fromCut, cut.Name, accepted)
	}
	lastOK := lastOKSeq(oldLog)
	if lastOK > int64(fromCut) || lastOK < int64(fromCut)-1 {
		t.Errorf("%s's writer last reported record %d ok, the volume holds %d of its records: an acknowledged write is lost, or more than the one in flight at the fence reached the volume", cut.Name, lastOK, fromCut)
	}
	for _, r := range recs[fromCut:] {
		if r.Node != on.Name {
			t.Errorf("record %d after the failover was written by %s, want %s", r.Seq, r.Node, on.Name)
			break
		}
	}
	if len(recs) < fromCut+3 {
		t.Errorf("the volume holds %d records of %s, want the replacement's 3 at least", len(recs)-fromCut, on.Name)
	}
	expectArraySafe(t, s, "")
	t.Logf("volume %s: %d records of %s (%d accepted by the array, last acknowledged %d), %d of %s; %d writes of %s refused since the fence",
		volume, fromCut, cut.Name, accepted, lastOK, len(recs)-fromCut, on.Name, s.Refused["write-fenced"], cut.Name)

	// Heal undoes the partition: the node's kubelet reaches the apiserver
	// again.
	healed := time.Now()
	if err := c.Node(cut.Name).Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodeReady(ctx, cut.Name, true, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s Ready again %.1fs after the heal; the test took %.1fs", cut.Name, time.Since(healed).Seconds(), time.Since(begin).Seconds())
}

// linesAfter returns the lines stamped after t that begin with prefix.
func linesAfter(log []framework.LogLine, t time.Time, prefix string) []framework.LogLine {
	var out []framework.LogLine
	for _, l := range log {
		if l.Time.After(t) && strings.HasPrefix(l.Text, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// lastOKSeq is the number of the last record the writer reported ok.
func lastOKSeq(log []framework.LogLine) int64 {
	var last int64
	for _, l := range log {
		var seq int64
		var path string
		if n, _ := fmt.Sscanf(l.Text, "write %d to %s ok", &seq, &path); n == 2 && strings.HasSuffix(l.Text, " ok") {
			last = seq
		}
	}
	return last
}

func logText(log []framework.LogLine) string {
	var b strings.Builder
	for _, l := range log {
		fmt.Fprintf(&b, "%s %s %s\n", l.Time.Format(time.RFC3339Nano), l.Stream, l.Text)
	}
	return b.String()
}

// expectArraySafe reports an S1 or S2 violation the array counted, with the
// first few (time, node, what), as an error of t: the check of the array
// every real-node test makes. when says at which point, if not at the end.
func expectArraySafe(t *testing.T, s *array.State, when string) {
	t.Helper()
	v := s.CountViolations()
	if v[array.S1] == 0 && v[array.S2] == 0 {
		return
	}
	var first []string
	for _, r := range s.Violations {
		first = append(first, fmt.Sprintf("%s %s %s: %s", r.Time.Format(time.RFC3339Nano), r.Invariant, r.Node, r.Message))
	}
	if when != "" {
		when = " " + when
	}
	t.Errorf("safety violations on the array%s: %v:\n%s", when, v, strings.Join(head(first, 6), "\n"))
}

func head(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... and %d more", len(s)-n))
	}
	return s
}

// mountTypeUnder returns the file system type of the last mount in
// mountinfo below dir whose path ends with suffix, "" if none.
func mountTypeUnder(mountinfo, dir, suffix string) string {
	fst := ""
	for _, l := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 5 {
			continue
		}
		if mp := f[4]; strings.HasPrefix(mp, dir+"/") && strings.HasSuffix(mp, suffix) {
			fst = strings.Fields(post)[0]
		}
	}
	return fst
}
