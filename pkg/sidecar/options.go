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

// Package sidecar holds the wiring of the csi-fence-attacher binary that is
// worth testing: its own flags and feature gates, the choice of handler from
// the driver's capabilities, and the assembly of the attacher from clients.
// cmd/csi-fence-attacher only parses, connects and runs.
package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	"github.com/kubernetes-csi/external-attacher/v4/pkg/features" // external-attacher's gates
	_ "k8s.io/apiserver/pkg/features"                             // the apiserver's gates, which external-attacher accepts
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// Roles of the binary (--role).
const (
	RoleController = "controller"
	RoleNode       = "node"
	// RoleRegistrar registers the driver's node plugin with the kubelet's
	// plugin watcher, in node-driver-registrar's place (pkg/registrar).
	RoleRegistrar = "registrar"
)

// Options are the flags of csi-fence-attacher beyond csi-lib-utils' common
// sidecar flags and the logging flags: every flag of external-attacher
// v4.13 with its name, default and meaning, plus --role.
type Options struct {
	Timeout            time.Duration
	RetryIntervalStart time.Duration
	RetryIntervalMax   time.Duration
	WorkerThreads      uint
	MaxEntries         int
	ReconcileSync      time.Duration
	Resync             time.Duration
	DefaultFSType      string
	MaxGRPCLogLength   int

	Role string
	// DisableFencing runs external-attacher's controller exactly as
	// external-attacher does (its own attacher, no fence, no publish
	// refusal), to compare with it or to rule the fence out while
	// troubleshooting. The zero value fences: nothing turns it off unasked.
	DisableFencing bool
}

// AddFlags registers the options on fs with external-attacher's defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.Timeout, "timeout", 15*time.Second, "Timeout of every call to the CSI driver (ControllerPublishVolume, ControllerUnpublishVolume, ListVolumes, each probe).")
	fs.DurationVar(&o.RetryIntervalStart, "retry-interval-start", time.Second, "First retry interval of a failed attach or detach. It doubles with each failure of the same VolumeAttachment, up to --retry-interval-max.")
	fs.DurationVar(&o.RetryIntervalMax, "retry-interval-max", 5*time.Minute, "Longest retry interval of a failed attach or detach.")
	fs.UintVar(&o.WorkerThreads, "worker-threads", 10, "Number of goroutines processing VolumeAttachments, and as many processing PersistentVolumes.")
	fs.IntVar(&o.MaxEntries, "max-entries", 0, "Page size of the ListVolumes calls of the VolumeAttachment reconciler; 0 lets the driver choose.")
	fs.DurationVar(&o.ReconcileSync, "reconcile-sync", time.Minute, "Period of the reconciler that compares VolumeAttachments with the driver's ListVolumes (needs LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES).")
	fs.DurationVar(&o.Resync, "resync", 10*time.Minute, "Resync period of the informers: every object is processed again this often.")
	fs.StringVar(&o.DefaultFSType, "default-fstype", "", "Filesystem type to publish a mount volume with when its PersistentVolume has none. Empty by default.")
	fs.IntVar(&o.MaxGRPCLogLength, "max-grpc-log-length", -1, "Maximum number of characters logged of each gRPC response; -1 logs them whole.")
	fs.BoolVar(&o.DisableFencing, "disable-fencing", false, "Run external-attacher's controller unchanged: no fenced detach, no refusal to publish where a volume may be quarantined or is still attached elsewhere. For comparison and troubleshooting; the automatic failover is governed by the NonGracefulFailover feature gate.")
	fs.StringVar(&o.Role, "role", RoleController, "Which part to run: '"+RoleController+"' next to the driver's controller plugin (the attacher), '"+RoleNode+"' next to its node plugin (the cleanup of fenced volumes), or '"+RoleRegistrar+"' in node-driver-registrar's place (registers the node plugin with the kubelet's plugin watcher).")
}

// Validate rejects what external-attacher rejects (--worker-threads=0) and
// an unknown --role. Every other value external-attacher accepts is
// accepted and means what it means there, however odd (a zero --timeout
// fails every CSI call at once, a zero --retry-interval-start retries at
// once): Warnings names those.
func (o *Options) Validate() error {
	var errs []error
	if o.WorkerThreads == 0 {
		errs = append(errs, errors.New("--worker-threads must be greater than zero"))
	}
	if o.Role != RoleController && o.Role != RoleNode && o.Role != RoleRegistrar {
		errs = append(errs, fmt.Errorf("--role must be %q, %q or %q, got %q", RoleController, RoleNode, RoleRegistrar, o.Role))
	}
	return errors.Join(errs...)
}

// Warnings describes the accepted values that make the attacher fail or
// spin, as they make external-attacher fail or spin.
func (o *Options) Warnings() []string {
	var w []string
	if o.Timeout <= 0 {
		w = append(w, fmt.Sprintf("--timeout=%v: every call to the CSI driver times out at once (the driver probe retries forever)", o.Timeout))
	}
	if o.RetryIntervalStart <= 0 {
		w = append(w, fmt.Sprintf("--retry-interval-start=%v: failed attaches and detaches are retried without any delay", o.RetryIntervalStart))
	}
	if o.ReconcileSync <= 0 {
		w = append(w, fmt.Sprintf("--reconcile-sync=%v: the VolumeAttachment reconciler runs without pause", o.ReconcileSync))
	}
	if o.DisableFencing {
		w = append(w, "--disable-fencing: detaches are never fenced and publishes are never refused, as with external-attacher")
	}
	if o.MaxEntries < 0 || o.MaxEntries > math.MaxInt32 {
		w = append(w, fmt.Sprintf("--max-entries=%d: sent to the driver as ListVolumes max_entries %d, which it should reject", o.MaxEntries, int32(o.MaxEntries)))
	}
	return w
}

// NewFeatureGate returns the binary's feature gates. They live in the
// process-wide gate external-attacher's controller reads
// (k8s.io/apiserver's DefaultMutableFeatureGate), which holds every gate
// external-attacher's binary accepts: its own (ReleaseLeaderElectionOnExit,
// MutableCSINodeAllocatableCount, registered by importing its features
// package), the apiserver's (registered by importing
// k8s.io/apiserver/pkg/features) and component-base metrics' (registered by
// its server package there, here). Ours, NonGracefulFailover, and the
// logging gates of component-base are added to it. It may be called again
// (tests): adding the same gates twice is not an error.
//
// ReleaseLeaderElectionOnExit is on by default here (off in
// external-attacher): a replica terminated by a rolling update stops its
// workers, then releases its Leases, and the next leader starts at once
// instead of after the Lease expires (twice in a row: the node-fencing Lease
// is run for only by a leader). A Deployment that keeps external-attacher's
// arguments gets it too; --feature-gates=ReleaseLeaderElectionOnExit=false
// turns it off.
func NewFeatureGate() (featuregate.MutableVersionedFeatureGate, error) {
	fg := utilfeature.DefaultMutableFeatureGate
	if err := fg.Add(map[featuregate.Feature]featuregate.FeatureSpec{
		featuregate.Feature(contract.NonGracefulFailoverGate): {Default: false, PreRelease: featuregate.Alpha},
	}); err != nil {
		return nil, err
	}
	if err := fg.OverrideDefault(features.ReleaseLeaderElectionOnExit, true); err != nil {
		return nil, err
	}
	if err := metricsfeatures.AddFeatureGates(fg); err != nil {
		return nil, err
	}
	if err := logsapi.AddFeatureGates(fg); err != nil {
		return nil, err
	}
	return fg, nil
}

// AddFeatureGatesFlag registers --feature-gates (key=value,key=value) on fs.
func AddFeatureGatesFlag(fs *flag.FlagSet, fg featuregate.MutableFeatureGate) {
	fs.Func("feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:\n"+
		strings.Join(fg.KnownFeatures(), "\n"), fg.Set)
}

// HTTPAddress returns the address of the diagnostics HTTP server (metrics,
// leader-election health), "" for none. --http-endpoint and the deprecated
// --metrics-address are exclusive, as in external-attacher.
func HTTPAddress(c standardflags.SidecarConfiguration) (string, error) {
	if c.HttpEndpoint != "" && c.MetricsAddress != "" {
		return "", errors.New("only one of --metrics-address and --http-endpoint can be set")
	}
	if c.HttpEndpoint != "" {
		return c.HttpEndpoint, nil
	}
	return c.MetricsAddress, nil
}
