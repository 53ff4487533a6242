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

package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a parent process that starts a
// child through startProcess and then waits to be killed.
const helperEnv = "FENCE_FRAMEWORK_HELPER_DIR"

// serverEnv makes the test binary act as a server of /metrics on the
// address of its --http-endpoint flag; its first start fails as if another
// process had taken the port (the value is a marker file).
const serverEnv = "FENCE_FRAMEWORK_SERVER_MARKER"

func TestMain(m *testing.M) {
	if marker := os.Getenv(serverEnv); marker != "" {
		var addr string
		for _, a := range os.Args {
			if v, ok := strings.CutPrefix(a, "--http-endpoint="); ok {
				addr = v
			}
		}
		if _, err := os.Stat(marker); err != nil {
			_ = os.WriteFile(marker, nil, 0o644)
			fmt.Fprintf(os.Stderr, "listen tcp %s: bind: address already in use\n", addr)
			os.Exit(1)
		}
		http.HandleFunc("/metrics", func(http.ResponseWriter, *http.Request) {})
		fmt.Println(http.ListenAndServe(addr, nil))
		os.Exit(1)
	}
	if dir := os.Getenv(helperEnv); dir != "" {
		p, err := startProcess(dir, "child", "sleep", "600")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(p.Pid())
		select {} // until killed
	}
	os.Exit(m.Run())
}

// A child must not outlive the process that started it, however that
// process ends: here it is SIGKILLed, as a test binary past its -timeout
// effectively is (it panics and exits without running any cleanup).
func TestChildDiesWithParent(t *testing.T) {
	dir := t.TempDir()
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	var line string
	if _, err := fmt.Fscanln(out, &line); err != nil {
		t.Fatalf("reading the child's pid: %v", err)
	}
	child, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	if err := syscall.Kill(child, 0); err != nil {
		t.Fatalf("child %d is not running: %v", child, err)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	if err := WaitFor(context.Background(), 10*time.Second, "child to die with its parent", func(context.Context) (bool, error) {
		return !running(child), nil
	}); err != nil {
		_ = syscall.Kill(child, syscall.SIGKILL)
		t.Fatal(err)
	}
}

// running reports whether pid is a live process (not a zombie: an orphan
// reaped late by init counts as gone).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

func TestStopEndsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	// The shell forks a grandchild: Stop must reach it through the group.
	p, err := startProcess(dir, "group", "sh", "-c", "sleep 600 & echo $! ; wait")
	if err != nil {
		t.Fatal(err)
	}
	var grandchild int
	if err := WaitFor(context.Background(), 10*time.Second, "grandchild pid in the log", func(context.Context) (bool, error) {
		lines := strings.Split(strings.TrimSpace(p.Tail(1)), "\n")
		n, err := strconv.Atoi(lines[len(lines)-1])
		grandchild = n
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	p.Stop(5 * time.Second)
	if !p.Exited() || p.Unexpected() {
		t.Fatalf("after Stop: exited=%v unexpected=%v", p.Exited(), p.Unexpected())
	}
	if err := WaitFor(context.Background(), 10*time.Second, "grandchild gone", func(context.Context) (bool, error) {
		return !running(grandchild), nil
	}); err != nil {
		_ = syscall.Kill(grandchild, syscall.SIGKILL)
		t.Fatal(err)
	}
}

func TestWaitGivesUpOnExitedProcess(t *testing.T) {
	for _, tc := range []struct {
		name         string
		script       string
		portConflict bool
	}{
		{"bind race", "echo 'listen tcp 127.0.0.1:4242: bind: address already in use' >&2; exit 1", true},
		{"other failure", "echo 'error: unknown flag --bogus' >&2; exit 2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := startProcess(t.TempDir(), "failing", "sh", "-c", tc.script)
			if err != nil {
				t.Fatal(err)
			}
			// Nothing listens there: without the process check this would
			// wait the full minute.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			url := "http://" + l.Addr().String() + "/healthz"
			l.Close()
			begin := time.Now()
			err = waitHTTPOf(context.Background(), p, url, nil, time.Minute)
			var exited *ExitedError
			if !errors.As(err, &exited) {
				t.Fatalf("want an ExitedError, got %v", err)
			}
			if exited.PortConflict != tc.portConflict {
				t.Errorf("PortConflict = %v, want %v (log: %s)", exited.PortConflict, tc.portConflict, exited.Tail)
			}
			if d := time.Since(begin); d > 10*time.Second {
				t.Errorf("took %v to notice the process was gone", d)
			}
			if !p.Unexpected() {
				t.Errorf("a process that ended by itself must count as unexpected")
			}
		})
	}
}

// A product process that lost the race for its port is started again on
// another one; a process failing for any other reason is not.
func TestStartServerRetriesLostPort(t *testing.T) {
	c := &Cluster{WorkDir: t.TempDir(), log: t}
	if err := os.MkdirAll(filepath.Join(c.WorkDir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	marker := filepath.Join(t.TempDir(), "lost-once")
	t.Setenv(serverEnv, marker)
	p, addr, err := c.startServer(context.Background(), "server", os.Args[0], "/metrics", 20*time.Second,
		func(addr string) []string { return []string{"-test.run=^$", "--http-endpoint=" + addr} })
	if err != nil {
		t.Fatal(err)
	}
	if p.Exited() || addr == "" {
		t.Fatalf("server not running at %q", addr)
	}
	if log, _ := os.ReadFile(p.LogPath); strings.Count(string(log), "### ") != 2 {
		t.Errorf("want two starts in the log, got:\n%s", log)
	}

	_, _, err = c.startServer(context.Background(), "broken", "sh", "/metrics", 20*time.Second,
		func(string) []string {
			return []string{"-c", "echo 'flag provided but not defined: -bogus' >&2; exit 2"}
		})
	var exited *ExitedError
	if !errors.As(err, &exited) || exited.PortConflict {
		t.Fatalf("want a plain ExitedError, got %v", err)
	}
}

// TestStopEndsClientsBeforeServers: what runs against the cluster in this
// process (atStop) is stopped before any process, the last added first, so
// that no client outlives the control plane it talks to.
func TestStopEndsClientsBeforeServers(t *testing.T) {
	dir := t.TempDir()
	c := &Cluster{WorkDir: dir}
	for _, name := range []string{"etcd", "kube-apiserver", "csi-fence-attacher"} {
		if _, err := c.run(dir, name, "sleep", "600"); err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	procs := c.processes
	stopped := func(name string) func() {
		return func() {
			for _, p := range procs {
				if p.Exited() {
					t.Errorf("%s stopped after %s had ended", name, p.Name)
				}
			}
			order = append(order, name)
		}
	}
	c.atStop(stopped("product"))
	c.atStop(stopped("prestop"))
	c.Stop()
	if want := []string{"prestop", "product"}; !slices.Equal(order, want) {
		t.Errorf("stopped %v, want %v", order, want)
	}
	for _, p := range procs {
		if !p.Exited() {
			t.Errorf("%s still running after Stop", p.Name)
		}
	}
	c.Stop() // nothing left to stop: the stops ran once
	if len(order) != 2 {
		t.Errorf("stops ran again: %v", order)
	}
}

// A control-plane process that exits on its own is started again with the
// same command line, as its kubelet would; one stopped on purpose, or not
// of the control plane, is left as it is.
func TestRestartCrashed(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "second-run")
	// The first run exits at once; the second one (marker present) stays.
	script := "if [ -e " + marker + " ]; then exec sleep 600; fi; touch " + marker + "; exit 3"
	c := &Cluster{}
	sched, err := c.run(dir, "kube-scheduler", "/bin/sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.run(dir, "csi-fence-attacher", "/bin/sh", "-c", "exit 4")
	if err != nil {
		t.Fatal(err)
	}
	<-sched.Done()
	<-other.Done()
	restarted, err := c.RestartCrashed()
	if err != nil || len(restarted) != 1 || !strings.HasPrefix(restarted[0], "kube-scheduler exited on its own") {
		t.Fatalf("restarted %q, %v; want the scheduler only", restarted, err)
	}
	running := c.Running()
	if len(running) != 2 || slices.Contains(running, sched) || !slices.Contains(running, other) {
		t.Fatalf("processes after the restart: %v", running)
	}
	for _, p := range running {
		if p.Name == "kube-scheduler" {
			if p.Exited() {
				t.Fatalf("the restarted scheduler exited: %v", p.Err())
			}
			p.Stop(5 * time.Second)
		}
	}
	if again, err := c.RestartCrashed(); err != nil || len(again) != 0 {
		t.Fatalf("a scheduler stopped on purpose was restarted: %q, %v", again, err)
	}
}
