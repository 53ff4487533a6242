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

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/auth/rbac/validation"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// What the controller role needs, by the feature it enables. Each feature's
// ClusterRole in deploy/kubernetes grants exactly its sets, no more (tested):
// the fenced detach (base/rbac-attacher.yaml) AttacherRules, NodeRules,
// RecordRules and EventRules; the failover (failover/rbac.yaml)
// FailoverRules; power fencing (power-fencing/rbac.yaml) PowerRules.
// base/rbac-controller.yaml is all of them.
var (
	// AttacherRules are what external-attacher's controller uses, which
	// runs here unmodified: a subset of its own external-attacher-runner
	// (objects read through informers need list and watch, not get). Not
	// checked at start: without them nothing works, as for external-attacher.
	AttacherRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"list", "watch", "patch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"list", "watch", "patch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments/status"}, Verbs: []string{"patch"}},
	}
	// NodeRules let the attacher tell a graceful detach from one that must
	// be fenced, and see the quarantine taint: the Node, and the node's pods
	// when its kubelet reports the volume in use (a pod there may want it).
	NodeRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	}
	// RecordRules let the attacher record its fences (write-ahead, S8) and
	// read the record; without them it never fences.
	RecordRules = []rbacv1.PolicyRule{
		{APIGroups: []string{contract.FencingGroup}, Resources: []string{contract.FencingResource}, Verbs: []string{"get", "list", "watch", "create", "update"}},
		{APIGroups: []string{contract.FencingGroup}, Resources: []string{contract.FencingResource + "/status"}, Verbs: []string{"update"}},
	}
	// EventRules let the sidecar post Events; without them they are logged.
	EventRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	// FailoverRules are what the failover controller needs besides the
	// above: node taints and conditions, the namespaces' failover label, the
	// pod GC, the volumes of pods, the drivers' SafeDetach, node heartbeats,
	// its Leases (in --storm-guard-namespace, where CheckAccess asks) and the
	// record's deletion.
	FailoverRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"delete"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csidrivers"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
		{APIGroups: []string{contract.FencingGroup}, Resources: []string{contract.FencingResource}, Verbs: []string{"delete"}},
	}
	// PowerRules let the failover controller power-fence nodes: read the
	// FenceAgentConfigs (cluster-scoped) and the Secrets they name (used
	// only if labelled as fence agent credentials: RBAC cannot say so).
	PowerRules = []rbacv1.PolicyRule{
		{APIGroups: []string{contract.FencingGroup}, Resources: []string{contract.FenceAgentConfigResource}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
	}
	// LeaderElectionRules are client-go's Lease lock, external-attacher's
	// leader election on the driver's Lease (--leader-election), in
	// --leader-election-namespace or the pod's (base/rbac-attacher.yaml's
	// Role csi-fence-attacher-cfg). Not checked at start: external-attacher
	// does not either, and without them no replica ever leads.
	LeaderElectionRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
	// NodeAgentRules are what the node role needs (base/rbac-node.yaml):
	// read its node's FencingRequest, record the cleanup, post Events, and
	// read the CSINodes live to clean a volume fenced under its node's
	// previous CSI node ID, read a driver's CSIDriver live to clean a
	// volume its detach fenced (contract.UnpublishRevokesAccessAnnotation),
	// list its node's pods live: a pod still there keeps its publish
	// directories, which only the kubelet may remove; and read its Node
	// live: a block volume its kubelet still lists in use keeps its
	// directory, which the kubelet's unmap needs.
	NodeAgentRules = []rbacv1.PolicyRule{
		{APIGroups: []string{contract.FencingGroup}, Resources: []string{contract.FencingResource}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{contract.FencingGroup}, Resources: []string{contract.FencingResource + "/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csidrivers"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
	}
)

// Access is what the controller role may do, as far as fencing goes.
type Access struct {
	// Nodes: NodeRules granted; the attacher decides fences.
	Nodes bool
	// Record: the FencingRequest API is served and RecordRules granted;
	// the attacher records and sends fences.
	Record bool
	// Events: EventRules granted.
	Events bool
	// Failover: all of the above and FailoverRules granted.
	Failover bool
	// Power: PowerRules granted; the failover may power-fence.
	Power bool
	// Missing lists, for each rule set, the verbs that are not granted
	// ("list nodes"), for the one message that says so.
	Missing []string
}

// FullAccess is what a caller that cannot or need not check assumes.
var FullAccess = Access{Nodes: true, Record: true, Events: true, Failover: true, Power: true}

// CheckAccess asks the API server what the sidecar's user may do in
// namespace (--storm-guard-namespace: the failover's Leases live there), with one
// SelfSubjectRulesReview, which every authenticated user may create. When
// the review is incomplete (an authorizer that cannot list its rules, such
// as a webhook), each permission it does not show is asked of every
// authorizer with a SelfSubjectAccessReview. When the review itself fails,
// everything is assumed granted, as before this check existed: a missing
// verb then shows as caches that do not sync (SyncHealth).
func CheckAccess(ctx context.Context, client kubernetes.Interface, namespace string, recordServed bool) Access {
	a, _ := Preflight(ctx, client, namespace, recordServed, Wanted{})
	return a
}

// Preflight is CheckAccess, and what each feature lacks (Access.Checks)
// from the same review: the features w says the flags enable are those
// whose lacks ReportFeatures reports as warnings.
func Preflight(ctx context.Context, client kubernetes.Interface, namespace string, recordServed bool, w Wanted) (Access, []FeatureCheck) {
	logger := klog.FromContext(ctx)
	review, err := client.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace},
	}, metav1.CreateOptions{})
	if err != nil {
		logger.Info("Cannot tell which permissions the sidecar has; assuming those of deploy/kubernetes/base/rbac-controller.yaml", "reason", err.Error())
		a := FullAccess
		a.Record = recordServed
		a.Failover = recordServed
		a.Power = recordServed
		return a, a.checks(nil, false, w, namespace)
	}
	granted := grantedRules(review.Status.ResourceRules)
	if review.Status.Incomplete {
		// Another authorizer (a webhook) cannot list its rules: the
		// review holds RBAC's only. What they do not cover is asked of
		// every authorizer, one permission at a time; what no answer
		// grants is taken as missing, never as granted.
		logger.V(2).Info("The permission review is incomplete; asking for each permission it does not show", "reason", review.Status.EvaluationError)
		granted = append(granted, allowed(ctx, client, namespace, granted)...)
	}
	a := accessFrom(granted, recordServed)
	return a, a.checks(granted, true, w, namespace)
}

// allowed asks the API server, with a SelfSubjectAccessReview each, for the
// permissions of every feature that granted does not cover, and returns
// those it allows. One it cannot answer is not returned.
func allowed(ctx context.Context, client kubernetes.Interface, namespace string, granted []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	_, uncovered := validation.Covers(granted, slices.Concat(AttacherRules, NodeRules, RecordRules, EventRules, FailoverRules, PowerRules, MachineRules))
	var out []rbacv1.PolicyRule
	for _, r := range uncovered {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				resource, sub, _ := strings.Cut(res, "/")
				for _, v := range r.Verbs {
					review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
						Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
							Namespace: namespace, Verb: v, Group: g, Resource: resource, Subresource: sub}},
					}, metav1.CreateOptions{})
					if err != nil {
						klog.FromContext(ctx).V(2).Info("Cannot tell whether a permission is granted; taken as missing", "verb", v, "group", g, "resource", res, "err", err)
						continue
					}
					if review.Status.Allowed {
						out = append(out, rbacv1.PolicyRule{Verbs: []string{v}, APIGroups: []string{g}, Resources: []string{res}})
					}
				}
			}
		}
	}
	return out
}

// accessFrom decides Access from the rules granted.
func accessFrom(granted []rbacv1.PolicyRule, recordServed bool) Access {
	var a Access
	missing := func(needed []rbacv1.PolicyRule) bool {
		ok, uncovered := validation.Covers(granted, needed)
		for _, r := range uncovered {
			for _, v := range r.Verbs {
				for _, res := range r.Resources {
					s := v + " " + res
					if len(r.APIGroups) > 0 && r.APIGroups[0] != "" {
						s += "." + r.APIGroups[0]
					}
					if !slices.Contains(a.Missing, s) {
						a.Missing = append(a.Missing, s)
					}
				}
			}
		}
		return !ok
	}
	a.Nodes = !missing(NodeRules)
	a.Record = !missing(RecordRules) && recordServed
	a.Events = !missing(EventRules)
	a.Failover = !missing(FailoverRules) && a.Nodes && a.Record && a.Events
	a.Power = !missing(PowerRules) && a.Failover
	return a
}

func grantedRules(rules []authorizationv1.ResourceRule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(rules))
	for _, r := range rules {
		out = append(out, rbacv1.PolicyRule{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
	}
	return out
}

// Report says once what the sidecar will not do and why: which verbs
// fencing needs that the ServiceAccount lacks, or that the FencingRequest
// CRD is not installed.
func (a Access) Report(logger klog.Logger, recordServed bool) {
	var off []string
	switch {
	case !a.Nodes:
		off = append(off, "no detach is fenced and no publish refused for quarantine (the attacher cannot tell a failed node from a healthy one): it attaches and detaches as external-attacher does")
	case !a.Record:
		off = append(off, "no detach is fenced (a fence that cannot be recorded could never be lifted): a detach from a failed node is a plain unpublish, with a warning Event and csi_fence_unfenced_detaches_total")
	}
	if !a.Events {
		off = append(off, "Events are logged instead of posted")
	}
	if !a.Failover {
		off = append(off, "automatic failover is off")
	}
	if len(off) == 0 {
		return
	}
	kv := []any{"consequences", strings.Join(off, "; ")}
	if !recordServed {
		kv = append(kv, "crd", fmt.Sprintf("the FencingRequest CRD (%s.%s) is not installed: apply deploy/kubernetes/base", contract.FencingResource, contract.FencingGroup))
	}
	if len(a.Missing) > 0 {
		kv = append(kv, "missingPermissions", a.Missing, "grant", "the ClusterRole of deploy/kubernetes/base/rbac-attacher.yaml (fenced detach), and for the failover those of deploy/kubernetes/failover (with its Role csi-fence-attacher-cluster-leases in --storm-guard-namespace, kube-system by default) and for power fencing deploy/kubernetes/power-fencing")
	}
	logger.Info("Fencing is limited by what this ServiceAccount may do", kv...)
}
