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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/fusefs"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencemode"
	"github.com/csi-fence/fence-attacher/pkg/nodeagent"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/images/writer/records"
)

// detachNegativeEnv selects a negative control of the TestRealNodesFenceByDetach
// tests, which must then fail:
//   - "undeclared": the CSIDriver does not carry
//     csi-fence.io/unpublish-revokes-access. The driver has neither
//     UNPUBLISH_FENCE nor FORCE_UNPUBLISH, so nothing may fence it: its pod
//     is not force-deleted, the volume does not move, and the wait for the
//     replacement times out (the registration Lease says fence mode none).
const detachNegativeEnv = "FENCE_E2E_REAL_DETACH_NEGATIVE"

// TestRealNodesFenceByDetachPowerOff fails a writer over from a powered-off
// real node with the driver fenced by its own detach (issue 37,
// docs/fence-by-detach.md); see testFenceByDetach.
func TestRealNodesFenceByDetachPowerOff(t *testing.T) {
	testFenceByDetach(t, detachPowerOff)
}

// TestRealNodesFenceByDetachPartition is TestRealNodesFenceByDetachPowerOff
// for a node cut off the control plane: its kubelet, node plugin and writer
// run on, and the writer's writes succeed until the plain unpublish takes
// the volume away from the node, and fail with EIO from then on.
func TestRealNodesFenceByDetachPartition(t *testing.T) {
	testFenceByDetach(t, detachPartition)
}

// How the writer's node fails.
type detachFailure int

const (
	detachPowerOff  detachFailure = iota // PowerOff, then PowerOn
	detachPartition                      // Partition, then Heal
)

func (f detachFailure) String() string {
	if f == detachPartition {
		return "partition"
	}
	return "power off"
}

// testFenceByDetach deploys the mock example on two real nodes as a driver
// whose detach takes the disk away from the machine: the mock runs with
// --detach=revokes (no UNPUBLISH_FENCE, no FORCE_UNPUBLISH; a successful
// plain ControllerUnpublishVolume closes the node's data path, reads and
// writes of its FUSE mounts alike) and its CSIDriver carries the owner's
// declaration, csi-fence.io/unpublish-revokes-access: "true". A StatefulSet
// writer appends numbered records on the first node, which then fails. It
// checks what the declaration promises (S1, S2, S6, S8):
//
//   - the sidecar reads the declaration (its registration Lease says fence
//     mode unpublish-revokes-access);
//   - the writer fails over to the second node; the volume's entry in the
//     node's FencingRequest is recorded fenced, and the array holds the
//     volume detached from the failed node (the state only a plain
//     unpublish of a volume the node still held leads to: a fence=true call
//     would have left it fenced);
//   - partition: the old container ran on cut off, its writes succeeding
//     after the partition until the detach and every one failing with EIO
//     after it, and it still runs;
//   - the volume's records are intact and numbered without a gap or a
//     repeat: the failed node's first, exactly as many as the array accepted
//     from it, every one its writer reported ok among them; then the
//     replacement's, and no write of the failed node accepted after the
//     replacement's first; the array counted no S1 and no S2;
//   - the node comes back (powered on, or healed) and is released: the node
//     agent recorded the volume cleaned, with plain calls (its Event says
//     so; the node plugin, without FORCE_UNPUBLISH, logged no forced
//     teardown), before the quarantine lifted and the request completed,
//     and nothing of the volume is left on the node or on the array.
func testFenceByDetach(t *testing.T, failure detachFailure) {
	begin := time.Now()
	ctx, c, nodes := startRealNodes(t, framework.RealNodeOptions{ProductImages: true})
	cut, on := nodes[0], nodes[1]
	deployOpts := framework.RealDeployOptions{
		ControllerNode: on.Name,
		// The controller's instance decides what an unpublish does to the
		// array; the node plugins' gate reads as well as writes on their
		// FUSE data path (the example's) and advertise no FORCE_UNPUBLISH.
		MockControllerArgs:   []string{"--detach=revokes"},
		MockNodeArgs:         []string{"--detach=revokes"},
		CSIDriverAnnotations: map[string]string{contract.UnpublishRevokesAccessAnnotation: contract.UnpublishRevokesAccessTrue},
	}
	wantMode := fencemode.RevokingUnpublish
	switch negative := os.Getenv(detachNegativeEnv); negative {
	case "":
	case "undeclared":
		deployOpts.CSIDriverAnnotations = nil
		wantMode = fencemode.None
		t.Logf("NEGATIVE CONTROL %s: the CSIDriver does not declare %s; this test must fail", negative, contract.UnpublishRevokesAccessAnnotation)
	default:
		t.Fatalf("%s=%q: want undeclared", detachNegativeEnv, negative)
	}
	dep := deployMockExample(ctx, t, c, nodes, deployOpts)
	checkRegisteredMode(ctx, t, c, wantMode)

	const (
		volume = realVolume // pluginTeardowns' and checkNothingLeft's
		sts    = realSet    // runRealWriter's
		ns     = realNS
		class  = "fence-detach"
		logRel = "writes.log"
	)
	first := runRealWriter(ctx, t, c, dep, volume, class, cut, on)

	// The data path is the node plugin's FUSE mount.
	staged, published := kubeletPaths(t, dep, cut.Name)
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if fst := mountTypeUnder(string(mounts), filepath.Dir(staged), "/"+filepath.Base(staged)); fst != fusefs.FSType {
		t.Fatalf("the staging mount %s is of type %q, want %s", staged, fst, fusefs.FSType)
	}
	arr, err := dep.Array()
	if err != nil {
		t.Fatal(err)
	}

	failed := time.Now()
	switch failure {
	case detachPowerOff:
		err = c.Node(cut.Name).PowerOff(ctx)
	case detachPartition:
		err = c.Node(cut.Name).Partition(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Nothing moves before the detach (S1): a replacement cannot start
	// before it. 3 minutes is far more than the failover takes (NotReady,
	// the pod's 2 s toleration, the detach, the attach elsewhere).
	second, err := c.WaitWriterRunning(ctx, ns, sts+"-0", first.UID, 3*time.Minute)
	if err != nil {
		t.Fatalf("no replacement after the %s of %s: %v; %s", failure, cut.Name, err, stillThere(cut, first, failed, arr, volume))
	}
	t.Logf("writer failed over from %s to %s %.1fs after the %s", cut.Name, second.Spec.NodeName, time.Since(failed).Seconds(), failure)
	if second.Spec.NodeName != on.Name {
		t.Fatalf("the replacement runs on %s, want %s", second.Spec.NodeName, on.Name)
	}
	if err := c.WaitWrites(ctx, ns, second.Name, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitFenced(ctx, c, cut.Name, volume); err != nil {
		t.Fatal(err)
	}

	// The fence, recorded (write-ahead) on the node's FencingRequest, was a
	// plain unpublish that took the volume away from the node: detached,
	// not fenced, on the array; its time there is when the node's data path
	// closed.
	s, err := arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	pub := s.Volumes[volume].Publications[cut.Name]
	if pub == nil || pub.Access != array.AccessDetached {
		t.Fatalf("the array does not hold %s detached from %s (a plain unpublish of a volume the node held): %+v", volume, cut.Name, pub)
	}
	detachedAt := pub.Since
	t.Logf("volume %s detached from %s %.1fs after the %s", volume, cut.Name, detachedAt.Sub(failed).Seconds(), failure)

	// The old container's log, from the node's own log directory, before
	// the node comes back and its kubelet removes it.
	oldLog, err := cut.ContainerLog(ns, first.Name, first.UID, "writer")
	if err != nil {
		t.Fatal(err)
	}
	if failure == detachPartition {
		oldLog = checkWritesCut(ctx, t, c, cut, first, failed, detachedAt)
	}

	// The volume's records, and the array's count of what it accepted.
	data, err := os.ReadFile(filepath.Join(dep.DataDir(volume), logRel))
	if err != nil {
		t.Fatal(err)
	}
	if s, err = arr.Snapshot(); err != nil {
		t.Fatal(err)
	}
	checkDetachRecords(t, data, s, volume, cut.Name, on.Name, lastOKSeq(oldLog), failure == detachPowerOff)

	// The node comes back, and is released only once the node agent
	// cleaned what it held of the volume.
	tl, err := watchReturn(ctx, c, cut.Name, volume)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.stop)
	back := time.Now()
	switch failure {
	case detachPowerOff:
		err = c.PowerOn(ctx, cut, framework.PowerOnOptions{})
	case detachPartition:
		if err = c.Node(cut.Name).Heal(ctx); err == nil {
			err = c.WaitNodeReady(ctx, cut.Name, true, 2*time.Minute)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := waitReleased(ctx, c, cut.Name, volume, 3*time.Minute); err != nil {
		teardowns, terr := pluginTeardowns(ctx, c, cut.Name)
		t.Fatalf("%v\nthe node's record and taints as they went:\n%s\nthe node plugin's teardowns of %s on %s (%v):\n%s",
			err, tl, volume, cut.Name, terr, strings.Join(teardowns, "\n"))
	}
	t.Logf("%s released %.1fs after it came back", cut.Name, time.Since(back).Seconds())
	checkReturnOrder(t, tl)
	checkPlainCleanup(ctx, t, c, cut.Name)
	checkNothingLeft(t, dep, cut, staged, published)
	t.Logf("the test took %.1fs", time.Since(begin).Seconds())
}

// checkRegisteredMode checks the fence mode the sidecar registered for the
// driver (its registration Lease, in the storm guard's namespace, kube-system
// by default): the declaration as the sidecar read it.
func checkRegisteredMode(ctx context.Context, t *testing.T, c *framework.Cluster, want fencemode.Mode) {
	t.Helper()
	const modeAnnotation = contract.Prefix + "/fence-mode"
	name := contract.RegistrationLeaseName(framework.DriverName)
	err := framework.WaitFor(ctx, 60*time.Second, fmt.Sprintf("Lease %s saying fence mode %s", name, want), func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := l.Annotations[modeAnnotation]
		return got == string(want), fmt.Errorf("%s=%q", modeAnnotation, got)
	})
	if err != nil {
		// Not fatal: what the failover then does says more.
		t.Error(err)
	}
}

// checkWritesCut checks the partitioned node's old container: it wrote on,
// successfully, while its node was cut off, until the detach; every write
// it tried after the detach failed with EIO; it still runs. It returns the
// container's log.
func checkWritesCut(ctx context.Context, t *testing.T, c *framework.Cluster, node *framework.RealNode, pod *corev1.Pod, partitioned, detachedAt time.Time) []framework.LogLine {
	t.Helper()
	// A write whose log line is stamped within the margin after the detach
	// may have been accepted just before it.
	const margin = 500 * time.Millisecond
	const wantFailed = 5
	var log []framework.LogLine
	err := framework.WaitFor(ctx, 30*time.Second, fmt.Sprintf("%d writes tried after the detach in the old container's log", wantFailed), func(context.Context) (bool, error) {
		var err error
		log, err = node.ContainerLog(pod.Namespace, pod.Name, pod.UID, "writer")
		if err != nil {
			return false, err
		}
		return len(linesAfter(log, detachedAt.Add(margin), "write ")) >= wantFailed, nil
	})
	if err != nil {
		t.Errorf("%v; the old container's log:\n%s", err, logText(log))
	}
	var okCutOff int
	for _, l := range linesAfter(log, partitioned, "write ") {
		if l.Time.Before(detachedAt) && strings.HasSuffix(l.Text, " ok") {
			okCutOff++
		}
	}
	if okCutOff == 0 {
		t.Errorf("the old container on %s wrote nothing successfully between the partition (%s) and the detach (%s):\n%s",
			node.Name, partitioned.Format(time.RFC3339Nano), detachedAt.Format(time.RFC3339Nano), logText(log))
	}
	var notEIO []string
	after := linesAfter(log, detachedAt.Add(margin), "write ")
	for _, l := range after {
		if !strings.Contains(l.Text, " failed: errno=EIO ") {
			notEIO = append(notEIO, l.Time.Format(time.RFC3339Nano)+" "+l.Text)
		}
	}
	if len(notEIO) > 0 {
		t.Errorf("the old container on %s wrote after the detach (%s) without EIO, %d times:\n%s", node.Name, detachedAt.Format(time.RFC3339Nano), len(notEIO), strings.Join(head(notEIO, 10), "\n"))
	}
	pids, err := c.Processes(node)
	if err != nil {
		t.Fatal(err)
	}
	if names := commands(pids); !strings.Contains(" "+strings.Join(names, " ")+" ", " writer ") {
		t.Errorf("the old writer no longer runs on the partitioned %s: %v", node.Name, names)
	}
	t.Logf("the old container on %s: %d writes ok while cut off before the detach, %d refused after it", node.Name, okCutOff, len(after))
	return log
}

// checkDetachRecords checks the volume's records after the failover from
// oldNode to newNode: intact, numbered 1, 2, ... without a gap or a repeat
// (records.Check: the replacement numbers on after the last record it
// finds); oldNode's first, as many as the array accepted from it, the last
// one its writer reported ok (lastOK) among them and at most the one in
// flight beyond it; then only newNode's, at least 3; no write of oldNode
// accepted by the array after the replacement's first record was made; and
// no S1 or S2 on the array. With powerCut, the array may have accepted one
// write more than the volume holds: the node plugin's FUSE server asks the
// array before it writes the data, and the power cut may fall in between
// (a write the writer was never told succeeded).
func checkDetachRecords(t *testing.T, data []byte, s *array.State, volume, oldNode, newNode string, lastOK int64, powerCut bool) {
	t.Helper()
	recs, err := records.Check(data)
	if err != nil {
		t.Errorf("the volume's records are not intact: %v", err)
	}
	accepted := s.Volumes[volume].Writes[oldNode]
	fromOld := 0
	for fromOld < len(recs) && recs[fromOld].Node == oldNode {
		fromOld++
	}
	if n := int64(fromOld); n != accepted && !(powerCut && n == accepted-1 && lastOK < accepted) {
		t.Errorf("the volume begins with %d records of %s, the array accepted %d writes from it", fromOld, oldNode, accepted)
	}
	if lastOK > int64(fromOld) || lastOK < int64(fromOld)-1 {
		t.Errorf("%s's writer last reported record %d ok, the volume holds %d of its records: an acknowledged write is lost, or more than the one in flight reached the volume", oldNode, lastOK, fromOld)
	}
	for _, r := range recs[fromOld:] {
		if r.Node != newNode {
			t.Errorf("record %d, after the replacement's first, was written by %s, want %s", r.Seq, r.Node, newNode)
			break
		}
	}
	if len(recs) < fromOld+3 {
		t.Fatalf("the volume holds %d records of %s, want the replacement's 3 at least", len(recs)-fromOld, newNode)
	}
	// The replacement stamps its record before writing it: a write of the
	// old node the array accepted after that stamp would be one after the
	// replacement's first.
	if last := s.Volumes[volume].LastWrite[oldNode]; !last.Before(recs[fromOld].Time) {
		t.Errorf("the array accepted a write of %s at %s, after the replacement's first record (%s)", oldNode, last.Format(time.RFC3339Nano), recs[fromOld].Time.Format(time.RFC3339Nano))
	}
	expectArraySafe(t, s, "")
	t.Logf("volume %s: %d records of %s (%d accepted by the array, last acknowledged %d), %d of %s; %d writes and %d reads of %s refused since the detach",
		volume, fromOld, oldNode, accepted, lastOK, len(recs)-fromOld, newNode, s.Refused["write-detached"], s.Refused["read-detached"], oldNode)
}

// checkPlainCleanup checks how the node agent cleaned the volume on node:
// its FencedVolumeCleaned Event says it made plain calls because the
// CSIDriver declares that the driver's unpublish revokes access, and the
// node plugin (without FORCE_UNPUBLISH) logged no forced teardown.
func checkPlainCleanup(ctx context.Context, t *testing.T, c *framework.Cluster, node string) {
	t.Helper()
	const how = "plain; the driver's unpublish revokes access"
	var msgs []string
	err := framework.WaitFor(ctx, 30*time.Second, "the node agent's "+nodeagent.ReasonVolumeCleaned+" Event on "+node, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "Node", "involvedObject.name": node, "reason": nodeagent.ReasonVolumeCleaned}.String()})
		if err != nil {
			return false, err
		}
		msgs = msgs[:0]
		for _, e := range evs.Items {
			msgs = append(msgs, e.Message)
			if strings.Contains(e.Message, realVolume) && strings.Contains(e.Message, how) {
				t.Logf("%s on %s: %s", e.Reason, node, e.Message)
				return true, nil
			}
		}
		return false, fmt.Errorf("events %q", msgs)
	})
	if err != nil {
		t.Errorf("%v: want one about %s saying %q", err, realVolume, how)
	}
	teardowns, err := pluginTeardowns(ctx, c, node)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range teardowns {
		if m := teardownLine.FindStringSubmatch(l); m[6] == "true" {
			t.Errorf("the node plugin on %s, without FORCE_UNPUBLISH, got a forced teardown: %s", node, l)
		}
	}
	t.Logf("the node plugin's teardowns of %s on %s:\n%s", realVolume, node, strings.Join(teardowns, "\n"))
}

// stillThere says, for a failover that did not happen, what the failed
// node still has of the volume: its access on the array, and the old
// container's successful writes since the failure (a partitioned node's
// writer that still writes was never cut off).
func stillThere(node *framework.RealNode, pod *corev1.Pod, failed time.Time, arr *array.Array, volume string) string {
	var b strings.Builder
	if s, err := arr.Snapshot(); err != nil {
		fmt.Fprintf(&b, "the array: %v", err)
	} else if p := s.Volumes[volume].Publications[node.Name]; p == nil {
		fmt.Fprintf(&b, "the array holds nothing of %s on %s", volume, node.Name)
	} else {
		fmt.Fprintf(&b, "the array holds %s on %s %s since %s", volume, node.Name, p.Access, p.Since.Format(time.RFC3339Nano))
	}
	log, err := node.ContainerLog(pod.Namespace, pod.Name, pod.UID, "writer")
	if err != nil {
		fmt.Fprintf(&b, "; the old container's log: %v", err)
		return b.String()
	}
	var ok []framework.LogLine
	for _, l := range linesAfter(log, failed, "write ") {
		if strings.HasSuffix(l.Text, " ok") {
			ok = append(ok, l)
		}
	}
	fmt.Fprintf(&b, "; the old container on %s wrote %d times successfully since", node.Name, len(ok))
	if len(ok) > 0 {
		last := ok[len(ok)-1]
		fmt.Fprintf(&b, ", last at %s: %s", last.Time.Format(time.RFC3339Nano), last.Text)
	}
	return b.String()
}
