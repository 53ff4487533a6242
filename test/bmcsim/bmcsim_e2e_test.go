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

// Power fencing on real parts: pkg/powerfence runs Debian's fence_ipmilan
// (which runs ipmitool, lanplus) against openipmi's ipmi_sim on loopback,
// whose machine is a process writing heartbeats, as a node writes to its
// volume. A fence must stop those writes, and say so only once they stopped.
// hack/install-fence-agents.sh installs the three programs.
package bmcsim_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/powerfence"
	"github.com/csi-fence/fence-attacher/test/bmcsim"
)

func TestMain(m *testing.M) {
	// The machine ipmi_sim starts is this binary (bmcsim.MachineCommand).
	if len(os.Args) > 1 && os.Args[1] == bmcsim.MachineFlag {
		os.Exit(bmcsim.RunMachine(os.Args[2:]))
	}
	os.Exit(m.Run())
}

const node = "node-1"

// rig is one BMC, its machine, and a powerfence backend configured for it
// through a FenceAgentConfig and a Secret (client-go fakes: the real parts
// here are the agent, ipmitool and the BMC).
type rig struct {
	bmc       *bmcsim.BMC
	heartbeat string
	backend   powerfence.Backend
	logger    klog.Logger
	ctx       context.Context
	password  string
}

// rigOptions vary a rig.
type rigOptions struct {
	// ignoreTERM makes the machine a hung node that ignores SIGTERM.
	ignoreTERM bool
	// agentPassword is the password the Secret holds (default: the BMC's).
	agentPassword func(real string) string
	// unknownSecretOption also maps the Secret's password to an option
	// fence_ipmilan does not know, as an admin's slip would (ipmi_password
	// for password): the agent then prints it in its "Ignoring unknown
	// option" warning, and the redaction must catch it.
	unknownSecretOption string
	// confirmTimeout bounds the confirmation (default 20 s).
	confirmTimeout int32
	// secretLabels are the Secret's labels (default: the opt-in label
	// that makes it fence agent credentials).
	secretLabels map[string]string
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	if o.agentPassword == nil {
		o.agentPassword = func(real string) string { return real }
	}
	if o.confirmTimeout == 0 {
		o.confirmTimeout = 20
	}
	if o.secretLabels == nil {
		o.secretLabels = map[string]string{contract.FenceAgentCredentialsLabel: contract.FenceAgentCredentialsTrue}
	}
	for _, tool := range []string{"fence_ipmilan", "ipmitool", "ipmi_sim"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := os.Stat(filepath.Join("/usr/sbin", tool)); err != nil {
				t.Fatalf("%s not installed: run hack/install-fence-agents.sh", tool)
			}
		}
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(10), ktesting.BufferLogs(true)))
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logger), 3*time.Minute)
	t.Cleanup(cancel)

	r := &rig{logger: logger, ctx: ctx, password: randomPassword(t)}
	dir := t.TempDir()
	r.heartbeat = filepath.Join(dir, "heartbeat")
	machine, err := bmcsim.MachineCommand(r.heartbeat, o.ignoreTERM)
	if err != nil {
		t.Fatal(err)
	}
	r.bmc, err = bmcsim.Start(ctx, bmcsim.Config{Dir: dir, User: "admin", Password: r.password, Machine: machine})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.bmc.Stop)

	cfg := &fencingv1alpha1.FenceAgentConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "bmcsim"},
		Spec: fencingv1alpha1.FenceAgentConfigSpec{
			Agent: "fence_ipmilan",
			// ipmi_sim does not answer "Get Channel Cipher Suites": name one,
			// or every ipmitool call waits 10-14 s for that to time out.
			SharedParameters: map[string]string{"lanplus": "1", "cipher": "3"},
			Credentials: &fencingv1alpha1.FenceAgentCredentials{SecretName: "bmc", SecretNamespace: "kube-system",
				Parameters: map[string]string{"username": "username", "password": "password"}},
			Nodes: []fencingv1alpha1.FenceAgentNode{{Name: node,
				Parameters: map[string]string{"ip": r.bmc.Host, "ipport": strconv.Itoa(r.bmc.Port)}}},
			Timeouts: &fencingv1alpha1.FenceAgentTimeouts{CallTimeoutSeconds: 40, Retries: ptr.To[int32](1),
				RetryIntervalSeconds: 1, ConfirmTimeoutSeconds: o.confirmTimeout, StatusIntervalSeconds: 1},
		},
	}
	if o.unknownSecretOption != "" {
		cfg.Spec.Credentials.Parameters[o.unknownSecretOption] = "password"
	}
	u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.FenceAgentConfigResource: "FenceAgentConfigList"}, u)
	kube := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bmc", Namespace: "kube-system", Labels: o.secretLabels},
		Data: map[string][]byte{"username": []byte("admin"), "password": []byte(o.agentPassword(r.password))}})
	r.backend = powerfence.NewBackend(&powerfence.Resolver{Dynamic: dyn, Kube: kube, AllowedAgents: []string{"fence_ipmilan"}})
	return r
}

func randomPassword(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "pw-" + hex.EncodeToString(b) // 15 characters: IPMI allows 16
}

// waitBeats waits until the heartbeat file grows by a few beats written by
// pid (0: any), and returns the last.
func (r *rig) waitBeats(t *testing.T, pid int) bmcsim.Beat {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	start, _, _ := bmcsim.Heartbeats(r.heartbeat)
	for {
		size, last, err := bmcsim.Heartbeats(r.heartbeat)
		if err == nil && size > start+100 && (pid == 0 || last.PID == pid) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("machine %d is not writing: size %d (was %d), last %+v, err %v; BMC output: %s", pid, size, start, last, err, r.bmc.Output())
		}
		time.Sleep(bmcsim.HeartbeatInterval)
	}
}

// expectNoSecret is S7 over everything this rig captured: every log line at
// every verbosity, every Result (what a caller would put in a record, an
// Event or a status), every error, and the BMC's own output.
func (r *rig) expectNoSecret(t *testing.T, secret string, extra ...string) {
	t.Helper()
	texts := append([]string{r.logger.GetSink().(ktesting.Underlier).GetBuffer().String(), r.bmc.Output()}, extra...)
	for _, text := range texts {
		if strings.Contains(text, secret) {
			t.Errorf("the BMC password appears in:\n%s", text)
		}
	}
}

func resultText(t *testing.T, res powerfence.Result, err error) string {
	b, jerr := json.Marshal(res)
	if jerr != nil {
		t.Fatal(jerr)
	}
	if err != nil {
		return string(b) + "\n" + err.Error()
	}
	return string(b)
}

// A node that is on is powered off by fence_ipmilan: the fence returns only
// once the BMC reports it off, by then its process is gone and its writes
// have stopped; "on" brings it back.
func TestPowerFenceStopsTheMachine(t *testing.T) {
	r := newRig(t, rigOptions{unknownSecretOption: "ipmi_password"})
	ctx := r.ctx
	var captured []string

	pid, err := r.bmc.WaitMachine(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	r.waitBeats(t, pid)

	res, err := r.backend.Status(ctx, node)
	captured = append(captured, resultText(t, res, err))
	if err != nil || res.State != powerfence.PowerOn {
		t.Fatalf("status before the fence: %s, %v; want On", res.State, err)
	}

	start := time.Now()
	res, err = r.backend.Fence(ctx, node)
	captured = append(captured, resultText(t, res, err))
	if err != nil || !res.Confirmed || res.State != powerfence.PowerOff {
		t.Fatalf("fence: %+v, %v", res, err)
	}
	t.Logf("fenced in %v (off done after %v, confirmed after %v); steps:", time.Since(start),
		res.ActionTime.Sub(res.StartTime), res.ConfirmedTime.Sub(res.StartTime))
	for _, s := range res.Steps {
		t.Logf("  %s #%d exit %d in %v: %q", s.Action, s.Attempt, s.ExitCode, s.Duration, s.Output)
	}
	if !strings.Contains(res.Steps[0].Output, "Success: Powered OFF") {
		t.Errorf("the agent's own words are not kept: %q", res.Steps[0].Output)
	}
	// The real agent echoed the password it did not know as an option: the
	// redaction caught it (expectNoSecret below checks it is gone everywhere).
	if !strings.Contains(res.Steps[0].Output, "Ignoring unknown option 'ipmi_password="+powerfence.Redacted+"'") {
		t.Errorf("fence_ipmilan did not echo the unknown option, so S7 is not put to the test: %q", res.Steps[0].Output)
	}

	// Confirmed off means: the machine's process is gone...
	if bmcsim.ProcessAlive(pid) {
		t.Errorf("machine %d still runs after a confirmed fence", pid)
	}
	if p, on := r.bmc.MachinePID(); on {
		t.Errorf("the BMC runs a machine (%d) after a confirmed fence", p)
	}
	// ...and its writes have stopped: nothing written after the
	// confirmation, and nothing more over an observation window of 100
	// heartbeat intervals (no process is left that could write).
	size, last, err := bmcsim.Heartbeats(r.heartbeat)
	if err != nil {
		t.Fatal(err)
	}
	if last.PID != pid || !last.Time.Before(res.ConfirmedTime) {
		t.Errorf("last heartbeat %+v, want one of %d before the confirmation at %v", last, pid, res.ConfirmedTime)
	}
	t.Logf("last write %v before the confirmation", res.ConfirmedTime.Sub(last.Time))
	window := time.NewTimer(100 * bmcsim.HeartbeatInterval)
	<-window.C
	if size2, last2, _ := bmcsim.Heartbeats(r.heartbeat); size2 != size {
		t.Errorf("the heartbeat file grew from %d to %d bytes after the fence (last %+v)", size, size2, last2)
	}

	res, err = r.backend.Status(ctx, node)
	captured = append(captured, resultText(t, res, err))
	if err != nil || res.State != powerfence.PowerOff {
		t.Errorf("status after the fence: %s, %v; want Off", res.State, err)
	}

	res, err = r.backend.PowerOn(ctx, node)
	captured = append(captured, resultText(t, res, err))
	if err != nil || !res.Confirmed {
		t.Fatalf("power on: %+v, %v", res, err)
	}
	newPID, err := r.bmc.WaitMachine(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if newPID == pid {
		t.Errorf("power on did not start a new machine")
	}
	r.waitBeats(t, newPID)

	r.expectNoSecret(t, r.password, captured...)
}

// A hung node ignores SIGTERM: the BMC kills it kill_wait seconds later, and
// the fence is confirmed only then.
func TestPowerFenceHungMachine(t *testing.T) {
	r := newRig(t, rigOptions{ignoreTERM: true})
	pid, err := r.bmc.WaitMachine(r.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	r.waitBeats(t, pid)
	res, err := r.backend.Fence(r.ctx, node)
	if err != nil || !res.Confirmed {
		t.Fatalf("fence: %+v, %v", res, err)
	}
	if bmcsim.ProcessAlive(pid) {
		t.Errorf("machine %d still runs after a confirmed fence", pid)
	}
	_, last, _ := bmcsim.Heartbeats(r.heartbeat)
	if !last.Time.Before(res.ConfirmedTime) {
		t.Errorf("last heartbeat at %v, after the confirmation at %v", last.Time, res.ConfirmedTime)
	}
	// SIGTERM at the next tick, SIGKILL kill_wait (2 s) later: the machine
	// wrote for about 2 s after the power off was accepted.
	t.Logf("fence confirmed after %v; last write %v after the fence started",
		res.ConfirmedTime.Sub(res.StartTime), last.Time.Sub(res.StartTime))
	r.expectNoSecret(t, r.password, resultText(t, res, err))
}

// A wrong password fails the fence: not confirmed, the machine runs on, and
// neither password shows anywhere.
func TestPowerFenceWrongPassword(t *testing.T) {
	wrong := ""
	r := newRig(t, rigOptions{confirmTimeout: 5, agentPassword: func(real string) string {
		wrong = "wrong-" + real[3:]
		return wrong
	}})
	pid, err := r.bmc.WaitMachine(r.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := r.backend.Fence(r.ctx, node)
	if err == nil || res.Confirmed {
		t.Fatalf("fence with a wrong password: %+v, %v; want an error", res, err)
	}
	t.Logf("refused in %v: %v", time.Since(start), err)
	if !bmcsim.ProcessAlive(pid) {
		t.Errorf("machine %d stopped although the fence failed", pid)
	}
	r.waitBeats(t, pid)
	text := resultText(t, res, err)
	r.expectNoSecret(t, wrong, text)
	r.expectNoSecret(t, r.password, text)
}

// A Secret that did not opt in as fence agent credentials (another team's,
// named by whoever wrote the FenceAgentConfig) is never handed to the agent:
// the fence is not attempted, the error says which label the Secret needs,
// and the machine runs on.
func TestPowerFenceRefusesSecretWithoutOptIn(t *testing.T) {
	r := newRig(t, rigOptions{secretLabels: map[string]string{"team": "databases"}})
	pid, err := r.bmc.WaitMachine(r.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.backend.Fence(r.ctx, node)
	want := `Secret kube-system/bmc does not opt in as fence agent credentials: it needs the label csi-fence.io/fence-agent-credentials="true"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("fence with a Secret that did not opt in: %v; want an error containing %q", err, want)
	}
	if res.Confirmed || len(res.Steps) != 0 {
		t.Errorf("the agent ran: %+v", res)
	}
	if !bmcsim.ProcessAlive(pid) {
		t.Errorf("machine %d stopped although no fence was attempted", pid)
	}
	r.waitBeats(t, pid)
	r.expectNoSecret(t, r.password, resultText(t, res, err))
}
