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
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/powerfence"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/images/writer/records"
)

// powerNegativeEnv selects a negative control of TestRealNodesPowerFencing,
// which must then fail:
//   - "lying-bmc": the victim's BMC reports the power off (its machine
//     process ends, ipmi_sim answers "off") without cutting the node's
//     power (framework.NodeBMCOptions.Lie). The product confirms the fence
//     as it must, the pod moves, and the partitioned node, still running,
//     keeps writing: the node was never off when the fence was confirmed,
//     its processes run on, and the array counts its writes after the
//     volume moved (S1).
//   - "early-taint": the test adds the out-of-service taint once the
//     partitioned node is NotReady, as an operator who trusts NotReady
//     would: Kubernetes moves the pod and its volume without waiting for
//     the power fence, before any confirmation (and while the node still
//     writes: S1).
const powerNegativeEnv = "FENCE_E2E_REAL_POWER_NEGATIVE"

// The BMC's configuration as a user writes it (docs/power-fencing.md): a
// Secret with the credentials, labelled as fence agent credentials, and a
// FenceAgentConfig listing the node's BMC. ipmi_sim does not answer "Get
// Channel Cipher Suites": cipher 3 spares each ipmitool call 10-14 s of
// timeouts. Filled in with the password, the node, the BMC's address and
// port.
const realPowerConfig = `apiVersion: v1
kind: Secret
metadata:
  name: real-bmc-credentials
  namespace: kube-system
  labels:
    csi-fence.io/fence-agent-credentials: "true"
stringData: {user: admin, password: %q}
---
apiVersion: fencing.csi-fence.io/v1alpha1
kind: FenceAgentConfig
metadata:
  name: real-ipmi
spec:
  agent: fence_ipmilan
  sharedParameters: {lanplus: "1", cipher: "3"}
  credentials:
    secretName: real-bmc-credentials
    secretNamespace: kube-system
    parameters: {username: user, password: password}
  nodes:
  - name: %s
    parameters: {ip: %s, ipport: "%d"}
  timeouts: {callTimeoutSeconds: 40, retries: 1, retryIntervalSeconds: 1, confirmTimeoutSeconds: 30, statusIntervalSeconds: 1}
`

// TestRealNodesPowerFencing fails a writer over from a real node through
// power fencing, for a driver that cannot fence storage: the mock example
// deployed as shipped with the power-fencing component, its controller's
// mock driver with --disable-fence (no UNPUBLISH_FENCE, as every released
// driver), the controller's csi-fence-attacher from an image with
// fence_ipmilan (framework.PowerFencingAttacherImage). The first node has a
// BMC (openipmi's ipmi_sim on the nodes' bridge, framework.StartNodeBMC)
// whose machine is that node: its power off is the node's PowerOff, its
// power on a reboot. A Secret and a FenceAgentConfig, as a user writes
// them, name it.
//
// The writer (a StatefulSet, checksummed records on the mock's FUSE data
// path) runs on the first node, which is then partitioned: alive and
// writing, so nothing but its power off may free its volume. The product
// must escalate to the power fence, fence_ipmilan in the sidecar's
// container must power the node off through its BMC and see it off, and
// only then may anything move. Checked:
//
//   - the node was off (every process of it ended, the BMC's own record,
//     written to etcd before the BMC answers "off") before the record's
//     confirmation, and nothing moved before the confirmation: the old pod's
//     deletion, the replacement's creation, the detach from the dead node
//     and the attachment to the other one all come later in etcd's order
//     (one etcd: revisions order every write); the out-of-service taint too;
//   - the node kept writing while partitioned, up to its power off, and not
//     after; no process of it is left; the array never fenced the volume
//     (the driver cannot): the power off alone freed it;
//   - the replacement runs on the other node and writes; the volume holds
//     every record intact and in order, the first node's exactly as many as
//     the array accepted from it, the replacement's after them; S1 = S2 = 0;
//   - the BMC's password is in no Event and not in the sidecar's log;
//   - the node powered on through its BMC boots, comes back Ready, and is
//     released: the out-of-service taint this system added goes with the
//     quarantine, and the request completes.
func TestRealNodesPowerFencing(t *testing.T) {
	begin := time.Now()
	for _, tool := range []string{"fence_ipmilan", "ipmitool", "ipmi_sim"} {
		if os.Getenv(realNodesEnv) != "" && !toolInstalled(tool) {
			t.Fatalf("%s not installed: run hack/install-fence-agents.sh (make test-realnodes does)", tool)
		}
	}
	ctx, c, nodes := startRealNodes(t, framework.RealNodeOptions{ProductImages: true, PowerFencingImage: true})
	victim, on := nodes[0], nodes[1]
	negative := os.Getenv(powerNegativeEnv)
	switch negative {
	case "":
	case "lying-bmc":
		t.Logf("NEGATIVE CONTROL %s: the BMC of %s reports its power off without cutting it; this test must fail", negative, victim.Name)
	case "early-taint":
		t.Logf("NEGATIVE CONTROL %s: the test taints %s out of service once it is NotReady; this test must fail", negative, victim.Name)
	default:
		t.Fatalf("%s=%q: want lying-bmc or early-taint", powerNegativeEnv, negative)
	}
	dep := deployMockExample(ctx, t, c, nodes, framework.RealDeployOptions{
		ControllerNode:          on.Name,
		ControllerAttacherImage: framework.PowerFencingAttacherImage,
		MockControllerArgs:      []string{"--disable-fence"},
	})

	// The BMC. Once the node is off, before the BMC answers "off": the
	// array hears that the node's sessions dropped (a storage array sees
	// that of a host that lost its power), and the BMC's own record of the
	// power off goes into etcd, where its revision orders it among the
	// product's writes.
	password := randomSecret(t)
	offMark := "bmc-power-off-" + victim.Name
	bmc, err := c.StartNodeBMC(ctx, victim, framework.NodeBMCOptions{User: "admin", Password: password, Lie: negative == "lying-bmc",
		AfterPowerOff: func(ctx context.Context) error {
			arr, err := dep.Array()
			if err != nil {
				return err
			}
			if err := arr.PowerLoss(victim.Name); err != nil {
				return err
			}
			_, err = c.Client.CoreV1().ConfigMaps(realNS).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: offMark},
				Data:       map[string]string{"off": time.Now().UTC().Format(time.RFC3339Nano)},
			}, metav1.CreateOptions{})
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.DecodeManifests([]byte(fmt.Sprintf(realPowerConfig, password, victim.Name, bmc.Host, bmc.Port)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateObjects(ctx, objs, framework.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}

	const (
		volume = "vol-power-0"
		class  = "fence-power"
		logRel = "writes.log"
	)
	first := runRealWriter(ctx, t, c, dep, volume, class, victim, on)

	// From here on, every write that frees or moves the volume, and the
	// record's, in etcd's order.
	tl, err := watchPowerFailover(ctx, c, victim.Name, on.Name, volume, offMark)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.stop)

	partitioned := time.Now()
	if err := c.Node(victim.Name).Partition(ctx); err != nil {
		t.Fatal(err)
	}
	if negative == "early-taint" {
		if err := c.WaitNodeNotReady(ctx, victim.Name, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := c.AddTaint(ctx, victim.Name, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}); err != nil {
			t.Fatal(err)
		}
	}
	second, err := c.WaitWriterRunning(ctx, realNS, realSet+"-0", first.UID, 4*time.Minute)
	if err != nil {
		t.Fatalf("%v\nthe BMC's power changes: %v\nthe timeline:\n%s", err, bmc.Events(), tl)
	}
	t.Logf("writer failed over from %s to %s %.1fs after the partition", victim.Name, second.Spec.NodeName, time.Since(partitioned).Seconds())
	if second.Spec.NodeName != on.Name {
		t.Fatalf("the replacement runs on %s, want %s", second.Spec.NodeName, on.Name)
	}
	if err := c.WaitWrites(ctx, realNS, second.Name, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	wrote := time.Now()

	// The record: a power fence by fence_ipmilan under the user's config,
	// confirmed.
	fr, err := fencingv1alpha1.NewClient(c.Dynamic).Get(ctx, victim.Name)
	if err != nil {
		t.Fatalf("no FencingRequest for %s: %v", victim.Name, err)
	}
	nf := fr.Status.NodeFence
	if nf == nil || nf.Backend != fencingv1alpha1.BackendPower || nf.Agent != "fence_ipmilan" || nf.Config != "real-ipmi" || nf.StartedTime == nil || nf.ConfirmedTime == nil {
		t.Fatalf("the record does not show a confirmed power fence by fence_ipmilan under real-ipmi: %+v", nf)
	}
	t.Logf("power fence of %s: started %s, confirmed %s; the agent's runs (redacted):\n%s", victim.Name,
		nf.StartedTime.UTC().Format(time.RFC3339), nf.ConfirmedTime.UTC().Format(time.RFC3339), nf.Output)

	// The node was off before the confirmation, and nothing moved before it.
	events := bmc.Events()
	t.Logf("the BMC's power changes: %v", events)
	t.Run("OffBeforeConfirmedBeforeMoved", func(t *testing.T) {
		checkPowerOrder(t, tl, events)
	})
	if att := tl.first(func(e powerEvent) bool { return e.what == evAttached }); att != nil {
		t.Logf("attached to %s %.1fs after the partition, %.1fs after the BMC was asked to power %s off; timeline (revision, seen, what):\n%s",
			on.Name, att.seen.Sub(partitioned).Seconds(), att.seen.Sub(firstOff(events).Asked).Seconds(), victim.Name, tl)
	}

	// What the node did: it wrote while partitioned, up to its power off;
	// nothing of it runs any more.
	data, err := os.ReadFile(filepath.Join(dep.DataDir(volume), logRel))
	if err != nil {
		t.Fatal(err)
	}
	recs, checkErr := records.Check(data)
	if checkErr != nil {
		t.Errorf("the volume's records are not intact: %v", checkErr)
	}
	fromVictim := 0
	for fromVictim < len(recs) && recs[fromVictim].Node == victim.Name {
		fromVictim++
	}
	var whilePartitioned []records.Record
	for _, r := range recs[:fromVictim] {
		if r.Time.After(partitioned) {
			whilePartitioned = append(whilePartitioned, r)
		}
	}
	if len(whilePartitioned) < 5 {
		t.Errorf("%s wrote %d records while partitioned, want it alive and writing until its power off", victim.Name, len(whilePartitioned))
	}
	if off := firstOff(events); !off.Done.IsZero() && fromVictim > 0 && recs[fromVictim-1].Time.After(off.Done) {
		t.Errorf("%s's last record is stamped %s, after its power off was done at %s", victim.Name,
			recs[fromVictim-1].Time.Format(time.RFC3339Nano), off.Done.Format(time.RFC3339Nano))
	}
	pids, err := c.Processes(victim)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) > 0 {
		t.Errorf("%s was confirmed off, yet %d of its processes run: %v", victim.Name, len(pids), head(commands(pids), 12))
	}
	if pid, on := bmc.MachinePID(); on {
		t.Errorf("the BMC of %s reports its machine on (pid %d) after the fence", victim.Name, pid)
	}

	// The volume: intact, the victim's records as many as the array
	// accepted, the replacement's after them; never fenced by the driver
	// (it cannot), no violation.
	arr, err := dep.Array()
	if err != nil {
		t.Fatal(err)
	}
	s, err := arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	vol := s.Volumes[volume]
	if accepted := vol.Writes[victim.Name]; int64(fromVictim) != accepted {
		t.Errorf("the volume begins with %d records of %s, the array accepted %d writes from it", fromVictim, victim.Name, accepted)
	}
	for _, r := range recs[fromVictim:] {
		if r.Node != on.Name {
			t.Errorf("record %d after the failover was written by %s, want %s", r.Seq, r.Node, on.Name)
			break
		}
	}
	if len(recs) < fromVictim+3 {
		t.Errorf("the volume holds %d records of %s, want the replacement's 3 at least", len(recs)-fromVictim, on.Name)
	}
	if p := vol.Publications[victim.Name]; p != nil && p.Access == array.AccessFenced {
		t.Errorf("the array holds %s fenced on %s: the driver was to have no fence", volume, victim.Name)
	}
	// The array's own clock (the mock's, this host's) on the attachment.
	if p, off := vol.Publications[on.Name], firstOff(events); p == nil {
		t.Errorf("the array does not hold %s published to %s", volume, on.Name)
	} else if !off.Done.IsZero() && !p.Since.After(off.Done) {
		t.Errorf("the array published %s to %s at %s, before %s was off at %s", volume, on.Name,
			p.Since.Format(time.RFC3339Nano), victim.Name, off.Done.Format(time.RFC3339Nano))
	}
	expectArraySafe(t, s, "")
	if e := fencerecord.Find(fr, framework.DriverName, volume); e != nil {
		t.Logf("the record's entry of %s: fenced %v, error %q", volume, e.FencedTime != nil, e.FenceError)
	}
	t.Logf("volume %s: %d records of %s (%d while partitioned), %d of %s", volume, fromVictim, victim.Name,
		len(whilePartitioned), len(recs)-fromVictim, on.Name)
	t.Run("NoSecret", func(t *testing.T) {
		checkNoSecretReal(ctx, t, c, password)
	})
	if t.Failed() {
		t.FailNow() // a node not powered off must not be "powered on"
	}

	// The admin repairs the network and powers the node on through its
	// BMC: it boots, comes back Ready and is released.
	if err := c.Node(victim.Name).Heal(ctx); err != nil {
		t.Fatal(err)
	}
	poweredOn := time.Now()
	if _, err := powerfence.NewBackend(&powerfence.Resolver{Dynamic: c.Dynamic, Kube: c.Client}).PowerOn(ctx, victim.Name); err != nil {
		t.Fatalf("powering %s on through its BMC: %v\n%s", victim.Name, err, bmc.Output())
	}
	if err := c.WaitNodeReady(ctx, victim.Name, true, 3*time.Minute); err != nil {
		t.Fatalf("%v\nthe BMC's power changes: %v", err, bmc.Events())
	}
	ready := time.Now()
	if err := waitPowerReleased(ctx, c, victim.Name, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s powered on through its BMC: Ready %.1fs later, released %.1fs after that; the replacement wrote %.1fs after the partition; the test took %.1fs",
		victim.Name, ready.Sub(poweredOn).Seconds(), time.Since(ready).Seconds(), wrote.Sub(partitioned).Seconds(), time.Since(begin).Seconds())
	expectArraySafe(t, mustSnapshot(t, dep), "after the node came back")
}

func firstOff(events []framework.PowerEvent) framework.PowerEvent {
	for _, e := range events {
		if e.Off {
			return e
		}
	}
	return framework.PowerEvent{}
}

func mustSnapshot(t *testing.T, dep *framework.RealDeployment) *array.State {
	t.Helper()
	arr, err := dep.Array()
	if err != nil {
		t.Fatal(err)
	}
	s, err := arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkPowerOrder checks the order etcd wrote things in: the BMC's record
// of the power off (written once every process of the node had ended,
// before the BMC answered "off") before the record's confirmation, and
// every move of the pod or its volume after it.
func checkPowerOrder(t *testing.T, tl *powerTimeline, events []framework.PowerEvent) {
	off := firstOff(events)
	switch {
	case off.Asked.IsZero():
		t.Errorf("the BMC was never asked to power the node off: %v", events)
	case off.Lied:
		t.Errorf("the BMC reported the node off without powering it off (asked at %s): the node ran on while the fence was confirmed",
			off.Asked.Format(time.RFC3339Nano))
	case off.Err != nil || off.Done.IsZero():
		t.Errorf("the power off through the BMC did not complete: %v", off)
	}
	confirmed := tl.first(func(e powerEvent) bool { return e.what == evConfirmed })
	if confirmed == nil {
		t.Fatalf("the record's confirmation was never seen:\n%s", tl)
	}
	if e := tl.first(func(e powerEvent) bool { return e.what == evOff }); e == nil {
		t.Errorf("the BMC's record of the power off is not in etcd: the node was not off when the fence was confirmed (revision %d)", confirmed.rv)
	} else if e.rv >= confirmed.rv {
		t.Errorf("the node was off at revision %d, not before the fence was confirmed at revision %d", e.rv, confirmed.rv)
	}
	for _, want := range []string{evOldPodGone, evNewPod, evDetach, evAttach, evOutOfService} {
		e := tl.first(func(e powerEvent) bool { return e.what == want })
		switch {
		case e == nil:
			t.Errorf("never saw %s", want)
		case e.rv <= confirmed.rv:
			t.Errorf("%s at revision %d, before the power off was confirmed at revision %d", want, e.rv, confirmed.rv)
		}
	}
	if t.Failed() {
		t.Logf("timeline:\n%s", tl)
	}
}

// checkNoSecretReal checks S7 on the real nodes: the BMC's password is in
// no Event and not in the log of the controller pod's csi-fence-attacher,
// which ran fence_ipmilan.
func checkNoSecretReal(ctx context.Context, t *testing.T, c *framework.Cluster, secret string) {
	evs, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.Contains(e.Message, secret) {
			t.Errorf("S7: event %s/%s shows the BMC password: %s", e.Namespace, e.Name, e.Reason)
		}
	}
	pods, err := c.Client.CoreV1().Pods(realNS).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"app": "csi-fence-mock-controller"}.String()})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no controller pod: %v", err)
	}
	for _, p := range pods.Items {
		log, err := c.Client.CoreV1().Pods(realNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: "csi-attacher"}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(log, []byte("fence_ipmilan")) {
			t.Errorf("the log of %s's csi-attacher does not mention fence_ipmilan: not the log of the power fence", p.Name)
		}
		if bytes.Contains(log, []byte(secret)) {
			t.Errorf("S7: the log of %s's csi-attacher shows the BMC password", p.Name)
		}
	}
}

// waitPowerReleased waits until the node carries neither the quarantine nor
// the out-of-service taint and its FencingRequest is complete without the
// product's finalizer.
func waitPowerReleased(ctx context.Context, c *framework.Cluster, node string, timeout time.Duration) error {
	frs := fencingv1alpha1.NewClient(c.Dynamic)
	return framework.WaitFor(ctx, timeout, node+" released: no quarantine or out-of-service taint, its FencingRequest complete", func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		fr, err := frs.Get(ctx, node)
		if err != nil {
			return false, err
		}
		quarantined := framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule)
		oos := framework.HasTaint(n, contract.OutOfServiceTaintKey, corev1.TaintEffectNoExecute)
		finalizer := slices.Contains(fr.Finalizers, contract.RecordFinalizer)
		done := !quarantined && !oos && fr.Status.Phase == fencingv1alpha1.PhaseComplete && !finalizer
		return done, fmt.Errorf("Ready %v, quarantined %v, out of service %v; record phase %q, finalizer %v",
			framework.NodeReady(n), quarantined, oos, fr.Status.Phase, finalizer)
	})
}

// ---- what moved, in etcd's order ----

// What the power failover timeline records.
const (
	evNotReady     = "the node not Ready"
	evOff          = "the BMC's record of the node powered off"
	evStarted      = "the power fence's intent recorded"
	evConfirmed    = "the power off confirmed in the record"
	evOutOfService = "the out-of-service taint on the node"
	evOldPodGone   = "the old pod deleted from etcd"
	evNewPod       = "the replacement pod created"
	evDetach       = "the detach from the dead node begun"
	evAttach       = "the attachment to the other node created"
	evAttached     = "the attachment to the other node attached"
)

// powerEvent is the first time the timeline saw one of the above; rv is
// the revision of its write (one etcd: revisions order every write).
type powerEvent struct {
	what string
	rv   uint64
	seen time.Time
}

type powerTimeline struct {
	mu     sync.Mutex
	events []powerEvent
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// add records what at rv, once: the first write that shows it.
func (tl *powerTimeline) add(what, rv string) {
	r, _ := strconv.ParseUint(rv, 10, 64)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.events {
		if e.what == what {
			return
		}
	}
	tl.events = append(tl.events, powerEvent{what: what, rv: r, seen: time.Now()})
}

func (tl *powerTimeline) first(f func(powerEvent) bool) *powerEvent {
	for _, e := range tl.snapshot() {
		if f(e) {
			return &e
		}
	}
	return nil
}

func (tl *powerTimeline) snapshot() []powerEvent {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := slices.Clone(tl.events)
	slices.SortStableFunc(out, func(a, b powerEvent) int {
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

func (tl *powerTimeline) String() string {
	var b strings.Builder
	for _, e := range tl.snapshot() {
		fmt.Fprintf(&b, "  %d %s %s\n", e.rv, e.seen.UTC().Format("15:04:05.000"), e.what)
	}
	return b.String()
}

func (tl *powerTimeline) stop() {
	tl.cancel()
	tl.done.Wait()
}

// watchPowerFailover follows, from now on, the node's FencingRequest and
// taints, the writer's pods, the VolumeAttachments of the volume and the
// BMC's record of the power off (the ConfigMap offMark), recording the
// first write that shows each step.
func watchPowerFailover(ctx context.Context, c *framework.Cluster, node, other, volume, offMark string) (*powerTimeline, error) {
	ctx, cancel := context.WithCancel(ctx)
	tl := &powerTimeline{cancel: cancel}
	byName := func(name string) string { return fields.OneTermEqualSelector("metadata.name", name).String() }
	follow := func(list func(context.Context) (string, error), w watchFunc, handle func(watch.Event)) error {
		rv, err := list(ctx)
		if err != nil {
			return err
		}
		return followWatch(ctx, &tl.done, rv, w, handle)
	}
	frs := fencingv1alpha1.NewClient(c.Dynamic)
	pods := c.Client.CoreV1().Pods(realNS)
	vas := c.Client.StorageV1().VolumeAttachments()
	cms := c.Client.CoreV1().ConfigMaps(realNS)
	var oldPods []types.UID
	steps := []struct {
		list   func(context.Context) (string, error)
		watch  watchFunc
		handle func(watch.Event)
	}{
		{ // the record: intent and confirmation
			list: func(ctx context.Context) (string, error) {
				l, err := frs.List(ctx, metav1.ListOptions{FieldSelector: byName(node)})
				if err != nil {
					return "", err
				}
				return l.ResourceVersion, nil
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = byName(node)
				return frs.Watch(ctx, o)
			},
			handle: func(ev watch.Event) {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					return
				}
				fr, err := fencingv1alpha1.FromUnstructured(u)
				if err != nil || fr.Status.NodeFence == nil {
					return
				}
				if fr.Status.NodeFence.StartedTime != nil {
					tl.add(evStarted, fr.ResourceVersion)
				}
				if fr.Status.NodeFence.ConfirmedTime != nil {
					tl.add(evConfirmed, fr.ResourceVersion)
				}
			},
		},
		{ // the node: not Ready, its out-of-service taint
			list: func(ctx context.Context) (string, error) {
				l, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: byName(node)})
				if err != nil {
					return "", err
				}
				return l.ResourceVersion, nil
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = byName(node)
				return c.Client.CoreV1().Nodes().Watch(ctx, o)
			},
			handle: func(ev watch.Event) {
				n, ok := ev.Object.(*corev1.Node)
				if !ok {
					return
				}
				if !framework.NodeReady(n) {
					tl.add(evNotReady, n.ResourceVersion)
				}
				if framework.HasTaint(n, contract.OutOfServiceTaintKey, corev1.TaintEffectNoExecute) {
					tl.add(evOutOfService, n.ResourceVersion)
				}
			},
		},
		{ // the writer's pods: the old one gone from etcd, a new one
			list: func(ctx context.Context) (string, error) {
				l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"app": realSet}.String()})
				if err != nil {
					return "", err
				}
				for _, p := range l.Items {
					oldPods = append(oldPods, p.UID)
				}
				return l.ResourceVersion, nil
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = labels.Set{"app": realSet}.String()
				return pods.Watch(ctx, o)
			},
			handle: func(ev watch.Event) {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					return
				}
				old := slices.Contains(oldPods, p.UID)
				switch {
				case old && ev.Type == watch.Deleted:
					tl.add(evOldPodGone, p.ResourceVersion)
				case !old && ev.Type == watch.Added:
					tl.add(evNewPod, p.ResourceVersion)
				}
			},
		},
		{ // the volume's attachments: the old one's detach, a new one
			list: func(ctx context.Context) (string, error) {
				l, err := vas.List(ctx, metav1.ListOptions{})
				if err != nil {
					return "", err
				}
				return l.ResourceVersion, nil
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return vas.Watch(ctx, o)
			},
			handle: func(ev watch.Event) {
				va, ok := ev.Object.(*storagev1.VolumeAttachment)
				if !ok || va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != volume {
					return
				}
				switch va.Spec.NodeName {
				case node:
					if va.DeletionTimestamp != nil || ev.Type == watch.Deleted {
						tl.add(evDetach, va.ResourceVersion)
					}
				case other:
					tl.add(evAttach, va.ResourceVersion)
					if va.Status.Attached {
						tl.add(evAttached, va.ResourceVersion)
					}
				}
			},
		},
		{ // the BMC's record of the power off
			list: func(ctx context.Context) (string, error) {
				l, err := cms.List(ctx, metav1.ListOptions{FieldSelector: byName(offMark)})
				if err != nil {
					return "", err
				}
				return l.ResourceVersion, nil
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = byName(offMark)
				return cms.Watch(ctx, o)
			},
			handle: func(ev watch.Event) {
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Added {
					tl.add(evOff, cm.ResourceVersion)
				}
			},
		},
	}
	for _, s := range steps {
		if err := follow(s.list, s.watch, s.handle); err != nil {
			tl.stop()
			return nil, err
		}
	}
	return tl, nil
}
