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

package server

import (
	"context"
	"path"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
)

// Metric names (stable: tests and dashboards use them).
const (
	MetricViolations  = "csi_fence_mock_safety_violations_total"
	MetricRefused     = "csi_fence_mock_refused_unsafe_requests_total"
	MetricWrites      = "csi_fence_mock_writes_total"
	MetricChanges     = "csi_fence_mock_changes_total"
	MetricReads       = "csi_fence_mock_reads_total"
	MetricPublication = "csi_fence_mock_publication"
	MetricRPCs        = "csi_fence_mock_rpcs_total"
	MetricFaults      = "csi_fence_mock_injected_faults_total"
)

// metrics are one instance's Prometheus metrics: the array's counters, read
// from the shared state at scrape time (so that every instance reports the
// same numbers), and the instance's own RPC and fault counters.
type metrics struct {
	reg    *prometheus.Registry
	rpcs   *prometheus.CounterVec
	faults *prometheus.CounterVec
}

func newMetrics(arr *array.Array) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRPCs, Help: "CSI calls served by this instance, by method and gRPC code.",
		}, []string{"method", "code"}),
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricFaults, Help: "Faults injected into this instance's calls, by method and kind (error code, latency, lie).",
		}, []string{"method", "kind"}),
	}
	m.reg.MustRegister(m.rpcs, m.faults, newArrayCollector(arr),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) countRPC(ctx context.Context, req interface{}, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (interface{}, error) {
	rsp, err := handler(ctx, req)
	m.rpcs.WithLabelValues(path.Base(info.FullMethod), status.Code(err).String()).Inc()
	return rsp, err
}

func (m *metrics) countFault(method string, f faults.Fault) {
	var kinds []string
	if f.Code != 0 {
		kinds = append(kinds, f.Code.String())
	}
	if f.Latency > 0 {
		kinds = append(kinds, "latency")
	}
	if f.Lie {
		kinds = append(kinds, "lie")
	}
	m.faults.WithLabelValues(method, strings.Join(kinds, "+")).Inc()
}

type arrayCollector struct {
	arr                                                       *array.Array
	violations, refused, writes, changes, reads, publications *prometheus.Desc
}

func newArrayCollector(arr *array.Array) *arrayCollector {
	return &arrayCollector{
		arr:        arr,
		violations: prometheus.NewDesc(MetricViolations, "Safety invariant violations recorded by the simulated array (S1: single-node volume published to two nodes, writable from two nodes, or written after a publish elsewhere or while another node can write; S2: published where quarantined).", []string{"invariant"}, nil),
		refused:    prometheus.NewDesc(MetricRefused, "Requests the simulated array refused, by kind (publish-quarantined, publish-elsewhere, write-fenced, write-unpublished, fence-refused-recent-io, ...).", []string{"kind"}, nil),
		writes:     prometheus.NewDesc(MetricWrites, "Writes accepted by the simulated array.", []string{"volume", "node"}, nil),
		changes:    prometheus.NewDesc(MetricChanges, "Changes other than writes of data (create, mkdir, unlink, rename, setattr, fsync, ...) accepted by the simulated array from a node's FUSE data path.", []string{"volume", "node"}, nil),
		reads:      prometheus.NewDesc(MetricReads, "Reads accepted by the simulated array.", []string{"volume", "node"}, nil),
		publications: prometheus.NewDesc(MetricPublication, "1 for each publication of a volume on a node, by access (granted, fenced, unpublished).",
			[]string{"volume", "node", "access"}, nil),
	}
}

func (c *arrayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.violations, c.refused, c.writes, c.changes, c.reads, c.publications} {
		ch <- d
	}
}

func (c *arrayCollector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.arr.Snapshot()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.violations, err)
		return
	}
	for inv, n := range s.CountViolations() {
		ch <- prometheus.MustNewConstMetric(c.violations, prometheus.CounterValue, float64(n), inv)
	}
	for kind, n := range s.Refused {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(n), kind)
	}
	for id, v := range s.Volumes {
		for node, n := range v.Writes {
			ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(n), id, node)
		}
		for node, n := range v.Changes {
			ch <- prometheus.MustNewConstMetric(c.changes, prometheus.CounterValue, float64(n), id, node)
		}
		for node, n := range v.Reads {
			ch <- prometheus.MustNewConstMetric(c.reads, prometheus.CounterValue, float64(n), id, node)
		}
		for node, p := range v.Publications {
			ch <- prometheus.MustNewConstMetric(c.publications, prometheus.GaugeValue, 1, id, node, p.Access)
		}
	}
}
