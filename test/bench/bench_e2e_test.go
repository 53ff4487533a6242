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

package bench

import (
	"bytes"
	"context"
	"flag"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// The bench at its smallest, as a new user runs it (`go run
// ./cmd/fence-bench --trials=1`: Run), in this process so that its
// goroutines can be looked at too: it must leave no process and no client of a
// control plane it tore down running, and print nothing about a control
// plane once it is gone.

// outputBuffer collects what the bench prints and what client-go logs
// (klog), in the order written, and wakes waiters on every write.
type outputBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
}

func newOutputBuffer() *outputBuffer { return &outputBuffer{written: make(chan struct{}, 1)} }

func (b *outputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.written <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

func (b *outputBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitCount waits until re matches n times in the output.
func (b *outputBuffer) waitCount(ctx context.Context, re *regexp.Regexp, n int) bool {
	for {
		if len(re.FindAllStringIndex(b.String(), -1)) >= n {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-b.written:
		}
	}
}

// captureKlog sends klog's output (client-go's logging in this process) to
// w until the test ends.
func captureKlog(t *testing.T, w *outputBuffer) {
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	klog.SetOutput(w)
	t.Cleanup(func() {
		klog.Flush()
		klog.SetOutput(os.Stderr)
		_ = fs.Set("logtostderr", "true")
	})
}

// shortCertReload makes client-go reload a client certificate file every
// second instead of every 5 minutes: a client whose control plane is gone
// then says so within the test, as it did minutes later in the run.
func shortCertReload(t *testing.T) {
	old := transport.CertCallbackRefreshDuration
	transport.CertCallbackRefreshDuration = time.Second
	t.Cleanup(func() { transport.CertCallbackRefreshDuration = old })
}

// benchRun is one run of the bench in this process.
type benchRun struct {
	tag framework.RunTag
	out *outputBuffer
	err error
	// returned is the length of the output when Run returned.
	returned int
}

func startRun(t *testing.T) *benchRun {
	tag, err := framework.TagRun()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Unsetenv(string(tag)) })
	shortCertReload(t)
	r := &benchRun{tag: tag, out: newOutputBuffer()}
	captureKlog(t, r.out)
	return r
}

func (r *benchRun) run(cfg Config) {
	r.err = Run(cfg, r.out)
	r.returned = len(r.out.String())
}

var (
	workDirLine = regexp.MustCompile(`control plane work dir (\S+)`)
	apiLine     = regexp.MustCompile(`kube-apiserver ready at (https://\S+)`)
	klogWarning = regexp.MustCompile(`^[EW]\d{4} \d\d:\d\d:\d\d`)
	certWords   = regexp.MustCompile(`(?i)cert|x509|tls`)
)

// afterTeardown returns the lines printed about a control plane after it
// was torn down: one that names its work dir or its apiserver once the next
// control plane started (the bench starts one after the other) or Run
// returned, or any client-go warning or error about a certificate after the
// first teardown.
func (r *benchRun) afterTeardown() []string {
	out := r.out.String()
	var gone []string // work dirs and apiserver URLs of the control planes torn down
	var current []string
	var noise []string
	offset := 0
	for _, line := range strings.SplitAfter(out, "\n") {
		if offset >= r.returned && current != nil {
			gone, current = append(gone, current...), nil
		}
		offset += len(line)
		if m := workDirLine.FindStringSubmatch(line); m != nil {
			gone, current = append(gone, current...), []string{m[1]}
			continue
		}
		if m := apiLine.FindStringSubmatch(line); m != nil {
			current = append(current, m[1])
			continue
		}
		for _, g := range gone {
			if strings.Contains(line, g) {
				noise = append(noise, line)
				break
			}
		}
		if len(gone) > 0 && klogWarning.MatchString(line) && certWords.MatchString(line) && !slices.Contains(noise, line) {
			noise = append(noise, line)
		}
	}
	return noise
}

// leftoverGoroutines waits up to timeout for the goroutines of the
// control planes' clients to end and returns the stacks of those left: a
// simulated kubelet, an informer's reflector, client-go's certificate
// reloader.
func leftoverGoroutines(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	markers := []string{"test/kubeletsim.(*Kubelet)", "tools/cache.(*Reflector)", "transport.(*dynamicClientCert)"}
	for {
		buf := make([]byte, 16<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, m := range markers {
				if strings.Contains(g, m) {
					left = append(left, g)
					break
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		runtime.GC() // a transport nothing refers to is stopped when collected
		<-time.After(100 * time.Millisecond)
	}
}

// checkNothingLeft fails the test for any process of the run still
// running, any client goroutine left, and any output about a control plane
// after its teardown.
func (r *benchRun) checkNothingLeft(t *testing.T) {
	t.Helper()
	if err := r.tag.WaitNoProcesses(context.Background(), 10*time.Second); err != nil {
		t.Errorf("after the bench: %v", err)
		// Leave nothing for the next test either.
		if procs, err := r.tag.Processes(); err == nil {
			for _, p := range procs {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
	}
	if left := leftoverGoroutines(5 * time.Second); len(left) > 0 {
		t.Errorf("%d goroutines of a torn-down control plane's clients still running; the first:\n%s", len(left), left[0])
	}
	klog.Flush()
	if noise := r.afterTeardown(); len(noise) > 0 {
		t.Errorf("%d lines about control planes after their teardown; the first ones:\n%s", len(noise), strings.Join(noise[:min(len(noise), 5)], ""))
	}
}

// TestBenchLeavesNothingRunning runs `fence-bench --trials=1`: every path
// measured and printed, nothing left running, nothing said about a control
// plane once it is gone.
func TestBenchLeavesNothingRunning(t *testing.T) {
	r := startRun(t)
	begin := time.Now()
	r.run(Config{Mode: "failover", Trials: 1, Paths: FailoverPaths})
	t.Logf("fence-bench --trials=1: %v after %.0fs", r.err, time.Since(begin).Seconds())
	out := r.out.String()
	if r.err != nil {
		t.Errorf("%v; the end of the output:\n%s", r.err, tail(out, 40))
	}
	for _, path := range []string{"automatic", "out-of-service", "power"} {
		if !regexp.MustCompile(`(?m)^` + path + ` +1 `).MatchString(out) {
			t.Errorf("no row for %s in the table; the end of the output:\n%s", path, tail(out, 20))
		}
	}
	r.checkNothingLeft(t)
}

// TestBenchInterruptedPrintsWhatItMeasured interrupts the bench (SIGINT)
// while the power path runs its BMCs: it must print the automatic path's
// row, exit non-zero, and stop everything it started.
func TestBenchInterruptedPrintsWhatItMeasured(t *testing.T) {
	r := startRun(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(Config{Mode: "failover", Trials: 1, Paths: []string{"automatic", "power"}})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if !r.out.waitCount(ctx, regexp.MustCompile(`automatic trial 0: `), 1) {
		t.Fatalf("the automatic trial did not end; the end of the output:\n%s", tail(r.out.String(), 40))
	}
	// Once the power path's BMCs run, what the interrupt must stop is there.
	if err := framework.WaitFor(ctx, 3*time.Minute, "an ipmi_sim of the run", func(context.Context) (bool, error) {
		procs, err := r.tag.Processes()
		for _, p := range procs {
			if strings.Contains(p.Command, "ipmi_sim") {
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		t.Fatalf("%v; the end of the output:\n%s", err, tail(r.out.String(), 40))
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("the bench did not end after SIGINT; the end of the output:\n%s", tail(r.out.String(), 40))
	}
	out := r.out.String()
	if r.err == nil {
		t.Errorf("no error after an interrupt")
	}
	if !regexp.MustCompile(`(?m)^automatic +1 `).MatchString(out) {
		t.Errorf("no row for the automatic path, measured before the interrupt; the end of the output:\n%s", tail(out, 20))
	}
	r.checkNothingLeft(t)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
