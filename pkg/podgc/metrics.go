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
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The metrics KEP-2268 names for the pod GC, with the same reason label.
var (
	forceDeletePods = metrics.NewCounterVec(&metrics.CounterOpts{
		Name: "csi_fence_force_delete_pods_total", StabilityLevel: metrics.ALPHA,
		Help: "Number of pods force-deleted, by reason (safe-detach, out-of-service, fencing-complete).",
	}, []string{"reason"})
	forceDeletePodErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Name: "csi_fence_force_delete_pod_errors_total", StabilityLevel: metrics.ALPHA,
		Help: "Number of errors while force-deleting pods, by reason.",
	}, []string{"reason"})
	forceDeletePodsRefused = metrics.NewCounterVec(&metrics.CounterOpts{
		Name: "csi_fence_force_delete_pods_refused_total", StabilityLevel: metrics.ALPHA,
		Help: "Number of force-deletes refused because a live read found the node alive (Ready, or its Lease renewed), by reason.",
	}, []string{"reason"})
	lostEvictions = metrics.NewCounter(&metrics.CounterOpts{
		Name: "csi_fence_lost_evictions_taken_over_total", StabilityLevel: metrics.ALPHA,
		Help: "Number of pods evicted from a dead node because the taint manager's eviction of them was lost (their toleration ran out and they were not terminating).",
	})
	registerOnce sync.Once
)

// reasons are every value of the reason label.
var reasons = []string{ReasonSafeDetach, ReasonOutOfService, ReasonFencingComplete}

// RegisterMetrics registers the pod GC metrics on the legacy registry, each
// reason's series at zero: /metrics shows them before the first
// force-delete, so that alerts on them can be set up in advance.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(forceDeletePods, forceDeletePodErrors, forceDeletePodsRefused, lostEvictions)
		for _, r := range reasons {
			for _, c := range []*metrics.CounterVec{forceDeletePods, forceDeletePodErrors, forceDeletePodsRefused} {
				c.WithLabelValues(r)
			}
		}
	})
}
