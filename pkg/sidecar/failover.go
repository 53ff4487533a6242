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

package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/failover"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
)

// FailoverOptions are the flags of the failover controller.
type FailoverOptions struct {
	MaxFencedNodes       int
	MaxFencedNodePercent int
	StormGuardNamespace  string
	FencingTaints        bool
	FencingRequiredAfter time.Duration
	FailoverOptIn        bool
	// Backends is --fencing-backends, in order.
	Backends []string
	// BackendsSet: --fencing-backends was given (the admin chose the
	// backends; otherwise they are the defaults).
	BackendsSet bool
	// FenceAgents is --fence-agents: the only fence agents that may run.
	FenceAgents []string
	// MachineRemediation is --machine-remediation (machine.go).
	MachineRemediation string
	// KubeAPIQPS and KubeAPIBurst rate-limit the failover's API clients
	// (--failover-kube-api-qps, --failover-kube-api-burst).
	KubeAPIQPS   float64
	KubeAPIBurst int
}

// The failover's client rate limits by default: kube-controller-manager's,
// whose controllers (its pod GC, its attach/detach controller) the failover
// works beside. One node's failover takes about a dozen requests before its
// first pod is force-deleted and five per pod after that: under
// external-attacher's 5 QPS and burst of 10, the force-delete of a node's
// first pod already waited for the rate limiter.
const (
	DefaultFailoverKubeAPIQPS   = 20
	DefaultFailoverKubeAPIBurst = 30
)

// AddFlags registers the failover flags on fs.
func (o *FailoverOptions) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.MaxFencedNodes, "max-fenced-nodes", 0, "Storm guard: never fence more than this many nodes at once (0: no absolute limit).")
	fs.IntVar(&o.MaxFencedNodePercent, "max-fenced-node-percent", 50, "Storm guard: never fence more than this share of all nodes at once, in percent (0: no limit).")
	fs.StringVar(&o.StormGuardNamespace, "storm-guard-namespace", DefaultStormGuardNamespace, "Namespace of the Leases that are one per cluster: the owner of node-level fencing state ("+contract.NodeFencingLeaseName+"), the storm guard's admissions ("+contract.StormGuardLeaseName+") and the drivers' registrations. Every driver's sidecar must name the same one, whatever namespace the driver is installed in, and be granted Leases there (the Role csi-fence-attacher-cluster-leases of deploy/kubernetes/base): two namespaces mean two owners and two storm guards.")
	fs.BoolVar(&o.FencingTaints, "fencing-taints", false, "Add the Node Fencing taints node.kubernetes.io/fencingtriaged:PreferNoSchedule and node.kubernetes.io/fencingrequired:NoSchedule with the FencingTriaged and FencingRequired conditions.")
	fs.BoolVar(&o.FailoverOptIn, "failover-opt-in", false, "Fail over by SafeDetach only the pods labelled "+contract.FailoverLabel+"="+contract.FailoverEnabled+" (or in a namespace so labelled); without it every pod fails over but those labelled "+contract.FailoverDisabled+".")
	o.Backends = []string{fencingv1alpha1.BackendStorage, fencingv1alpha1.BackendPower, fencingv1alpha1.BackendOutOfService}
	fs.Func("fencing-backends", "Comma-separated fencing backends, in the order they are tried for a dead node: storage (ControllerUnpublishVolume with fence=true, per volume, when the driver advertises UNPUBLISH_FENCE; a plain one, recorded as a fence, when it does not and its CSIDriver is annotated "+contract.UnpublishRevokesAccessAnnotation+"="+contract.UnpublishRevokesAccessTrue+"), power (power the node off through the fence agent of the FenceAgentConfig listing it, when storage fencing cannot free its pods) out-of-service (add the out-of-service taint when every attachment on the node is of a driver whose CSIDriver is annotated "+contract.FencesOnOutOfServiceAnnotation+"=true, or that fences storage) and machine (delete the node's Cluster API Machine, when storage fencing cannot free its pods; fenced once the infrastructure provider reports the instance gone). Default: storage,power,out-of-service.", func(v string) error {
		o.Backends, o.BackendsSet = splitList(v), true
		return nil
	})
	fs.Func("fence-agents", "Comma-separated fence agents (fence_*) that power fencing may run; empty: any fence_* executable in PATH, /usr/sbin or /sbin.", func(v string) error {
		o.FenceAgents = splitList(v)
		return nil
	})
	o.addMachineFlags(fs)
	fs.Float64Var(&o.KubeAPIQPS, "failover-kube-api-qps", DefaultFailoverKubeAPIQPS, "QPS of the failover's API clients (its fences' records, force-deletes, taints and conditions; its Events on a client of their own with the same limits), apart from --kube-api-qps, which paces the attacher.")
	fs.IntVar(&o.KubeAPIBurst, "failover-kube-api-burst", DefaultFailoverKubeAPIBurst, "Burst of the failover's API clients, apart from --kube-api-burst.")
	fs.DurationVar(&o.FencingRequiredAfter, "fencing-required-after", 0, "Mark a node FencingRequired once it has been NotReady this long, even before a pod qualifies for failover (0: only when a pod qualifies).")
}

// Validate checks the failover flags.
func (o *FailoverOptions) Validate() error {
	if o.FencingRequiredAfter < 0 {
		return errors.New("--fencing-required-after must not be negative")
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		return errors.New("--failover-kube-api-qps must be positive and --failover-kube-api-burst at least 1")
	}
	if o.MaxFencedNodes < 0 || o.MaxFencedNodePercent < 0 || o.MaxFencedNodePercent > 100 {
		return errors.New("--max-fenced-nodes must be >= 0 and --max-fenced-node-percent between 0 and 100")
	}
	seen := map[string]bool{}
	for _, b := range o.Backends {
		if !slices.Contains(fencingv1alpha1.Backends, b) {
			return fmt.Errorf("--fencing-backends: unknown backend %q (want %s)", b, strings.Join(fencingv1alpha1.Backends, ", "))
		}
		if seen[b] {
			return fmt.Errorf("--fencing-backends: %s given twice", b)
		}
		seen[b] = true
	}
	if err := o.validateMachine(); err != nil {
		return err
	}
	for _, a := range o.FenceAgents {
		if !strings.HasPrefix(a, "fence_") || strings.ContainsAny(a, "/ ") {
			return fmt.Errorf("--fence-agents: %q is not a fence agent name (fence_*)", a)
		}
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// FailoverDeps are what the failover controller is built from.
type FailoverDeps struct {
	DriverName          string
	CanFence            bool
	NonGracefulFailover bool // the feature gate
	Options             *Options
	Failover            *FailoverOptions
	Client              kubernetes.Interface
	Dynamic             dynamic.Interface
	// ElectionClient runs for ownership of node-level fencing state: a
	// client of its own, as csi-lib-utils gives leader election.
	ElectionClient kubernetes.Interface
	// EventClient posts the failover's Events: a client of its own, so
	// that Events never wait for a token the force-deletes need; nil:
	// Client.
	EventClient kubernetes.Interface
	CSI         csiclient.Attacher
	// Informers is the controller role's shared factory (NewInformerFactory);
	// nil: one of its own.
	Informers informers.SharedInformerFactory
	// Power: the sidecar may power-fence (Access.Power and the
	// FenceAgentConfig API served).
	Power bool
	// Machine: the sidecar may fence through Cluster API Machines
	// (MachineRules granted: FeatureRuns of FeatureMachineFencing).
	Machine bool
	// Heartbeats is the watch of the kubelets' Leases the replica started
	// before it led (WatchHeartbeats); nil: one started here.
	Heartbeats *nodehealth.Heartbeats
}

// WatchHeartbeats starts timing the kubelets' heartbeat Leases through
// client until ctx is done, and returns the watch for FailoverDeps. A
// replica calls it at start, before it runs for leadership: the failover
// it builds when it takes over then judges a node down as soon as its
// heartbeat has been silent for a lease duration, not a lease duration
// after the takeover (nodehealth.Heartbeats).
func WatchHeartbeats(ctx context.Context, client kubernetes.Interface, o *Options) (*nodehealth.Heartbeats, error) {
	hb, err := nodehealth.NewHeartbeats(client, failoverResync(o), nil)
	if err != nil {
		return nil, err
	}
	hb.Start(ctx.Done())
	return hb, nil
}

// NewFailover builds the failover controller and returns the function that
// runs it. The caller runs it only where CheckAccess says it may: it keeps
// its record in FencingRequests and cannot work without them. It starts
// watching the kubelets' heartbeats at once, until ctx is done, whether or
// not the returned function ever runs (failover.Controller.ObserveHeartbeats).
func NewFailover(ctx context.Context, d FailoverDeps) (func(context.Context), error) {
	failover.RegisterMetrics()
	factory := d.Informers
	if factory == nil {
		factory = NewInformerFactory(d.Client, d.Options.Resync)
	}
	events := d.EventClient
	if events == nil {
		events = d.Client
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events(v1.NamespaceAll)})
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: fmt.Sprintf("csi-fence-failover %s", d.DriverName)})
	dfactory := dynamicinformer.NewDynamicSharedInformerFactory(d.Dynamic, d.Options.Resync)
	var power *powerFencer
	if d.Power && slices.Contains(d.Failover.Backends, fencingv1alpha1.BackendPower) {
		power = newPowerFencer(d.Client, d.Dynamic, dfactory, d.Failover.FenceAgents)
	}
	opts := failover.Options{
		DriverName:           d.DriverName,
		CanFence:             d.CanFence,
		NonGracefulFailover:  d.NonGracefulFailover,
		Timeout:              d.Options.Timeout,
		MaxFencedNodes:       d.Failover.MaxFencedNodes,
		MaxFencedNodePercent: d.Failover.MaxFencedNodePercent,
		StormGuardNamespace:  StormGuardNamespace(d.Failover.StormGuardNamespace),
		RetryIntervalStart:   d.Options.RetryIntervalStart,
		RetryIntervalMax:     d.Options.RetryIntervalMax,
		Resync:               failoverResync(d.Options),
		FencingTaints:        d.Failover.FencingTaints,
		FencingRequiredAfter: d.Failover.FencingRequiredAfter,
		FailoverOptIn:        d.Failover.FailoverOptIn,
		Election:             electionConfig(d.ElectionClient, d.DriverName, StormGuardNamespace(d.Failover.StormGuardNamespace)),
		Backends:             d.Failover.Backends,
		Heartbeats:           d.Heartbeats,
	}
	if power != nil {
		opts.Power = power
	}
	machine, machines := newMachineFencer(ctx, d.Client, d.Dynamic, dfactory, d.Failover, d.Machine)
	if machine != nil {
		opts.Machine = machine
	}
	c, err := failover.New(opts, d.Client, factory, dfactory, fencingv1alpha1.NewClient(d.Dynamic), d.CSI, recorder)
	if err != nil {
		return nil, err
	}
	if machines != nil {
		if err := watchMachines(machines, c); err != nil {
			return nil, err
		}
	}
	// From now on, leader or standby: a replica taking over judges a node
	// down as soon as its heartbeat has been silent for a lease duration,
	// not a lease duration after it took over.
	c.ObserveHeartbeats(ctx)
	return func(ctx context.Context) {
		if power != nil {
			power.start(ctx)
		}
		// Run returns once its workers have returned and its node-fencing
		// Lease is released: the caller then releases the driver's Lease.
		c.Run(ctx, int(d.Options.WorkerThreads))
	}, nil
}

// electionConfig is how this sidecar runs for ownership of node-level
// fencing state (contract.NodeFencingLeaseName), with external-attacher's
// --leader-election-* durations. Its identity names the host (the pod, as
// csi-lib-utils' identity does) and the driver, since sidecars of two drivers
// may share a host.
func electionConfig(client kubernetes.Interface, driver, namespace string) failover.ElectionConfig {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	sc := standardflags.Configuration
	return failover.ElectionConfig{
		Client:        client,
		Namespace:     namespace,
		Identity:      host + "_" + contract.SanitizeDriverName(driver),
		LeaseDuration: sc.LeaderElectionLeaseDuration,
		RenewDeadline: sc.LeaderElectionRenewDeadline,
		RetryPeriod:   sc.LeaderElectionRetryPeriod,
	}
}

// failoverResync is how often every node is looked at again: time passing is
// an input of the failover (a node's NotReady age), so it is short.
func failoverResync(o *Options) (d time.Duration) {
	d = 10e9
	if o.Resync > 0 && o.Resync < d {
		d = o.Resync
	}
	return d
}

// DefaultStormGuardNamespace is where the Leases that are one per cluster
// live by default: kube-system exists in every cluster, whichever namespace
// each driver is installed in, and a chart needs to own no object there
// but its Role and RoleBinding (a Namespace of our own would be shared by
// the charts of every driver). Not the pod's or the leader-election
// namespace: drivers installed in namespaces of their own would get an
// owner and a storm guard each.
const DefaultStormGuardNamespace = metav1.NamespaceSystem

// StormGuardNamespace is where the Leases that are one per cluster live:
// --storm-guard-namespace, DefaultStormGuardNamespace when set empty.
func StormGuardNamespace(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return DefaultStormGuardNamespace
}
