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

package sanitytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/mock-driver/server"
	"github.com/csi-fence/fence-attacher/pkg/fencesanity"
)

// modeEnv selects how TestSanity configures the mock; TestControls runs
// this test binary again with it set.
const modeEnv = "FENCE_MOCK_SANITY_MODE"

// modes of the mock under test. Every mode but "witness" plays a strict
// driver (RefuseUnsafe): the fence suite checks that the driver refuses to
// publish where a volume is quarantined, which the witness array lets
// happen (and records).
var modes = map[string]func(*driver.Config){
	"":                  func(*driver.Config) {},
	"witness":           func(c *driver.Config) { c.Array.RefuseUnsafe = false },
	"broken-fence":      func(c *driver.Config) { c.Array.BrokenFence = true },
	"broken-quarantine": func(c *driver.Config) { c.Array.BrokenQuarantine = true },
	"no-extension":      func(c *driver.Config) { c.NoFence, c.NoForce = true, true },
	"no-force":          func(c *driver.Config) { c.NoForce = true },
	"refuse-policy": func(c *driver.Config) {
		c.Array.FencePolicy, c.Array.RecentIO = array.FenceRefuse, 300*time.Millisecond
	},
	"unknown-policy": func(c *driver.Config) {
		c.Array.FencePolicy, c.Array.RecentIO = array.FenceUnknown, 300*time.Millisecond
	},
	"no-stage":    func(c *driver.Config) { c.NoStage = true },
	"no-publish":  func(c *driver.Config) { c.NoPublish = true },
	"setup-fails": func(*driver.Config) {},
}

// sanityModes change the sanity configuration of some modes.
var sanityModes = map[string]func(sc *sanity.TestConfig){
	// csi-test's own setup of every spec fails: it cannot create the target
	// directory under a regular file.
	"setup-fails": func(sc *sanity.TestConfig) {
		file := sc.TargetPath + "-file"
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			panic(err)
		}
		sc.TargetPath = filepath.Join(file, "mount")
	},
}

// mock is a controller and two node instances on one array.
type mock struct {
	dir              string
	arr              *array.Array
	ctl, node, node2 *server.Instance
}

func startMock(t *testing.T, cfg driver.Config) *mock {
	t.Helper()
	// Short paths: unix socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "fence-sanity")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m := &mock{dir: dir}
	start := func(role server.Role, name, node string) *server.Instance {
		c := cfg
		c.NodeID = node
		inst, err := server.Start(server.Options{Role: role, Endpoint: "unix://" + filepath.Join(dir, name+".sock"), StateDir: filepath.Join(dir, "array"), Driver: c})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(inst.Stop)
		return inst
	}
	m.ctl = start(server.RoleController, "controller", "")
	m.node = start(server.RoleNode, "node-1", "node-1")
	m.node2 = start(server.RoleNode, "node-2", "node-2")
	m.arr = m.ctl.Array()
	return m
}

// ioChecker writes through the array as the node, as the node instance's
// data path does.
func ioChecker(arr *array.Array) fencesanity.IOChecker {
	return fencesanity.IOCheckerFunc(func(_ context.Context, t fencesanity.IOTarget) (bool, error) {
		err := arr.Write(t.VolumeID, t.NodeID)
		var ae *array.Error
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &ae) && ae.Code == array.CodePermissionDenied:
			return false, nil
		}
		return false, err
	})
}

// TestSanity runs csi-test's sanity suite and the fence suite against the
// mock (one sanity run per test binary). In the default mode it then asserts
// that the array saw no safety violation, and that the fence specs did try
// the unsafe things the array must refuse.
func TestSanity(t *testing.T) {
	mode := os.Getenv(modeEnv)
	configure, ok := modes[mode]
	if !ok {
		t.Fatalf("unknown %s %q", modeEnv, mode)
	}
	// The window of csi-fence-mock's default, not 0: a spec's I/O check
	// makes the node "in use" for that long, which the suite must live with.
	cfg := driver.Config{Array: array.Options{RefuseUnsafe: true, RecentIO: array.DefaultRecentIO}}
	configure(&cfg)
	m := startMock(t, cfg)

	sc := sanity.NewTestConfig()
	sc.Address = m.node.Endpoint()
	sc.ControllerAddress = m.ctl.Endpoint()
	sc.TargetPath = filepath.Join(m.dir, "mount")
	sc.StagingPath = filepath.Join(m.dir, "staging")
	sc.IdempotentCount = 3
	if f := sanityModes[mode]; f != nil {
		f(&sc)
	}
	fencesanity.Test(t, sc, fencesanity.Config{IOChecker: ioChecker(m.arr), OtherNodeAddress: m.node2.Endpoint()})

	s, err := m.arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// TestControls reads this line.
	t.Logf("the array recorded S1=%d S2=%d", s.CountViolations()[array.S1], s.CountViolations()[array.S2])
	if mode != "" || t.Failed() {
		return
	}
	if n := s.TotalViolations(); n != 0 {
		t.Errorf("the suites caused %d safety violations on a correct driver: %+v", n, s.Violations)
	}
	for _, kind := range []string{"publish-quarantined", "write-fenced"} {
		if s.Refused[kind] == 0 {
			t.Errorf("no %s refusal recorded: the fence specs did not try it (refused: %v)", kind, s.Refused)
		}
	}
	for id, v := range s.Volumes {
		t.Errorf("volume %s left behind: %+v", id, v)
	}
}

// TestControls runs the fence specs against the mock in other modes, in
// subprocesses (one sanity run per process): broken modes must make the
// suite fail on the right specs, modes without the extension (or without
// force) must pass with the specs skipped and saying why.
func TestControls(t *testing.T) {
	if os.Getenv(modeEnv) != "" {
		t.Skip("running as a subprocess")
	}
	if testing.Short() {
		t.Skip("runs the fence suite in several subprocesses")
	}
	const fenceSpecs = `^CSI Driver Test Suite (Fence|Capabilities with the fence extension) `
	cases := []struct {
		mode       string
		focus      string // default: the fence specs; "-": everything
		pass       bool
		wantOutput []string
		notOutput  []string
	}{
		{mode: "broken-fence", pass: false, wantOutput: []string{
			"[FAIL] Fence [Controller Server] on a single-node volume published to this node [It] fence=true cuts the node's I/O before it returns",
			"[FAIL] Fence [Controller Server] with a second node [It] publishes a fenced single-node volume to the other node, and only that node writes",
			"[FAIL] Fence [Controller Server] with a second node [It] leaves the other nodes of a multi-node volume alone",
			"Ran 14 of", "3 Failed",
		}},
		{mode: "witness", pass: false, wantOutput: []string{
			"[FAIL] Fence [Controller Server] on a single-node volume published to this node [It] does not publish a fenced volume to the same node again",
			"[FAIL] Fence [Controller Server] on a single-node volume published to this node [It] publishes the volume to the node again only after forced cleanup",
			"2 Failed", "the array recorded S1=0 S2=2",
		}},
		{mode: "broken-quarantine", pass: false, wantOutput: []string{
			"[FAIL] Fence [Controller Server] on a single-node volume published to this node [It] does not publish a fenced volume to the same node again",
			"[FAIL] Fence [Controller Server] on a single-node volume published to this node [It] publishes the volume to the node again only after forced cleanup",
			"2 Failed",
		}},
		{mode: "no-extension", pass: true, wantOutput: []string{fencesanity.NoFenceMessage}},
		{mode: "no-force", pass: true, wantOutput: []string{fencesanity.NoForceMessage}},
		{mode: "refuse-policy", pass: true, wantOutput: []string{"the driver refuses the fence for now"}},
		{mode: "unknown-policy", pass: true, wantOutput: []string{"the driver refuses the fence for now (rpc error: code = Unavailable"}},
		{mode: "no-stage", pass: true},
		// csi-test's own node specs against a driver without a controller
		// publish step: its node plugin must release what it grants itself.
		{mode: "no-publish", focus: "-", pass: true, wantOutput: []string{fencesanity.NoFenceMessage}},
		// The fence specs' AfterEach runs after a BeforeEach of csi-test's
		// that failed: it must not make things worse.
		{mode: "setup-fails", focus: `^CSI Driver Test Suite Fence \[Controller Server\] capabilities`, pass: false,
			wantOutput: []string{"failed to create target directory"}, notOutput: []string{"PANICKED", "nil pointer"}},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			args := []string{"-test.run=^TestSanity$", "-test.count=1", "-test.v", "-ginkgo.v", "-ginkgo.no-color"}
			switch tc.focus {
			case "":
				args = append(args, "-ginkgo.focus="+fenceSpecs)
			case "-":
			default:
				args = append(args, "-ginkgo.focus="+tc.focus)
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), modeEnv+"="+tc.mode)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			if passed := err == nil; passed != tc.pass {
				t.Errorf("fence suite against the mock in mode %s: passed=%v, want %v", tc.mode, passed, tc.pass)
			}
			for _, want := range tc.wantOutput {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q", want)
				}
			}
			for _, not := range tc.notOutput {
				if strings.Contains(string(out), not) {
					t.Errorf("output has %q", not)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", tail(string(out), 200))
			}
		})
	}
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = append([]string{fmt.Sprintf("... %d lines", len(l)-lines)}, l[len(l)-lines:]...)
	}
	return strings.Join(l, "\n")
}
