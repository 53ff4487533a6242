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
	"os"
	"regexp"
	"testing"
	"time"
)

// realNodesEnv enables the real-node bench's smoke test (as root), as it
// enables the real-node e2e tests (test/e2e).
const realNodesEnv = "FENCE_E2E_REAL_NODES"

// TestBenchRealNodesSmoke runs `fence-bench --nodes=real --trials=1`: both
// paths measured on the same real nodes, both tables and each path's
// budget printed with the new node's kubelet and containerd steps,
// nothing left running.
func TestBenchRealNodesSmoke(t *testing.T) {
	if os.Getenv(realNodesEnv) == "" {
		t.Skipf("real nodes need root and a kernel of their own: set %s=1", realNodesEnv)
	}
	r := startRun(t)
	begin := time.Now()
	r.run(Config{Mode: "failover", Trials: 1, Paths: RealNodePaths, RealNodes: true})
	t.Logf("fence-bench --nodes=real --trials=1: %v after %.0fs", r.err, time.Since(begin).Seconds())
	out := r.out.String()
	if r.err != nil {
		t.Errorf("%v; the end of the output:\n%s", r.err, tail(out, 40))
	}
	for _, want := range []string{
		`(?m)^automatic +1 [^\n]*\n(?s:.*)^automatic +1 `, // both tables
		`(?m)^out-of-service +1 [^\n]*\n(?s:.*)^out-of-service +1 `,
		`(?m)^of which the cluster's own [^\n]*\n[^\n]*\n^automatic +1 `,
		`Where the time goes, automatic path \(1 trials; from the node down\)`,
		`Where the time goes, out-of-service path \(1 trials; from the node down\)`,
		`(?m)^  kubelet: volume published `,
		`(?m)^  pod sandbox ready `,
		`(?m)^  replacement writing `,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no %s in the output; its end:\n%s", want, tail(out, 45))
		}
	}
	r.checkNothingLeft(t)
}
