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

// Package leadership says, as a metric, which of the product's Leases this
// replica holds. client-go's leader_election_master_status cannot tell the
// product's elections from any other component's, and csi-lib-utils, which
// runs the controller role's election, leaves its name label empty; an
// alert on it fired for every leader election in the cluster.
package leadership

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	leading = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "csi_fence_leader",
		Help:           "1 while this replica holds the Lease, 0 while it runs for it, by Lease name.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"lease"})
	registerOnce sync.Once
)

// Register registers the metric on the legacy registry.
func Register() {
	registerOnce.Do(func() { legacyregistry.MustRegister(leading) })
}

// Set says whether this replica holds lease now.
func Set(lease string, holds bool) {
	v := 0.0
	if holds {
		v = 1
	}
	leading.WithLabelValues(lease).Set(v)
}
