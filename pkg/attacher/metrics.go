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

package attacher

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics of the fence path, on the legacy registry that the binary serves
// beside csi-lib-utils' csi_sidecar_operations_seconds. The reason label is
// one of the FenceReason* values.
var (
	fencedUnpublishes = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "csi_fence_fenced_unpublishes_total",
		Help:           "Number of fencing ControllerUnpublishVolume calls that succeeded (fence=true, or a plain unpublish of a driver whose CSIDriver declares that it revokes access or that fences on the out-of-service taint), by driver and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name", "reason"})
	fencedUnpublishErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "csi_fence_fenced_unpublish_errors_total",
		Help:           "Number of fencing ControllerUnpublishVolume calls (as csi_fence_fenced_unpublishes_total) that failed, timed out or were refused by the driver, by driver and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name", "reason"})
	unfencedDetaches = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "csi_fence_unfenced_detaches_total",
		Help:           "Number of non-graceful detaches unpublished without fence=true although the driver can fence, because the fence could not be recorded (no FencingRequest API), by driver and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name", "reason"})
	forcedDetaches = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "csi_fence_forced_detaches_total",
		Help:           "Number of VolumeAttachments detached by a fence (a non-graceful detach, KEP-2268's forced detach), by driver and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name", "reason"})

	registerOnce sync.Once
)

// fenceReasons are every value of the reason label.
var fenceReasons = []string{FenceReasonNodeDeleted, FenceReasonOutOfService, FenceReasonQuarantined,
	FenceReasonNodeNotReady, FenceReasonFencingRequest, FenceReasonVolumeInUse}

// initMetrics creates every counter's series for driver at zero, so that
// /metrics shows them before the first fence: an alert on a rate or an
// increase cannot be set up on a series that does not exist yet, and the
// first increment from nothing is invisible to increase().
func initMetrics(driver string) {
	for _, reason := range fenceReasons {
		for _, c := range []*metrics.CounterVec{fencedUnpublishes, fencedUnpublishErrors, unfencedDetaches, forcedDetaches} {
			c.WithLabelValues(driver, reason)
		}
	}
}

// RegisterMetrics registers the attacher's metrics on the legacy registry.
// It is idempotent; NewCSIHandler calls it.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(fencedUnpublishes, fencedUnpublishErrors, unfencedDetaches, forcedDetaches)
	})
}
