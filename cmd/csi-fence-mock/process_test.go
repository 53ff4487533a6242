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

package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/csi-fence/fence-attacher/internal/imagebuild"
	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/server"
	"github.com/csi-fence/fence-attacher/mock-driver/workload"
	"github.com/csi-fence/fence-attacher/pkg/fence"
	"github.com/csi-fence/fence-attacher/pkg/fencesanity"
)

// The tests below run the real binaries as separate processes on one state
// directory, the way the e2e harness and the demo use them.

var build struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// binaries builds csi-fence-mock and csi-fence-sanity once per test run.
func binaries(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "fence-mock-bin"); build.err != nil {
			return
		}
		// Built as the release images are, as make test builds everything
		// but the race detector's binaries: one compiled tree, not two.
		root, err := filepath.Abs("../..")
		if err != nil {
			build.err = err
			return
		}
		build.err = imagebuild.GoBuild(context.Background(), root, build.dir, runtime.GOOS, runtime.GOARCH, "", "./cmd/csi-fence-mock", "./cmd/csi-fence-sanity")
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.dir
}

// proc is one mock instance running as a process.
type proc struct {
	t    *testing.T
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(filepath.Join(build.dir, "csi-fence-mock"), p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%v did not stop on %v", p.args, sig)
	}
}

// env is a controller and nodes n1, n2 on one state directory.
type env struct {
	t     *testing.T
	bin   string
	dir   string
	state string
	procs map[string]*proc
	http  map[string]string
	conns map[string]*grpc.ClientConn
}

func (e *env) sock(name string) string { return filepath.Join(e.dir, name+".sock") }

func (e *env) startInstance(name string, extra ...string) {
	e.t.Helper()
	port := freePort(e.t)
	args := append([]string{"--csi-address=unix://" + e.sock(name), "--state-dir=" + e.state, "--http-endpoint=" + port, "--recent-io=200ms"}, extra...)
	if name == "controller" {
		args = append(args, "--role=controller")
	} else {
		args = append(args, "--role=node", "--node-id="+name)
	}
	p := &proc{t: e.t, args: args, log: filepath.Join(e.dir, name+".log")}
	p.start()
	e.procs[name], e.http[name] = p, port
	e.waitHealthy(name)
}

func (e *env) waitHealthy(name string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rsp, err := http.Get("http://" + e.http[name] + "/healthz")
		if err == nil {
			rsp.Body.Close()
			if rsp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-e.procs[name].done:
			e.t.Fatalf("%s exited:\n%s", name, readFile(e.procs[name].log))
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s not healthy: %v\n%s", name, err, readFile(e.procs[name].log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) conn(name string) *grpc.ClientConn {
	e.t.Helper()
	if c := e.conns[name]; c != nil {
		return c
	}
	c, err := grpc.NewClient("unix://"+e.sock(name), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.conns[name] = c
	return c
}

func (e *env) cli(args ...string) (int, string) {
	e.t.Helper()
	cmd := exec.Command(filepath.Join(e.bin, "csi-fence-mock"), args...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func (e *env) report() server.Report {
	e.t.Helper()
	code, out := e.cli("status", "--state-dir="+e.state)
	var rep server.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		e.t.Fatalf("status: exit %d, %v: %s", code, err, out)
	}
	return rep
}

func newEnv(t *testing.T, extra ...string) *env {
	bin := binaries(t)
	dir, err := os.MkdirTemp("", "fence-mock-proc")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, bin: bin, dir: dir, state: filepath.Join(dir, "array"), procs: map[string]*proc{}, http: map[string]string{}, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(func() {
		for _, c := range e.conns {
			c.Close()
		}
		for _, p := range e.procs {
			p.signal(syscall.SIGTERM)
		}
		if t.Failed() {
			for name, p := range e.procs {
				t.Logf("log of %s:\n%s", name, readFile(p.log))
			}
		}
		os.RemoveAll(dir)
	})
	for _, name := range []string{"controller", "n1", "n2"} {
		e.startInstance(name, extra...)
	}
	return e
}

var rwo = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}

// sanity runs csi-fence-sanity against the env's processes with the mock's
// own io command as the I/O check.
func (e *env) sanity(extra ...string) (string, error) {
	args := append([]string{
		"--csi.endpoint=unix://" + e.sock("n1"), "--csi.controllerendpoint=unix://" + e.sock("controller"),
		"--csi.mountdir=" + filepath.Join(e.dir, "mnt"), "--csi.stagingdir=" + filepath.Join(e.dir, "stg"),
		"--fence.other-node-endpoint=unix://" + e.sock("n2"),
		"--fence.io-check-cmd=" + filepath.Join(e.bin, "csi-fence-mock") + " io --state-dir=" + e.state + " --write",
		"--ginkgo.no-color"}, extra...)
	out, err := exec.Command(filepath.Join(e.bin, "csi-fence-sanity"), args...).CombinedOutput()
	return string(out), err
}

// TestSanityAgainstProcesses: the mock's processes pass csi-fence-sanity,
// as a strict driver: the fence suite checks that the driver refuses unsafe
// publishes.
func TestSanityAgainstProcesses(t *testing.T) {
	e := newEnv(t, "--refuse-unsafe")
	out, err := e.sanity()
	if err != nil || !strings.Contains(out, "SUCCESS!") {
		t.Fatalf("csi-fence-sanity: %v\n%s", err, out)
	}
	if code, out := e.cli("status", "--state-dir="+e.state, "--fail-on-violation"); code != 0 {
		t.Fatalf("violations after the sanity run: %s", out)
	}
}

// TestSanityCatchesBrokenFence: csi-fence-sanity fails against the mock
// started with --broken-fence, on the specs that check I/O after a fence,
// and passes (fence specs skipped, saying why) against --disable-fence.
func TestSanityCatchesBrokenFence(t *testing.T) {
	broken := newEnv(t, "--refuse-unsafe", "--broken-fence")
	out, err := broken.sanity("--ginkgo.focus=Fence")
	if err == nil || !strings.Contains(out, "[FAIL] Fence [Controller Server] on a single-node volume published to this node [It] fence=true cuts the node's I/O before it returns") {
		t.Fatalf("csi-fence-sanity against --broken-fence: %v\n%s", err, out)
	}
	without := newEnv(t, "--refuse-unsafe", "--disable-fence", "--disable-force")
	out, err = without.sanity("--ginkgo.v")
	if err != nil || !strings.Contains(out, "SUCCESS!") || !strings.Contains(out, "UNPUBLISH_FENCE (ControllerServiceCapability type 1000): fence specs do not apply") {
		t.Fatalf("csi-fence-sanity against --disable-fence: %v\n%s", err, out)
	}
}

// TestSanityWithoutIOCheck: without --fence.io-check-cmd a driver whose
// fence does not cut I/O passes; the run must say, on stderr and in the
// JUnit report, that this was not checked.
func TestSanityWithoutIOCheck(t *testing.T) {
	e := newEnv(t, "--refuse-unsafe", "--broken-fence")
	junit := filepath.Join(e.dir, "junit.xml")
	args := []string{
		"--csi.endpoint=unix://" + e.sock("n1"), "--csi.controllerendpoint=unix://" + e.sock("controller"),
		"--csi.mountdir=" + filepath.Join(e.dir, "mnt"), "--csi.stagingdir=" + filepath.Join(e.dir, "stg"),
		"--fence.other-node-endpoint=unix://" + e.sock("n2"),
		"--ginkgo.no-color", "--ginkgo.focus=Fence", "--ginkgo.junit-report=" + junit}
	cmd := exec.Command(filepath.Join(e.bin, "csi-fence-sanity"), args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("csi-fence-sanity without an I/O check: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "WARNING: "+fencesanity.NoIOCheckMessage) {
		t.Errorf("stderr does not warn that I/O was not checked:\n%s", stderr.String())
	}
	var report struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Status  string `xml:"status,attr"`
			Skipped struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testsuite>testcase"`
	}
	if err := xml.Unmarshal([]byte(readFile(junit)), &report); err != nil {
		t.Fatal(err)
	}
	for _, c := range report.Cases {
		if c.Status == "skipped" && strings.Contains(c.Skipped.Message, fencesanity.NoIOCheckMessage) {
			return
		}
	}
	t.Errorf("the JUnit report has no skipped spec saying %q: %+v", fencesanity.NoIOCheckMessage, report.Cases)
}

// TestSanityUnreachableEndpoint: csi-fence-sanity against an endpoint
// nobody serves fails at once with one error, instead of csi-test's minute
// of waiting for every spec's connection.
func TestSanityUnreachableEndpoint(t *testing.T) {
	bin := binaries(t)
	dir := t.TempDir()
	// A socket that accepts connections and never answers, and one that
	// does not exist.
	l, err := net.Listen("unix", filepath.Join(dir, "mute.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nobody, mute := "unix://"+filepath.Join(dir, "nobody.sock"), "unix://"+filepath.Join(dir, "mute.sock")
	tests := []struct {
		name string
		args []string
		want string
	}{
		// With the default timeout.
		{name: "no socket", args: []string{"--csi.endpoint=" + nobody}, want: "cannot reach the node endpoint " + nobody},
		{name: "mute socket", args: []string{"--fence.connect-timeout=1s", "--csi.endpoint=" + mute}, want: "cannot reach the node endpoint " + mute + " within 1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"--csi.mountdir=" + filepath.Join(dir, "mnt"), "--csi.stagingdir=" + filepath.Join(dir, "stg")}, tc.args...)
			out, err := exec.CommandContext(ctx, filepath.Join(bin, "csi-fence-sanity"), args...).CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("csi-fence-sanity against an unreachable endpoint still running after 30s:\n%s", tail(string(out), 20))
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "Ran ") {
				t.Fatalf("csi-fence-sanity against an unreachable endpoint: %v, want exit 1 before any spec, saying %q:\n%s", err, tc.want, out)
			}
		})
	}
}

// TestFailoverAcrossProcesses plays a partitioned node: its workload keeps
// writing through the node instance while the volume is fenced and moved;
// the controller is killed and restarted in between; faults are injected by
// the CLI while everything runs. Then the same with the fence broken at run
// time, which the array must catch as S1. The array is strict: the unsafe
// publishes tried on the way are refused.
func TestFailoverAcrossProcesses(t *testing.T) {
	e := newEnv(t, "--refuse-unsafe")
	ctx := context.Background()
	ctl := func() csi.ControllerClient { return csi.NewControllerClient(e.conn("controller")) }
	publish := func(id, node string) error {
		_, err := ctl().ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: rwo})
		return err
	}
	fenceNode := func(id, node string) error {
		req := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node}
		fence.SetFence(req, true)
		_, err := ctl().ControllerUnpublishVolume(ctx, req)
		return err
	}
	writer := func(node, id, method string) workload.Stats {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+e.http[node]+"/writer?volume="+id+"&interval=20ms", nil)
		rsp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer rsp.Body.Close()
		var st workload.Stats
		if err := json.NewDecoder(rsp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	writerStats := func(node string) workload.Stats {
		t.Helper()
		rsp, err := http.Get("http://" + e.http[node] + "/writer")
		if err != nil {
			t.Fatal(err)
		}
		defer rsp.Body.Close()
		var l []workload.Stats
		if err := json.NewDecoder(rsp.Body).Decode(&l); err != nil || len(l) != 1 {
			t.Fatalf("writers of %s: %v %v", node, l, err)
		}
		return l[0]
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	vol, err := ctl().CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "data", VolumeCapabilities: []*csi.VolumeCapability{rwo}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	if err := publish(id, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := csi.NewNodeClient(e.conn("n1")).NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: filepath.Join(e.dir, "stage-n1"), VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	writer("n1", id, http.MethodPost)
	wait("the workload's first writes", func() bool { return writerStats("n1").Accepted >= 3 })
	if err := publish(id, "n2"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publish to a second node before the fence: %v", err)
	}

	// Faults from the CLI reach the running controller.
	if code, out := e.cli("fault", "--state-dir="+e.state, "ControllerUnpublishVolume:code=Unavailable,count=2"); code != 0 {
		t.Fatal(out)
	}
	for i := 0; i < 2; i++ {
		if err := fenceNode(id, "n1"); status.Code(err) != codes.Unavailable {
			t.Fatalf("fence #%d with an injected fault: %v", i+1, err)
		}
	}
	if err := fenceNode(id, "n1"); err != nil {
		t.Fatalf("fence after the fault's count: %v", err)
	}
	refused := writerStats("n1").Refused
	wait("the partitioned node's writes refused", func() bool { return writerStats("n1").Refused >= refused+3 })

	// The controller dies and comes back: the quarantine is on the array.
	e.procs["controller"].signal(syscall.SIGKILL)
	e.conns["controller"].Close()
	delete(e.conns, "controller")
	e.procs["controller"].start()
	e.waitHealthy("controller")
	if err := publish(id, "n1"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publish to the quarantined node after a controller restart: %v", err)
	}
	if err := publish(id, "n2"); err != nil {
		t.Fatalf("publish to the new node after the fence: %v", err)
	}
	if _, err := http.Post("http://"+e.http["n2"]+"/write?volume="+id, "", nil); err != nil {
		t.Fatal(err)
	}
	final := writer("n1", id, http.MethodDelete)
	rep := e.report()
	if rep.Violations[array.S1]+rep.Violations[array.S2] != 0 || rep.Volumes[id].Publications["n1"].Access != array.AccessFenced ||
		rep.Volumes[id].Publications["n2"].Access != array.AccessGranted || rep.Volumes[id].Writes["n2"] != 1 || rep.Volumes[id].Writes["n1"] != final.Accepted {
		t.Fatalf("after the failover: %+v\n%+v", rep.Violations, rep.Volumes[id])
	}

	// The same with the fence broken at run time: the array catches S1.
	if code, out := e.cli("configure", "--state-dir="+e.state, "--broken-fence=true"); code != 0 {
		t.Fatal(out)
	}
	vol2, err := ctl().CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "data-2", VolumeCapabilities: []*csi.VolumeCapability{rwo}})
	if err != nil {
		t.Fatal(err)
	}
	id2 := vol2.GetVolume().GetVolumeId()
	if err := publish(id2, "n1"); err != nil {
		t.Fatal(err)
	}
	writer("n1", id2, http.MethodPost)
	wait("writes to the second volume", func() bool { return writerStats("n1").Accepted >= 2 })
	if err := fenceNode(id2, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := publish(id2, "n2"); err != nil {
		t.Fatal(err)
	}
	accepted := writerStats("n1").Accepted
	wait("the 'fenced' node still writing", func() bool { return writerStats("n1").Accepted >= accepted+2 })
	writer("n1", id2, http.MethodDelete)
	code, out := e.cli("status", "--state-dir="+e.state, "--fail-on-violation")
	if code != exitViolation || !strings.Contains(out, "after the volume was published to node n2") {
		t.Fatalf("status after a broken fence: exit %d\n%s", code, out)
	}
	if code, out := e.cli("configure", "--state-dir="+e.state, "--reset"); code != 0 {
		t.Fatal(out)
	}
}

// TestWitnessAcrossProcesses: by default the array carries out the unsafe
// publishes and status fails on them; "configure --refuse-unsafe" makes the
// running instances refuse them, and status shows the refusals.
func TestWitnessAcrossProcesses(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ctl := csi.NewControllerClient(e.conn("controller"))
	publishTwice := func(name string) error {
		t.Helper()
		vol, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwo}})
		if err != nil {
			t.Fatal(err)
		}
		id := vol.GetVolume().GetVolumeId()
		if _, err := ctl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: rwo}); err != nil {
			t.Fatal(err)
		}
		_, err = ctl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n2", VolumeCapability: rwo})
		return err
	}
	if err := publishTwice("witnessed"); err != nil {
		t.Fatalf("a witness array refused the publish to a second node: %v", err)
	}
	code, out := e.cli("status", "--state-dir="+e.state, "--fail-on-violation")
	if code != exitViolation || !strings.Contains(out, "S1=1 S2=0") || !strings.Contains(out, "while still published to nodes [n1]") {
		t.Fatalf("status after an unsafe publish: exit %d\n%s", code, out)
	}
	if code, out := e.cli("configure", "--state-dir="+e.state, "--refuse-unsafe"); code != 0 {
		t.Fatal(out)
	}
	if err := publishTwice("refused"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a strict array's answer to a publish to a second node: %v", err)
	}
	rep := e.report()
	if rep.Violations[array.S1] != 1 || rep.RefusedUnsafe[array.RefusedPublishElsewhere] != 1 {
		t.Fatalf("after a refused unsafe publish: violations %v, refused unsafe %v", rep.Violations, rep.RefusedUnsafe)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

func readFile(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return string(b)
}
