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

package failover

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

var (
	fencedNodes = metrics.NewGauge(&metrics.GaugeOpts{
		Name: "csi_fence_fenced_nodes", StabilityLevel: metrics.ALPHA,
		Help: "Number of nodes under quarantine.",
	})
	failoverDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Name: "csi_fence_failover_duration_seconds", StabilityLevel: metrics.ALPHA,
		Help:    "Time from a pod becoming eligible (Terminating on a NotReady node) to its force-delete.",
		Buckets: metrics.ExponentialBuckets(0.1, 2, 12),
	})
	fencingDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Name: "csi_fence_fencing_duration_seconds", StabilityLevel: metrics.ALPHA,
		Help:    "Time from the start of a node's fencing (its FencingRequest's startTime) to every attachment on it fenced.",
		Buckets: metrics.ExponentialBuckets(0.1, 2, 12),
	})
	fenceErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Name: "csi_fence_failover_fence_errors_total", StabilityLevel: metrics.ALPHA,
		Help: "Number of fences refused or failed during a failover, by driver.",
	}, []string{"driver_name"})
	// The fencing_backend_* metrics count fences by backend: storage (one
	// ControllerUnpublishVolume with fence=true) and power (one fence agent
	// off-and-confirm).
	backendAttempts = metrics.NewCounterVec(&metrics.CounterOpts{
		Name: "csi_fence_fencing_backend_attempts_total", StabilityLevel: metrics.ALPHA,
		Help: "Number of fences started, by backend.",
	}, []string{"backend"})
	backendFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Name: "csi_fence_fencing_backend_failures_total", StabilityLevel: metrics.ALPHA,
		Help: "Number of fences that failed or were not confirmed, by backend.",
	}, []string{"backend"})
	backendDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Name: "csi_fence_fencing_backend_duration_seconds", StabilityLevel: metrics.ALPHA,
		Help:    "Time one fence took, by backend.",
		Buckets: metrics.ExponentialBuckets(0.01, 2, 14),
	}, []string{"backend"})
	// stormGuardDeferrals counts the refusals of the storm guard's
	// admission: while a node is held back its fencing is retried, so the
	// counter keeps rising for as long as the guard holds it.
	stormGuardDeferrals = metrics.NewCounter(&metrics.CounterOpts{
		Name: "csi_fence_storm_guard_deferrals_total", StabilityLevel: metrics.ALPHA,
		Help: "Number of times a node's fencing was deferred by the storm guard (limit reached, fencing paused, or its admission Lease not updated).",
	})
	// unprotectedPods counts the pods that would not fail over if their
	// node died now, by reason (pkg/protection: the failover's own
	// decision, as `kubectl fence explain` says it).
	unprotectedPods = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name: "csi_fence_unprotected_pods", StabilityLevel: metrics.ALPHA,
		Help: "Number of running pods that would not fail over automatically if their node died now, by reason (kubectl fence explain says which and how to fix them). Set by the owner of node-level fencing every minute.",
	}, []string{"reason"})
	registerOnce sync.Once
)

// RegisterMetrics registers the failover metrics, and those of the pod GC it
// drives, on the legacy registry, each backend's counters at zero: /metrics
// shows them before the first fence, so that alerts on them can be set up
// in advance.
func RegisterMetrics() {
	podgc.RegisterMetrics()
	registerOnce.Do(func() {
		legacyregistry.MustRegister(fencedNodes, failoverDuration, fencingDuration, fenceErrors, backendAttempts, backendFailures, backendDuration, stormGuardDeferrals, unprotectedPods)
		for _, r := range protection.Reasons {
			unprotectedPods.WithLabelValues(string(r))
		}
		for _, b := range fencingv1alpha1.Backends {
			backendAttempts.WithLabelValues(b)
			backendFailures.WithLabelValues(b)
		}
	})
}

// initDriverMetrics puts the driver's fence error counter at zero (the
// driver is known only once the controller is built).
func initDriverMetrics(driver string) {
	fenceErrors.WithLabelValues(driver)
}
