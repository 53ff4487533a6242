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

package podgc

import (
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
)

// Once registered, the pod GC's counters show every reason on /metrics
// before the first force-delete, so that alerts on them can be set up in
// advance.
func TestCountersForEveryReasonOnceRegistered(t *testing.T) {
	RegisterMetrics()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					if seen[f.GetName()] == nil {
						seen[f.GetName()] = map[string]bool{}
					}
					seen[f.GetName()][l.GetValue()] = true
				}
			}
		}
	}
	for _, name := range []string{"csi_fence_force_delete_pods_total", "csi_fence_force_delete_pod_errors_total", "csi_fence_force_delete_pods_refused_total"} {
		for _, reason := range []string{ReasonSafeDetach, ReasonOutOfService, ReasonFencingComplete} {
			if !seen[name][reason] {
				t.Errorf("%s{reason=%q} is not on /metrics", name, reason)
			}
		}
	}
}
