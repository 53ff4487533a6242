package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a parent process that starts a
// child through startProcess and then waits to be killed.
const helperEnv = "FENCE_FRAMEWORK_HELPER_DIR"

func TestMain(m *testing.M) {
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
