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
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/csi-fence/fence-attacher/test/bench"
)

// TestParseFlags: the flags as the README and docs use them make the
// Config the bench's e2e tests run (test/bench), with the defaults of each
// mode.
func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args string
		want bench.Config
	}{
		{name: "defaults", args: "", want: bench.Config{Mode: "failover", Trials: 5, Paths: bench.FailoverPaths, Volumes: 200}},
		{name: "a path of the failover", args: "--trials=1 --paths=automatic,power --keep-work-dir",
			want: bench.Config{Mode: "failover", Trials: 1, Paths: []string{"automatic", "power"}, Volumes: 200, Keep: true}},
		{name: "real nodes: the product's path and the in-tree one", args: "--nodes=real --trials=10",
			want: bench.Config{Mode: "failover", Trials: 10, Paths: bench.RealNodePaths, Volumes: 200, RealNodes: true}},
		{name: "real nodes, a path", args: "--nodes=real --paths=automatic",
			want: bench.Config{Mode: "failover", Trials: 5, Paths: []string{"automatic"}, Volumes: 200, RealNodes: true}},
		{name: "burst", args: "--mode=burst --volumes=50", want: bench.Config{Mode: "burst", Trials: 5, Paths: bench.FailoverPaths, Volumes: 50}},
		{name: "attach", args: "--mode=attach --counts=100,500 --qps=default,1000",
			want: bench.Config{Mode: "attach", Trials: 5, Paths: bench.FailoverPaths, Volumes: 200, Attach: bench.AttachOptions{
				Counts: []int{100, 500}, QPS: []string{"default", "1000"}, BurstVolumes: 200, BurstQPS: []string{"1000"},
				FenceDelay: 500 * time.Millisecond, Attaches: 200}}},
		{name: "scale: 3,000 volumes unless given", args: "--mode=scale",
			want: bench.Config{Mode: "scale", Trials: 5, Paths: bench.FailoverPaths, Volumes: 200, Scale: bench.ScaleOptions{
				Nodes: 1000, Pods: 30000, Volumes: 3000, HotPods: 110, Rack: 20, RackPods: 5, InTree: true,
				Window: 2 * time.Minute, Settle: 30 * time.Second, QPS: "default"}}},
		{name: "scale as its e2e test runs it", args: "--mode=scale --nodes=30 --pods=600 --volumes=60 --hot-pods=20 --rack=4 --rack-pods=2 --window=20s --settle=10s --enforce-memory-goal",
			want: bench.Config{Mode: "scale", Trials: 5, Paths: bench.FailoverPaths, Volumes: 60, Scale: bench.ScaleOptions{
				Nodes: 30, Pods: 600, Volumes: 60, HotPods: 20, Rack: 4, RackPods: 2, InTree: true,
				Window: 20 * time.Second, Settle: 10 * time.Second, QPS: "default", EnforceMemory: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(strings.Fields(tc.args), &bytes.Buffer{})
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("config\n%+v (%v)\nwant\n%+v", got, err, tc.want)
			}
		})
	}
}

// TestExitCodes: 0 for --help, 2 for a flag it does not know, 1 for a
// value or a run that cannot be right (checked before anything runs), each
// with its reason on stderr.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args   string
		code   int
		stderr string
	}{
		{args: "--help", code: 0, stderr: "-paths string"},
		{args: "--tirals=2", code: 2, stderr: "flag provided but not defined: -tirals"},
		{args: "--mode=attach --counts=100,x", code: 1, stderr: `fence-bench: "100,x": want positive integers`},
		{args: "--paths=automatic,powr", code: 1, stderr: `fence-bench: unknown path "powr" in --paths`},
		{args: "--mode=scale --nodes=3", code: 1, stderr: "fence-bench: --nodes=3: want at least"},
		{args: "--nodes=rael", code: 1, stderr: "fence-bench: --nodes=rael: want kwok, real"},
		{args: "--nodes=real --paths=power", code: 1, stderr: `fence-bench: path "power" in --paths is not measured on real nodes`},
		{args: "--nodes=real --mode=burst", code: 1, stderr: `fence-bench: --nodes=real measures --mode=failover`},
		{args: "--mode=scal", code: 1, stderr: `fence-bench: unknown --mode "scal"`},
	} {
		var stdout, stderr bytes.Buffer
		if code := runMain(strings.Fields(tc.args), &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%s: exit code %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.stderr)
		}
		if stdout.Len() > 0 {
			t.Errorf("%s: printed %q", tc.args, stdout.String())
		}
	}
}
