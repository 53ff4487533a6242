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

package framework

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMetricSum(t *testing.T) {
	const exposition = `# HELP csi_fence_failover_fence_errors_total Number of fences refused or failed during a failover, by driver.
# TYPE csi_fence_failover_fence_errors_total counter
csi_fence_failover_fence_errors_total{driver_name="fence.csi-fence.io"} 2
csi_fence_failover_fence_errors_total{driver_name="fence2.csi-fence.io"} 5
csi_fence_force_delete_pods_refused_total{reason="safe-detach"} 1
leader_election_master_status{name="external-attacher-leader-fence-csi-fence-io"} 1
process_open_fds 12
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(exposition))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{name: "every series", metric: "csi_fence_failover_fence_errors_total", want: 7},
		{name: "one label value", metric: "csi_fence_failover_fence_errors_total", labels: map[string]string{"driver_name": "fence2.csi-fence.io"}, want: 5},
		{name: "a label name is not a suffix of another", metric: "leader_election_master_status", labels: map[string]string{"ame": "external-attacher-leader-fence-csi-fence-io"}, want: 0},
		{name: "no labels at all", metric: "process_open_fds", want: 12},
		{name: "absent", metric: "csi_fence_force_delete_pods_total", want: 0},
		{name: "absent label value", metric: "csi_fence_force_delete_pods_refused_total", labels: map[string]string{"reason": "out-of-service"}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MetricSum(context.Background(), addr, tc.metric, tc.labels)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("MetricSum(%s, %v) = %v, want %v", tc.metric, tc.labels, got, tc.want)
			}
		})
	}
}
