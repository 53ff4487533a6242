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
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Results of one cleanup attempt of one volume (csi_fence_node_cleanups_total's result
// label).
const (
	resultSuccess = "success"
	resultError   = "error"
)

// Operations on the fencing record (csi_fence_node_cleanup_record_errors_total's
// operation label).
const (
	opRead   = "read"
	opUpdate = "update"
)

var (
	cleanups = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "csi_fence_node_cleanups_total",
		Help:           "Cleanup attempts of volumes fenced on this node (forced NodeUnpublishVolume/NodeUnstageVolume and removal of the kubelet's leftovers), by result: success or error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name", "result"})
	pendingVolumes = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "csi_fence_node_cleanup_pending_volumes",
		Help:           "Volumes the fencing record says were fenced on this node and are not cleaned up yet: the node stays quarantined while this is above zero.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name"})
	recordErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "csi_fence_node_cleanup_record_errors_total",
		Help:           "Failures to read (list/watch/parse) or update the node's FencingRequest, by operation: read or update.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name", "operation"})
	unattributedLeftovers = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "csi_fence_node_cleanup_unattributed_leftovers",
		Help:           "Volume directories under the kubelet root without readable vol_data.json that match no fenced volume: left alone and reported.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name"})

	registerOnce sync.Once
)

// initMetrics creates the driver's counter series at zero (and its gauges),
// so that /metrics shows them before the first cleanup: alerts on them can
// be set up in advance.
func initMetrics(driver string) {
	for _, r := range []string{resultSuccess, resultError} {
		cleanups.WithLabelValues(driver, r)
	}
	for _, op := range []string{opRead, opUpdate} {
		recordErrors.WithLabelValues(driver, op)
	}
	pendingVolumes.WithLabelValues(driver)
	unattributedLeftovers.WithLabelValues(driver)
}

// RegisterMetrics registers the node agent's metrics on the legacy registry,
// which the binary serves beside csi-lib-utils' metrics
// (metricsManager.WithAdditionalRegistry(legacyregistry.DefaultGatherer)).
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(cleanups, pendingVolumes, recordErrors, unattributedLeftovers)
	})
}
