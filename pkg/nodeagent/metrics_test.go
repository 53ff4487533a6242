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

package nodeagent

import (
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
)

// A fresh node agent's /metrics shows its counters for its driver and
// every label value at zero before the first cleanup, so that alerts on
// them can be set up in advance.
func TestCountersAtZeroBeforeTheFirstCleanup(t *testing.T) {
	e := newEnv(t)
	opts := e.options()
	opts.DriverName = "fresh.csi.example.com" // no other test cleans for it
	if _, err := New(opts); err != nil {
		t.Fatal(err)
	}
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ metric, label string }
	seen := map[key]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["driver_name"] == opts.DriverName {
				seen[key{f.GetName(), labels["result"] + labels["operation"]}] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	for _, k := range []key{
		{"csi_fence_node_cleanups_total", resultSuccess}, {"csi_fence_node_cleanups_total", resultError},
		{"csi_fence_node_cleanup_record_errors_total", opRead}, {"csi_fence_node_cleanup_record_errors_total", opUpdate},
		{"csi_fence_node_cleanup_pending_volumes", ""}, {"csi_fence_node_cleanup_unattributed_leftovers", ""},
	} {
		v, ok := seen[k]
		switch {
		case !ok:
			t.Errorf("%s{%s} is not on /metrics before the first cleanup", k.metric, k.label)
		case v != 0:
			t.Errorf("%s{%s} = %v, want 0", k.metric, k.label, v)
		}
	}
}
