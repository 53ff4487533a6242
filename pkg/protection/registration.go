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

package protection

import (
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// A driver's registration (pkg/failover's registry: a Lease its leading
// controller renews in the storm guard's namespace) says what the driver
// can do and how its failover is configured, so that the owner of
// node-level state, and `kubectl fence explain`, know it without reading
// another process's flags.
const (
	// RegistrationLabel carries the driver's name; its presence selects
	// the registrations among the namespace's Leases.
	RegistrationLabel = contract.Prefix + "/driver"
	// CanFenceAnnotation is "true" when the storage backend fences the
	// driver's attachments.
	CanFenceAnnotation = contract.Prefix + "/unpublish-fence"
	// FenceModeAnnotation says how (fencemode.Mode), for people.
	FenceModeAnnotation = contract.Prefix + "/fence-mode"
	// MaxFencedNodesAnnotation and MaxFencedPercentAnnotation are the
	// driver's --max-fenced-nodes and --max-fenced-node-percent.
	MaxFencedNodesAnnotation   = contract.Prefix + "/max-fenced-nodes"
	MaxFencedPercentAnnotation = contract.Prefix + "/max-fenced-node-percent"
	// GateAnnotation is the driver's NonGracefulFailover gate ("true",
	// "false"), BackendsAnnotation its --fencing-backends (comma-separated,
	// in order), OptInAnnotation its --failover-opt-in, TimeoutAnnotation
	// its --timeout (a Go duration), which bounds one fence.
	GateAnnotation     = contract.Prefix + "/non-graceful-failover"
	BackendsAnnotation = contract.Prefix + "/fencing-backends"
	OptInAnnotation    = contract.Prefix + "/failover-opt-in"
	TimeoutAnnotation  = contract.Prefix + "/timeout"
)

// Registration is a driver's registration as read from its Lease.
type Registration struct {
	Driver, Identity string
	CanFence         bool
	Mode             string
	// Configured is false for a registration of a version that did not
	// say its configuration (Gate, Backends, OptIn, Timeout unknown).
	Configured           bool
	Gate, OptIn          bool
	Backends             []string
	Timeout              time.Duration
	MaxNodes, MaxPercent int
	// RenewTime is the registration's last renewal, on its writer's clock.
	RenewTime time.Time
}

// ParseRegistration reads a registration Lease (ok false: not one).
func ParseRegistration(l *coordinationv1.Lease) (Registration, bool) {
	a := l.Annotations
	r := Registration{Driver: a[RegistrationLabel], CanFence: a[CanFenceAnnotation] == "true", Mode: a[FenceModeAnnotation]}
	if r.Driver == "" {
		return r, false
	}
	if l.Spec.HolderIdentity != nil {
		r.Identity = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		r.RenewTime = l.Spec.RenewTime.Time
	}
	r.MaxNodes, _ = strconv.Atoi(a[MaxFencedNodesAnnotation])
	r.MaxPercent, _ = strconv.Atoi(a[MaxFencedPercentAnnotation])
	if g, ok := a[GateAnnotation]; ok {
		r.Configured = true
		r.Gate = g == "true"
		r.OptIn = a[OptInAnnotation] == "true"
		if b := a[BackendsAnnotation]; b != "" {
			r.Backends = strings.Split(b, ",")
		}
		r.Timeout, _ = time.ParseDuration(a[TimeoutAnnotation])
	}
	return r, true
}

// ConfigAnnotations are the annotations of a registration that say its
// failover's configuration (ParseRegistration reads them back).
func ConfigAnnotations(gate, optIn bool, backends []string, timeout time.Duration) map[string]string {
	return map[string]string{
		GateAnnotation:     strconv.FormatBool(gate),
		OptInAnnotation:    strconv.FormatBool(optIn),
		BackendsAnnotation: strings.Join(backends, ","),
		TimeoutAnnotation:  timeout.String(),
	}
}
