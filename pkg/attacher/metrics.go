package attacher

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	fencedUnpublishes = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "fenced_unpublishes_total",
		Help:           "Number of ControllerUnpublishVolume calls with fence=true that succeeded, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name", "reason"})
	fencedUnpublishErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "fenced_unpublish_errors_total",
		Help:           "Number of ControllerUnpublishVolume calls with fence=true that failed (the fence was refused or did not complete), by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name", "reason"})
	forcedDetaches = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "forced_detaches_total",
		Help:           "Number of detaches from a node that was not healthy, completed with a fence, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver_name", "reason"})

	registerOnce sync.Once
)

// RegisterMetrics registers the attacher's metrics on the legacy registry,
// which the binary serves beside csi-lib-utils' metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(fencedUnpublishes, fencedUnpublishErrors, forcedDetaches)
	})
}
