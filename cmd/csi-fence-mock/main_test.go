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
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/server"
)

// runCmd runs a subcommand in process.
func runCmd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsageErrors(t *testing.T) {
	d := "--state-dir=" + t.TempDir()
	typo := "--state-dir=" + filepath.Join(t.TempDir(), "typo")
	tests := []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"bogus"}, exitUsage, "unknown command"},
		{[]string{"serve", d, "--role=both"}, exitUsage, "--role must be controller or node"},
		{[]string{"--role=node", d}, exitUsage, "--node-id is required"},
		{[]string{"serve", d, "--fence-policy=maybe"}, exitUsage, "unknown fence policy"},
		{[]string{"serve", d, "--plain-unpublish=never"}, exitUsage, "unknown plain unpublish mode"},
		{[]string{"serve", d, "--detach=sometimes"}, exitUsage, "unknown detach mode"},
		{[]string{"serve", d, "--detach=revokes", "--plain-unpublish=linger"}, exitUsage, "drop --plain-unpublish"},
		{[]string{"serve", d, "--fault=Probe:colour=red"}, exitUsage, "unknown key"},
		{[]string{"serve", d, "extra"}, exitUsage, "no arguments"},
		{[]string{"serve", d, "--data-path=loop"}, exitUsage, "--data-path must be none, bind or fuse"},
		{[]string{"serve", d, "--bind-mounts", "--data-path=fuse"}, exitUsage, "contradict"},
		{[]string{"serve", "--no-such-flag"}, exitUsage, "flag provided but not defined"},
		{[]string{"fault", d}, exitUsage, "give fault specs"},
		{[]string{"fault", d, "Probe:code=Nope"}, exitUsage, "unknown gRPC code"},
		{[]string{"fault", d, "ControlerUnpublishVolume:code=Internal"}, exitUsage, "unknown CSI method \"ControlerUnpublishVolume\"; want one of: "},
		{[]string{"serve", d, "--fault=NodeUnstage:code=Internal"}, exitUsage, "unknown CSI method"},
		// A state directory nobody uses is a mistake, not an empty array.
		{[]string{"status", typo, "--fail-on-violation"}, 1, "does not exist"},
		{[]string{"fault", typo, "--list"}, 1, "does not exist"},
		{[]string{"configure", typo, "--refuse-unsafe"}, 1, "does not exist"},
		{[]string{"io", typo, "--write", "n", "v"}, 1, "does not exist"},
		{[]string{"configure", d, "--plain-unpublish=sometimes"}, exitUsage, "unknown plain unpublish mode"},
		{[]string{"configure", d, "extra"}, exitUsage, "no arguments"},
		{[]string{"io", d}, exitUsage, "give --node-id and --volume"},
		{[]string{"io", d, "--write", "--read", "n", "v"}, exitUsage, "not both"},
		{[]string{"io", d, "--count=0", "n", "v"}, exitUsage, "--count must be positive"},
		{[]string{"io", d, "n", "v", "/path", "extra"}, exitUsage, "at most"},
		{[]string{"version"}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCmd(tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
			if _, err := os.Stat(strings.TrimPrefix(typo, "--state-dir=")); err == nil {
				t.Fatal("the misspelt state directory was created")
			}
		})
	}
}

func TestFaultCommand(t *testing.T) {
	d := "--state-dir=" + t.TempDir()
	code, out, stderr := runCmd("fault", d, "ControllerUnpublishVolume:code=Unavailable,count=3,latency=2s,prob=0.5", "NodeUnstageVolume:code=Internal,node=n1", "--list")
	want := "ControllerUnpublishVolume:code=Unavailable,latency=2s,prob=0.5,count=3\nNodeUnstageVolume:code=Internal,node=n1\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d, out %q (stderr %q), want %q", code, out, stderr, want)
	}
	// A bad spec among good ones changes nothing.
	if code, _, _ := runCmd("fault", d, "Probe:code=Internal", "Probe:code=Nope"); code != exitUsage {
		t.Fatalf("exit %d", code)
	}
	code, out, _ = runCmd("fault", d, "ControllerUnpublishVolume:off", "--list")
	if code != 0 || out != "NodeUnstageVolume:code=Internal,node=n1\n" {
		t.Fatalf("after removing one: %d %q", code, out)
	}
	code, out, _ = runCmd("fault", d, "--clear", "--list")
	if code != 0 || out != "" {
		t.Fatalf("after --clear: %d %q", code, out)
	}
}

func TestConfigureCommand(t *testing.T) {
	dir := t.TempDir()
	d := "--state-dir=" + dir
	overrides := func() array.Overrides {
		t.Helper()
		arr, _ := array.Open(dir)
		s, err := arr.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return s.Overrides
	}
	if code, _, stderr := runCmd("configure", d, "--broken-fence", "--fence-policy=refuse"); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := runCmd("configure", d, "--recent-io=5s"); code != 0 {
		t.Fatal(stderr)
	}
	o := overrides()
	if o.BrokenFence == nil || !*o.BrokenFence || o.FencePolicy != array.FenceRefuse || o.RecentIO == nil || o.RecentIO.Seconds() != 5 || o.BrokenQuarantine != nil {
		t.Fatalf("overrides: %+v", o)
	}
	if code, _, stderr := runCmd("configure", d, "--reset", "--broken-quarantine=false", "--refuse-unsafe"); code != 0 {
		t.Fatal(stderr)
	}
	if o := overrides(); o.BrokenFence != nil || o.FencePolicy != "" || o.BrokenQuarantine == nil || *o.BrokenQuarantine || o.RefuseUnsafe == nil || !*o.RefuseUnsafe {
		t.Fatalf("overrides after --reset: %+v", o)
	}
}

func TestIOAndStatusCommands(t *testing.T) {
	dir := t.TempDir()
	d := "--state-dir=" + dir
	arr, err := array.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := arr.AddVolume("v", 1); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		before func() error
		args   []string
		code   int
		out    string // prefix of stdout
	}{
		{name: "write before publish", args: []string{"io", d, "--write", "n1", "v"}, code: exitRefused, out: "refused: write refused: node n1 has no access"},
		{name: "write", before: func() error { return arr.Publish("v", "n1", true, false, array.Options{}) },
			args: []string{"io", d, "--write", "n1", "v", "/target/path"}, code: 0, out: "accepted 1\n"},
		{name: "flags after arguments", args: []string{"io", "n1", "v", d, "--write", "--count=2"}, code: 0, out: "accepted 2\naccepted 3\nsummary: accepted=2 refused=0\n"},
		{name: "read by flags", args: []string{"io", d, "--node-id=n1", "--volume=v"}, code: 0, out: "accepted 3\n"},
		{name: "a partitioned writer keeps going", before: func() error { return arr.Unpublish("v", "n1", true, array.Options{}) },
			args: []string{"io", d, "--write", "--interval=1ms", "--count=3", "--quiet", "n1", "v"}, code: exitRefused, out: "summary: accepted=0 refused=3\n"},
		{name: "until the duration is over", args: []string{"io", d, "--write", "--interval=1ms", "--count=0", "--duration=30ms", "--quiet", "n1", "v"}, code: exitRefused, out: "summary: accepted=0 refused="},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				if err := tc.before(); err != nil {
					t.Fatal(err)
				}
			}
			code, out, stderr := runCmd(tc.args...)
			if code != tc.code || !strings.HasPrefix(out, tc.out) {
				t.Fatalf("exit %d, out %q, stderr %q; want %d and %q", code, out, stderr, tc.code, tc.out)
			}
		})
	}

	status := func() (int, server.Report, string) {
		t.Helper()
		code, out, stderr := runCmd("status", d, "--fail-on-violation")
		var rep server.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("status output %q: %v", out, err)
		}
		return code, rep, stderr
	}
	code, rep, _ := status()
	if code != 0 || rep.Violations[array.S1] != 0 || rep.Volumes["v"].Publications["n1"].Access != array.AccessFenced || rep.Refused["write-fenced"] < 3 || rep.Volumes["v"].Writes["n1"] != 3 {
		t.Fatalf("status: exit %d, %+v", code, rep)
	}
	// A strict array refuses the publish to the quarantined node: no
	// violation, and status says what it refused.
	if err := arr.Publish("v", "n1", true, false, array.Options{RefuseUnsafe: true}); err == nil {
		t.Fatal("a strict array published to a quarantined node")
	}
	code, rep, stderr := status()
	if code != 0 || rep.RefusedUnsafe[array.RefusedPublishQuarantined] != 1 || !strings.Contains(stderr, "publish-quarantined=1") {
		t.Fatalf("status after a refused unsafe publish: exit %d, %v, stderr %q", code, rep.RefusedUnsafe, stderr)
	}
	// A witness array carries it out: a violation.
	if err := arr.Publish("v", "n1", true, false, array.Options{}); err != nil {
		t.Fatal(err)
	}
	if code, rep, stderr := status(); code != exitViolation || rep.Violations[array.S2] != 1 || len(rep.ViolationRecords) != 1 || !strings.Contains(stderr, "S1=0 S2=1") {
		t.Fatalf("status after an S2 violation: exit %d, %+v, stderr %q", code, rep.Violations, stderr)
	}
}
