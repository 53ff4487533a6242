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

package failover

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/legacyregistry"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// Once registered and built, the failover's counters show every backend and
// the controller's driver on /metrics before the first fence, so that
// alerts on them can be set up in advance.
func TestCountersAtZeroBeforeTheFirstFence(t *testing.T) {
	RegisterMetrics()
	newEnv(t, objects(v1.ConditionTrue, false), true) // builds a controller of driver
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				seen[f.GetName()+"{"+l.GetName()+"="+l.GetValue()+"}"] = true
			}
		}
	}
	want := []string{"csi_fence_failover_fence_errors_total{driver_name=" + driver + "}", "csi_fence_storm_guard_deferrals_total"}
	for _, b := range fencingv1alpha1.Backends {
		want = append(want, "csi_fence_fencing_backend_attempts_total{backend="+b+"}", "csi_fence_fencing_backend_failures_total{backend="+b+"}")
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("%s is not on /metrics", w)
		}
	}
}
