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

package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection" // as cmd/csi-fence-attacher
	_ "k8s.io/component-base/metrics/prometheus/workqueue"               // as cmd/csi-fence-attacher
	"sigs.k8s.io/yaml"

	"github.com/csi-fence/fence-attacher/pkg/attacher"
	"github.com/csi-fence/fence-attacher/pkg/failover"
	"github.com/csi-fence/fence-attacher/pkg/leadership"
	"github.com/csi-fence/fence-attacher/pkg/nodeagent"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

const monitoringDir = "monitoring"

// productRegisterers are the registries the binary serves on /metrics: the
// legacy registry with every role's metrics (registered here as the binary
// does, and the workqueue_* and leader_election_* metrics, which
// component-base registers once the first queue and leader elector are
// built) and csi-lib-utils' own (csi_sidecar_operations_seconds).
func productRegisterers(t *testing.T) []prometheus.Registerer {
	t.Helper()
	attacher.RegisterMetrics()
	failover.RegisterMetrics()
	podgc.RegisterMetrics()
	nodeagent.RegisterMetrics()
	leadership.Register()
	workqueue.NewTypedWithConfig[string](workqueue.TypedQueueConfig[string]{Name: "csi-attacher-va"}).ShutDown()
	_, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: "monitoring-test"},
			Client:     fake.NewSimpleClientset().CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "monitoring-test"},
		},
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return []prometheus.Registerer{
		legacyregistry.Registerer(),
		csimetrics.NewCSIMetricsManager("").GetRegistry().Registerer(),
	}
}

// registeredName says whether a collector of that name is registered on r,
// whether or not it has a series yet (a vector without a label set is not
// gathered): a probe gauge of the same name and another help string is
// refused by the registry if and only if the name is taken.
func registeredName(r prometheus.Registerer, name string) bool {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe of the monitoring test"})
	if err := r.Register(probe); err != nil {
		return true
	}
	r.Unregister(probe)
	return false
}

// metricExists finds name among the product's metrics; a histogram's
// series are its name with _bucket, _sum and _count.
func metricExists(regs []prometheus.Registerer, name string) bool {
	candidates := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			candidates = append(candidates, base)
		}
	}
	for _, r := range regs {
		for _, c := range candidates {
			if registeredName(r, c) {
				return true
			}
		}
	}
	return false
}

// grafanaVariables are replaced by a value before a panel's query is parsed,
// as Grafana does.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// metricNames parses a PromQL expression and returns the metric names it
// selects.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	if len(names) == 0 {
		return nil, errors.New("selects no metric")
	}
	return names, nil
}

type promQL struct{ where, expr string }

// alertExprs reads every rule of the PrometheusRule and checks what an SRE
// relies on: a unique name, a severity and a summary.
func alertExprs(t *testing.T, path string) []promQL {
	t.Helper()
	var rule struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert       string            `json:"alert"`
					Record      string            `json:"record"`
					Expr        string            `json:"expr"`
					For         string            `json:"for"`
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict([]byte(readFile(t, path)), &rule); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" {
		t.Fatalf("%s: %s %s, not a monitoring.coreos.com/v1 PrometheusRule", path, rule.APIVersion, rule.Kind)
	}
	var out []promQL
	seen := map[string]bool{}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if seen[name] {
				t.Errorf("%s: rule %s twice", path, name)
			}
			seen[name] = true
			if r.Alert != "" && (r.Labels["severity"] == "" || r.Annotations["summary"] == "") {
				t.Errorf("%s: alert %s without a severity label or a summary", path, r.Alert)
			}
			out = append(out, promQL{where: "alert " + name, expr: r.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rules", path)
	}
	return out
}

// panelExprs reads every query of the dashboard's panels.
func panelExprs(t *testing.T, path string) []promQL {
	t.Helper()
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, path)), &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("%s: no uid or no panels", path)
	}
	var out []promQL
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d twice", path, p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", path, p.Title)
		}
		for i, q := range p.Targets {
			out = append(out, promQL{where: fmt.Sprintf("panel %q query %d", p.Title, i), expr: q.Expr})
		}
	}
	return out
}

// checkPromQL returns a problem for every expression that does not parse or
// uses a metric the product does not register.
func checkPromQL(regs []prometheus.Registerer, exprs []promQL) []string {
	var problems []string
	for _, q := range exprs {
		names, err := metricNames(q.expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %q: %v", q.where, q.expr, err))
			continue
		}
		for _, n := range names {
			if !metricExists(regs, n) {
				problems = append(problems, fmt.Sprintf("%s: metric %s is not one of the product's", q.where, n))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// The alerts and the dashboard parse as PromQL and use only metrics the
// product registers: renaming a metric fails here, not in a silent alert.
func TestMonitoringUsesTheProductsMetrics(t *testing.T) {
	regs := productRegisterers(t)
	rules := alertExprs(t, filepath.Join(monitoringDir, "prometheusrule.yaml"))
	panels := panelExprs(t, filepath.Join(monitoringDir, "grafana-dashboard.json"))
	for _, p := range checkPromQL(regs, append(rules, panels...)) {
		t.Error(p)
	}

	// What each day-one alert is about is covered.
	used := map[string]bool{}
	for _, q := range rules {
		names, _ := metricNames(q.expr)
		for _, n := range names {
			used[n] = true
		}
	}
	for _, m := range []string{"csi_fence_fenced_nodes", "csi_fence_fenced_unpublish_errors_total", "csi_fence_storm_guard_deferrals_total",
		"csi_fence_unfenced_detaches_total", "csi_fence_node_cleanup_pending_volumes", "csi_fence_leader", "csi_fence_unprotected_pods"} {
		if !used[m] {
			t.Errorf("no alert on %s", m)
		}
	}

	// The kustomization renders the rule and the dashboard's ConfigMap.
	kinds := map[string]bool{}
	for _, o := range build(t, monitoringDir) {
		kinds[o.GetKind()+"/"+o.GetName()] = true
		if o.GetKind() == "ConfigMap" && o.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("ConfigMap %s without the grafana_dashboard label", o.GetName())
		}
	}
	for _, k := range []string{"PrometheusRule/csi-fence", "ConfigMap/csi-fence-dashboard"} {
		if !kinds[k] {
			t.Errorf("%s does not render %s (got %v)", monitoringDir, k, kinds)
		}
	}
}

// The check fails on a misspelt or unknown metric and on PromQL that does
// not parse; every name of the README's list is found.
func TestCheckPromQLFailsLoudly(t *testing.T) {
	regs := productRegisterers(t)
	for _, bad := range []string{
		`increase(fenced_unpublish_error_total[5m]) > 0`,
		`max(fenced_node)`,
		`rate(no_such_metric_total[5m])`,
		`sum(rate(csi_fence_fenced_unpublishes_total[5m]) > 0`,
		`{__name__="fence_nodes"}`,
	} {
		if p := checkPromQL(regs, []promQL{{where: "control", expr: bad}}); len(p) == 0 {
			t.Errorf("%q passes the check", bad)
		}
	}
	for _, good := range []string{
		"csi_fence_fenced_unpublishes_total", "csi_fence_fenced_unpublish_errors_total", "csi_fence_forced_detaches_total", "csi_fence_unfenced_detaches_total",
		"csi_fence_force_delete_pods_total", "csi_fence_force_delete_pod_errors_total", "csi_fence_force_delete_pods_refused_total",
		"csi_fence_fenced_nodes", "csi_fence_failover_duration_seconds_bucket", "csi_fence_fencing_duration_seconds_count",
		"csi_fence_failover_fence_errors_total", "csi_fence_fencing_backend_attempts_total", "csi_fence_fencing_backend_failures_total",
		"csi_fence_fencing_backend_duration_seconds_sum", "csi_fence_storm_guard_deferrals_total",
		"csi_fence_node_cleanups_total", "csi_fence_node_cleanup_pending_volumes", "csi_fence_node_cleanup_record_errors_total",
		"csi_fence_node_cleanup_unattributed_leftovers", "csi_sidecar_operations_seconds_bucket",
		"leader_election_master_status", "workqueue_depth", "csi_fence_leader",
	} {
		if p := checkPromQL(regs, []promQL{{where: "control", expr: good}}); len(p) != 0 {
			t.Errorf("%s: %v", good, p)
		}
	}
}

// unscoped returns the selectors of expr that select a metric every
// client-go component exports (leader_election_*, workqueue_*) without a
// matcher on its name label: an alert on them would fire for components
// that are not the product.
func unscoped(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		return nil, err
	}
	var out []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok || !(strings.HasPrefix(vs.Name, "leader_election_") || strings.HasPrefix(vs.Name, "workqueue_")) {
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == "name" && !m.Matches("") {
				return nil
			}
		}
		out = append(out, vs.String())
		return nil
	})
	return out, nil
}

// Every alert selects only the product's series.
func TestAlertsSelectTheProduct(t *testing.T) {
	for _, r := range alertExprs(t, filepath.Join(monitoringDir, "prometheusrule.yaml")) {
		sel, err := unscoped(r.expr)
		if err != nil {
			t.Errorf("%s: %v", r.where, err)
		}
		for _, s := range sel {
			t.Errorf("%s selects %s, which every client-go component exports: scope it by name, or use the product's own metric", r.where, s)
		}
	}
	for expr, want := range map[string]int{
		`max by (namespace, name) (leader_election_master_status) == 0`:      1,
		`max(workqueue_depth{name=~"csi-attacher-va|csi-attacher-pv"}) > 10`: 0,
		`max(workqueue_depth{name=~".*"}) > 10`:                              1,
		`max by (namespace, lease) (csi_fence_leader) == 0`:                  0,
	} {
		if sel, err := unscoped(expr); err != nil || len(sel) != want {
			t.Errorf("unscoped(%q) = %v, %v; want %d selectors", expr, sel, err, want)
		}
	}
}
