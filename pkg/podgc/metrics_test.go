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
	for _, name := range []string{"force_delete_pods_total", "force_delete_pod_errors_total", "force_delete_pods_refused_total"} {
		for _, reason := range []string{ReasonSafeDetach, ReasonOutOfService, ReasonFencingComplete} {
			if !seen[name][reason] {
				t.Errorf("%s{reason=%q} is not on /metrics", name, reason)
			}
		}
	}
}
