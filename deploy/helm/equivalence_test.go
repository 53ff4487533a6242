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

package helm

import (
	"strings"
	"testing"
)

// The chart, with its default names in namespace default, renders exactly
// the objects of the kustomize build with the same features: the CRDs, the
// RBAC of each feature enabled and of nothing else, the admission policy,
// the node agents' Service, the preStop webhook. Only the chart's own
// labels differ. So a rule, a verb or a CRD field changed in one and not
// the other fails here, and the chart grants what pkg/sidecar/access.go
// checks, as deploy/kubernetes's tests hold the kustomize files to.
func TestChartMatchesKustomize(t *testing.T) {
	ch := loadChart(t, chartDir)
	tests := []struct {
		name       string
		features   []any // values
		components []string
		resources  []string
	}{
		{"fenced detach only", nil, nil, nil},
		{"failover", []any{"features.failover", true}, []string{"failover"}, nil},
		{"failover and power fencing", []any{"features.failover", true, "features.powerFencing", true}, []string{"failover", "power-fencing"}, nil},
		{"failover and machine fencing", []any{"features.failover", true, "features.machineFencing", true, "controller.fencingBackends", []any{"storage", "machine"}},
			[]string{"failover", "machine-fencing"}, nil},
		{"prestop webhook", []any{"features.prestopWebhook", true}, nil, []string{"prestop"}},
		{"everything", []any{"features.failover", true, "features.powerFencing", true, "features.prestopWebhook", true},
			[]string{"failover", "power-fencing"}, []string{"prestop"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mustRender(t, ch, "default", canary(tc.features...))
			want := kustomizeBuild(t, tc.components, tc.resources)
			if d := diffObjects(got, want); len(d) > 0 {
				t.Errorf("the chart and the kustomize build differ:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

// The comparison itself can fail: a feature's RBAC missing from the chart,
// a rule it grants that kustomize does not, a field of a CRD.
func TestChartComparisonFindsDifferences(t *testing.T) {
	ch := loadChart(t, chartDir)
	got := mustRender(t, ch, "default", canary("features.failover", true))
	want := kustomizeBuild(t, []string{"failover", "power-fencing"}, nil)
	d := strings.Join(diffObjects(got, want), "\n")
	for _, w := range []string{"only in the kustomize build: ClusterRole /csi-fence-attacher-power-runner"} {
		if !strings.Contains(d, w) {
			t.Errorf("diff lacks %q:\n%s", w, d)
		}
	}
	// One verb more in a rendered rule.
	for _, o := range got {
		if o.GetKind() == "ClusterRole" && o.GetName() == "csi-fence-attacher-node" {
			rules := o.Object["rules"].([]any)
			r := rules[0].(map[string]any)
			r["verbs"] = append(r["verbs"].([]any), "delete")
		}
	}
	want = kustomizeBuild(t, []string{"failover"}, nil)
	d = strings.Join(diffObjects(got, want), "\n")
	if !strings.Contains(d, "ClusterRole /csi-fence-attacher-node differs") || !strings.Contains(d, `"delete"`) {
		t.Errorf("an added verb is not reported:\n%s", d)
	}
}
