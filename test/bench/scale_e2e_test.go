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
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestScaleSmall runs `fence-bench --mode=scale` small enough for this
// 2-core machine in minutes (30 nodes, 600 pods, 60 volumes, a node with
// 20 pods failing, a rack of 4; at issue 22's 100 nodes and 3,000 pods it
// took 18 minutes): it fails on the controller role's memory over the goal
// (--enforce-memory-goal), on any safety violation the mock's arrays
// counted (S1, S2) and on the storm guard admitting more nodes than it
// allows; every table must be printed and nothing left running.
func TestScaleSmall(t *testing.T) {
	r := startRun(t)
	begin := time.Now()
	// fence-bench --mode=scale --nodes=30 --pods=600 --volumes=60
	// --hot-pods=20 --rack=4 --rack-pods=2 --window=20s --settle=10s
	// --enforce-memory-goal, its other flags at their defaults.
	r.run(Config{Mode: "scale", Scale: ScaleOptions{Nodes: 30, Pods: 600, Volumes: 60, HotPods: 20, Rack: 4, RackPods: 2,
		InTree: true, Window: 20 * time.Second, Settle: 10 * time.Second, QPS: "default", EnforceMemory: true}})
	t.Logf("fence-bench --mode=scale: %v after %.0fs", r.err, time.Since(begin).Seconds())
	out := r.out.String()
	if r.err != nil {
		t.Errorf("%v; the end of the output:\n%s", r.err, tail(out, 60))
		r.checkNothingLeft(t)
		return
	}
	for _, want := range []string{
		`(?m)^controller \(csi-fence-attacher, fence\.csi-fence\.io\) +\d+ MiB +\d+ MiB +[\d.]+%  RSS < 300 MiB: ok`,
		`(?m)^node agent \(hot-0, 20 volumes\) +\d+ MiB`,
		`(?m)^goal: no periodic full relists: `,
		`(?m)^automatic +20/20 `,
		`(?m)^out-of-service +20/20 `,
		`(?m)^most nodes admitted at once \(storm guard Lease\) +\d+ of 3 allowed: ok`,
		`(?m)^safety, array of fence\.csi-fence\.io: S1 0, S2 0$`,
		`(?m)^safety, array of intree\.csi-fence\.io: S1 0, S2 0$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no line matching %s; the end of the output:\n%s", want, tail(out, 60))
		}
	}
	// The figures, for whoever runs `make test-e2e`.
	if i := strings.Index(out, "\nSteady state:"); i >= 0 {
		t.Logf("what it measured:%s", out[i:])
	}
	r.checkNothingLeft(t)
}
