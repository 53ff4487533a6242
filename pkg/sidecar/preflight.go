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
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-helpers/auth/rbac/validation"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// The features of the controller role, each with its own roles in
// deploy/kubernetes (and values in the Helm chart).
const (
	// FeatureFencedDetach: the attacher fences detaches from failed nodes
	// (base/rbac-attacher.yaml; always on).
	FeatureFencedDetach = "fenced-detach"
	// FeatureFailover: the failover controller (failover/; the chart's
	// features.failover), enabled by --feature-gates=NonGracefulFailover=true.
	FeatureFailover = "failover"
	// FeaturePowerFencing: the power backend (power-fencing/; the chart's
	// features.powerFencing), enabled by naming it in --fencing-backends.
	FeaturePowerFencing = "power-fencing"
	// FeatureMachineFencing: the machine backend (machine-fencing/),
	// enabled by naming it in --fencing-backends.
	FeatureMachineFencing = "machine-fencing"
)

// EventReasonMissingPermissions is the reason of the Warning Event that says
// a feature the flags enable cannot run for lack of RBAC.
const EventReasonMissingPermissions = "MissingPermissions"

// Permission is one verb on one resource of one API group, as an RBAC rule
// grants it.
type Permission struct {
	Verb     string
	Group    string // "" is the core group
	Resource string // with its subresource: "nodes/status"
}

// String is the permission as one writes it in a rule: verb, resource and
// API group, the core group as "".
func (p Permission) String() string {
	return fmt.Sprintf("%s %s (apiGroup %q)", p.Verb, p.Resource, p.Group)
}

// Wanted are the features the flags enable.
type Wanted struct {
	// Failover: --feature-gates=NonGracefulFailover=true, or a node-level
	// backend named in --fencing-backends (those run in the failover).
	Failover bool
	// Power and Machine: their backend named in --fencing-backends by the
	// admin. power is one of the flag's defaults: tried then when granted,
	// but not asked for.
	Power, Machine bool
}

// WantedFeatures says which features the flags enable.
func WantedFeatures(gate bool, o *FailoverOptions) Wanted {
	w := Wanted{
		Power:   o.BackendsSet && slices.Contains(o.Backends, fencingv1alpha1.BackendPower),
		Machine: slices.Contains(o.Backends, fencingv1alpha1.BackendMachine),
	}
	w.Failover = gate || w.Power || w.Machine
	return w
}

// FeatureCheck is what the preflight found for one feature.
type FeatureCheck struct {
	Feature string
	// Wanted: the flags enable it.
	Wanted bool
	// Runs: it runs (its rules and those of the features it builds on
	// are granted).
	Runs bool
	// Missing are its own rules the ServiceAccount lacks.
	Missing []Permission
	// Needs names the feature it builds on when that one cannot run.
	Needs string
	// Grant says which roles of deploy/ (and values of the chart) grant
	// its rules.
	Grant string
	// Consequence says what the sidecar does without it.
	Consequence string
}

// checks lists, per feature, what the ServiceAccount lacks of the rules
// granted. When the API server could not list them (known false), nothing
// is known to be missing.
func (a Access) checks(granted []rbacv1.PolicyRule, known bool, w Wanted, stormGuardNamespace string) []FeatureCheck {
	missing := func(needed ...[]rbacv1.PolicyRule) []Permission {
		if !known {
			return nil
		}
		_, uncovered := validation.Covers(granted, slices.Concat(needed...))
		var out []Permission
		for _, r := range uncovered {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						p := Permission{Verb: v, Group: g, Resource: res}
						if !slices.Contains(out, p) {
							out = append(out, p)
						}
					}
				}
			}
		}
		return out
	}
	detach := FeatureCheck{Feature: FeatureFencedDetach, Wanted: true, Runs: a.Nodes && a.Record,
		Missing: missing(NodeRules, RecordRules, EventRules),
		Grant:   "ClusterRole csi-fence-attacher-runner (deploy/kubernetes/base/rbac-attacher.yaml; the chart always renders it)"}
	switch {
	case !a.Nodes:
		detach.Consequence = "no detach is fenced: the sidecar attaches and detaches as external-attacher does"
	case !a.Record:
		detach.Consequence = "no detach is fenced (a fence that cannot be recorded could never be lifted): a detach from a failed node is a plain unpublish"
	case !a.Events:
		detach.Consequence = "Events are logged instead of posted"
	}
	failover := FeatureCheck{Feature: FeatureFailover, Wanted: w.Failover, Runs: a.Failover, Missing: missing(FailoverRules),
		Grant: "ClusterRole csi-fence-attacher-failover-runner, and Role csi-fence-attacher-cluster-leases in namespace " + stormGuardNamespace +
			" (--storm-guard-namespace) (deploy/kubernetes/failover; the chart's features.failover)",
		Consequence: "automatic failover is off: no pod is moved off a failed node and no node is quarantined by this sidecar"}
	if !a.Nodes || !a.Record || !a.Events {
		failover.Needs = FeatureFencedDetach
	}
	checks := []FeatureCheck{detach, failover}
	for _, f := range []struct {
		name   string
		wanted bool
		runs   bool
		rules  []rbacv1.PolicyRule
		grant  string
	}{
		{FeaturePowerFencing, w.Power, a.Power, PowerRules,
			"ClusterRole csi-fence-attacher-power-runner (deploy/kubernetes/power-fencing; the chart's features.powerFencing)"},
		{FeatureMachineFencing, w.Machine, a.Failover, MachineRules,
			"ClusterRole csi-fence-attacher-machine-fencing (deploy/kubernetes/machine-fencing)"},
	} {
		own := missing(f.rules)
		c := FeatureCheck{Feature: f.name, Wanted: f.wanted, Runs: f.runs && len(own) == 0, Missing: own, Grant: f.grant,
			Consequence: "its backend is skipped: nodes are fenced by the other --fencing-backends only"}
		if !a.Failover {
			c.Needs = FeatureFailover
		}
		checks = append(checks, c)
	}
	return checks
}

// FeatureRuns reports whether the checks say feature runs.
func FeatureRuns(checks []FeatureCheck, feature string) bool {
	for _, c := range checks {
		if c.Feature == feature {
			return c.Runs
		}
	}
	return false
}

// FeaturesChanged reports whether two preflights differ in what they
// report: a feature's state, what it lacks or what it needs.
func FeaturesChanged(before, after []FeatureCheck) bool {
	return !slices.EqualFunc(before, after, func(a, b FeatureCheck) bool {
		return a.Feature == b.Feature && a.state() == b.state() && slices.Equal(a.Missing, b.Missing) && a.Needs == b.Needs
	})
}

// state is a check's one-word state for the start-up summary.
func (c FeatureCheck) state() string {
	switch {
	case c.Runs && len(c.Missing) == 0:
		return "on"
	case c.Runs:
		return "on, limited"
	case !c.Wanted:
		return "off"
	}
	return "off: missing permissions"
}

// ReportFeatures says at start which features run, and, for each feature
// the flags enable that lacks permissions, which ones and where they are
// granted: a warning line, and a Warning Event on the driver's CSIDriver
// where Events may be posted. A feature that cannot run is left out and
// the sidecar goes on with the others, as external-attacher goes on
// without what its RBAC does not grant: exiting would stop every attach
// and detach of the driver for want of an optional part.
//
// events is nil, or posts the Events: only where a.Events says they may be.
func ReportFeatures(logger klog.Logger, events record.EventRecorder, a Access, driver string, checks []FeatureCheck) {
	if !a.Events {
		events = nil
	}
	summary := make([]any, 0, 2*len(checks))
	for _, c := range checks {
		summary = append(summary, c.Feature, c.state())
	}
	logger.Info("Features of the controller role", summary...)
	ref := &v1.ObjectReference{Kind: "CSIDriver", APIVersion: "storage.k8s.io/v1", Name: driver}
	for _, c := range checks {
		if !c.Wanted || len(c.Missing) == 0 && c.Needs == "" {
			continue
		}
		var perms []string
		for _, p := range c.Missing {
			perms = append(perms, p.String())
		}
		kv := []any{"feature", c.Feature}
		msg := fmt.Sprintf("%s: %s", c.Feature, c.Consequence)
		if len(perms) > 0 {
			kv = append(kv, "missingPermissions", perms, "grant", c.Grant)
			msg += fmt.Sprintf("; the ServiceAccount lacks %s: grant %s", strings.Join(perms, ", "), c.Grant)
		}
		if c.Needs != "" {
			kv = append(kv, "needs", c.Needs)
			msg += fmt.Sprintf("; it needs %s, which cannot run", c.Needs)
		}
		kv = append(kv, "consequence", c.Consequence)
		logger.Info("Warning: a feature the flags enable lacks permissions", kv...)
		if events != nil {
			events.Event(ref, v1.EventTypeWarning, EventReasonMissingPermissions, msg)
		}
	}
}

// NewStartupRecorder is the recorder of the start-up Events, on the
// CSIDriver of driver.
func NewStartupRecorder(ctx context.Context, client kubernetes.Interface, driver string) record.EventRecorder {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events(v1.NamespaceAll)})
	return b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "csi-fence-attacher " + driver})
}
