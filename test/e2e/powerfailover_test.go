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
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/powerfence"
	"github.com/csi-fence/fence-attacher/test/bmcsim"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// noFenceDriver is a driver without the CSI extension: the mock with
// --disable-fence, as every released driver is today.
const noFenceDriver = "nofence.csi-fence.io"

// Power fencing end to end, on real parts: a pod with a volume of a driver
// that fences (the mock) and one of a driver that cannot (the mock with
// --disable-fence), on a node that is cut off from the control plane but
// keeps writing to both volumes. The second driver's node plugin on each
// node is the machine of a real IPMI BMC (openipmi's ipmi_sim): its writes
// stop only if the machine is powered off. csi-fence-attacher must escalate
// from the storage fence to the power fence (Debian's fence_ipmilan, with
// the password from a Secret), confirm the node off, mark it out of service
// with the taint's provenance, and let the real pod GC and attach/detach
// controller move the pod with both volumes: no array sees the old node
// and the new one use a volume at once. The admin powers the node back on;
// once it is Ready and clean, the out-of-service taint this system added
// goes with the quarantine, and no credential is in any log or Event (S7).
func TestPowerFenceFailsOverADriverWithoutFence(t *testing.T) {
	for _, tool := range []string{"fence_ipmilan", "ipmi_sim"} {
		if !toolInstalled(tool) {
			t.Fatalf("%s not installed: run hack/install-fence-agents.sh (make test does)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	password := randomSecret(t)
	const prefix = "pw"
	s := setupTwoDriverPod(ctx, t, framework.DriverOptions{Name: noFenceDriver, MockArgs: []string{"--disable-fence"}}, prefix, 2, func(d2 *framework.Driver) {
		for i := 0; i < 2; i++ {
			product.SetPowerSwitch(prefix+"-node-"+strconv.Itoa(i), d2, bmcsim.Config{Dir: t.TempDir(), User: "admin", Password: password})
		}
	})
	env, d1, d2, victim, vol1, vol2 := s.env, s.d1, s.d2, s.victim, s.vol1, s.vol2
	unconfigure, err := product.ConfigurePowerSwitches(ctx, "pw-bmc", d2, env.Nodes, "admin", password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unconfigure)

	machine := product.Nodes[victim].Plugins[1]
	pid, on := machine.BMC.MachinePID()
	if !on {
		t.Fatalf("the BMC of %s shows its machine off before the test", victim)
	}
	w1 := scenario.StartWriter(ctx, product.Nodes[victim].Plugins[0], vol1, 50*time.Millisecond)
	defer w1.Stop()
	w2 := scenario.StartWriter(ctx, machine, vol2, 50*time.Millisecond)
	defer w2.Stop()
	if err := framework.WaitFor(ctx, 10*time.Second, "the workload writing to both volumes", func(context.Context) (bool, error) {
		return w1.Accepted.Load() > 0 && w2.Accepted.Load() > 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	node := watchNode(t, victim)
	down := time.Now()
	// Cut off: its heartbeats, kubelets and node agents stop; its plugins
	// keep serving its workload's writes.
	if err := product.Node(victim).Partition(ctx); err != nil {
		t.Fatal(err)
	}

	newNode, err := env.WaitAttached(ctx, 0, victim, 240*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the pod runs on %s with both volumes attached", newNode)
	if bmcsim.ProcessAlive(pid) {
		t.Errorf("the machine of %s (pid %d) still runs after the failover", victim, pid)
	}
	accepted := w2.Accepted.Load()
	for _, wr := range []struct {
		pl  *framework.NodePlugin
		vol string
	}{{product.Nodes[newNode].Plugins[0], vol1}, {product.Nodes[newNode].Plugins[1], vol2}} {
		if err := wr.pl.Write(ctx, wr.vol); err != nil {
			t.Errorf("the replacement cannot write %s: %v", wr.vol, err)
		}
	}
	if got := w2.Accepted.Load(); got != accepted {
		t.Errorf("the powered-off node wrote %s %d times after the failover", vol2, got-accepted)
	}
	fr, err := fencingv1alpha1.NewClient(cluster.Dynamic).Get(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	nf := fr.Status.NodeFence
	if nf == nil || nf.Backend != fencingv1alpha1.BackendPower || nf.StartedTime == nil || nf.ConfirmedTime == nil || nf.Agent != "fence_ipmilan" {
		t.Fatalf("the record does not show a confirmed power fence: %+v", nf)
	}
	if s, ok := node.first(down, func(s nodeState) bool { return s.complete }); !ok {
		t.Errorf("%s never got FencingComplete=True", victim)
	} else if s.at.Before(nf.ConfirmedTime.Time.Add(-time.Second)) {
		t.Errorf("FencingComplete at %s, before the power off was confirmed at %s", s.at, nf.ConfirmedTime)
	}
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !framework.HasTaint(n, contract.OutOfServiceTaintKey, corev1.TaintEffectNoExecute) || n.Annotations[contract.OutOfServiceProvenanceAnnotation] == "" {
		t.Errorf("%s is not out of service by this system's taint: taints %v, annotations %v", victim, n.Spec.Taints, n.Annotations)
	}
	expectEvent(ctx, t, victim, "NodePoweredOff")
	expectNoViolations(t)

	// The admin powers the node on through its BMC; it boots and comes back.
	if _, err := powerfence.NewBackend(&powerfence.Resolver{Dynamic: cluster.Dynamic, Kube: cluster.Client}).PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := env.PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	expectReleased(ctx, t, victim, fencedVolume{d1, vol1})
	n, err = cluster.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if framework.HasTaint(n, contract.OutOfServiceTaintKey, corev1.TaintEffectNoExecute) || n.Annotations[contract.OutOfServiceProvenanceAnnotation] != "" {
		t.Errorf("the out-of-service taint this system added is left on %s: %v %v", victim, n.Spec.Taints, n.Annotations)
	}
	expectNoViolations(t)
	expectNoSecret(ctx, t, password)
}

// expectEvent checks that the node has an Event with reason.
func expectEvent(ctx context.Context, t *testing.T, node, reason string) {
	t.Helper()
	// Events are written by the recorder's broadcaster after the write they
	// report: the state the caller waited for can be seen before its Event.
	if err := framework.WaitFor(ctx, 30*time.Second, reason+" event on node "+node, func(ctx context.Context) (bool, error) {
		evs, err := cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
		if err != nil {
			return false, err
		}
		return len(evs.Items) > 0, nil
	}); err != nil {
		t.Errorf("no %s event on node %s: %v", reason, node, err)
	}
}

// expectNoSecret checks S7: the secret is in no Event and no log of the run.
func expectNoSecret(ctx context.Context, t *testing.T, secret string) {
	t.Helper()
	evs, err := cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.Contains(e.Message, secret) {
			t.Errorf("S7: event %s/%s shows the BMC password: %s", e.Namespace, e.Name, e.Reason)
		}
	}
	// Every component's log (the audit log records the test's own Secret).
	logs, err := filepath.Glob(filepath.Join(cluster.WorkDir, "logs", "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no logs to check: %v", err)
	}
	for _, f := range logs {
		if strings.HasPrefix(filepath.Base(f), "audit") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("S7: log %s shows the BMC password", f)
		}
	}
}

// toolInstalled reports whether a program is on PATH or in /usr/sbin.
func toolInstalled(name string) bool {
	if _, err := exec.LookPath(name); err == nil {
		return true
	}
	_, err := os.Stat(filepath.Join("/usr/sbin", name))
	return err == nil
}

func randomSecret(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)[:16]
}
