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
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/component-helpers/auth/rbac/validation"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"
)

// rulesOf returns the rules of every ClusterRole and Role in a manifest.
func rulesOf(t *testing.T, path string) []rbacv1.PolicyRule {
	t.Helper()
	return rulesIn(t, path, "")
}

// rulesIn returns the rules a ServiceAccount bound to everything in a
// manifest has in namespace: the ClusterRoles' and those of the Roles there
// (every Role: "").
func rulesIn(t *testing.T, path, namespace string) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	for _, doc := range strings.Split(string(b), "\n---") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if obj.Kind == "ClusterRole" || obj.Kind == "Role" && (namespace == "" || obj.Metadata.Namespace == namespace) {
			rules = append(rules, obj.Rules...)
		}
	}
	return rules
}

const (
	ourRBAC   = "../../deploy/kubernetes/base/rbac-controller.yaml"
	stockRBAC = "testdata/external-attacher-rbac.yaml"
)

func TestAccessFrom(t *testing.T) {
	nodes := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	}
	tests := []struct {
		name         string
		rules        []rbacv1.PolicyRule
		recordServed bool
		want         Access
		wantMissing  []string // each must be listed
	}{
		{name: "deploy/'s ClusterRole and Roles grant everything", rules: rulesOf(t, ourRBAC), recordServed: true, want: FullAccess},
		// CheckAccess asks in --storm-guard-namespace, kube-system by
		// default: the failover's Leases are granted there.
		{name: "deploy/'s RBAC in the default storm-guard namespace", rules: rulesIn(t, ourRBAC, DefaultStormGuardNamespace), recordServed: true, want: FullAccess},
		{name: "deploy/'s RBAC in a namespace without its Roles: no failover", rules: rulesIn(t, ourRBAC, "elsewhere"), recordServed: true,
			want: Access{Nodes: true, Record: true, Events: true}, wantMissing: []string{"create leases.coordination.k8s.io", "update leases.coordination.k8s.io"}},
		{name: "deploy/'s RBAC without the CRD: no record, no failover", rules: rulesOf(t, ourRBAC), want: Access{Nodes: true, Events: true}},
		{name: "external-attacher's stock RBAC: nothing of the fence", rules: rulesOf(t, stockRBAC), recordServed: true,
			wantMissing: []string{"get nodes", "list nodes", "watch nodes", "create fencingrequests.fencing.csi-fence.io",
				"update fencingrequests/status.fencing.csi-fence.io", "create events", "delete pods", "patch nodes/status"}},
		{name: "stock RBAC and Nodes: fences decided, not recorded, so not sent", rules: append(rulesOf(t, stockRBAC), nodes...), recordServed: true,
			want: Access{Nodes: true}, wantMissing: []string{"create fencingrequests.fencing.csi-fence.io"}},
		{name: "stock RBAC and Nodes without the node's pods: the attacher decides nothing", rules: append(rulesOf(t, stockRBAC), nodes[0]), recordServed: true,
			wantMissing: []string{"list pods"}},
		{name: "cluster-admin", rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}, recordServed: true, want: FullAccess},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := accessFrom(tc.rules, tc.recordServed)
			missing := got.Missing
			got.Missing = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%+v, want %+v", got, tc.want)
			}
			for _, m := range tc.wantMissing {
				if !slices.Contains(missing, m) {
					t.Errorf("missing %q not reported in %q", m, missing)
				}
			}
			if reflect.DeepEqual(tc.want, FullAccess) && len(missing) > 0 {
				t.Errorf("reported missing %q", missing)
			}
		})
	}
}

// CheckAccess asks the API server with one SelfSubjectRulesReview; when it
// cannot answer, deploy/'s RBAC is assumed, as before the check existed.
func TestCheckAccess(t *testing.T) {
	stock := rulesOf(t, stockRBAC)
	tests := []struct {
		name     string
		status   authorizationv1.SubjectRulesReviewStatus
		err      error
		allowAll bool // every SelfSubjectAccessReview allows
		want     Access
	}{
		{name: "stock RBAC", status: reviewStatus(stock), want: Access{}},
		{name: "deploy/'s RBAC", status: reviewStatus(rulesOf(t, ourRBAC)), want: FullAccess},
		// An incomplete review: what it does not show is asked one
		// permission at a time (allowAll: every answer allows).
		{name: "incomplete answer, every permission allowed when asked", status: authorizationv1.SubjectRulesReviewStatus{Incomplete: true, EvaluationError: "webhook"}, allowAll: true, want: FullAccess},
		{name: "incomplete answer, nothing allowed when asked", status: authorizationv1.SubjectRulesReviewStatus{Incomplete: true, EvaluationError: "webhook"}, want: Access{}},
		{name: "incomplete answer, the stock rules listed", status: incomplete(reviewStatus(stock)), want: Access{}},
		{name: "incomplete answer, deploy/'s rules listed", status: incomplete(reviewStatus(rulesOf(t, ourRBAC))), want: FullAccess},
		{name: "review refused", err: errors.New("forbidden"), want: FullAccess},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewSimpleClientset()
			var ns string
			client.PrependReactor("create", "selfsubjectrulesreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
				r := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectRulesReview)
				ns = r.Spec.Namespace
				r.Status = tc.status
				return true, r, tc.err
			})
			client.PrependReactor("create", "selfsubjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
				r := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
				r.Status.Allowed = tc.allowAll
				return true, r, nil
			})
			got := CheckAccess(ctx, client, "csi-ns", true)
			got.Missing = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%+v, want %+v", got, tc.want)
			}
			if ns != "csi-ns" {
				t.Errorf("reviewed namespace %q, want the sidecar's", ns)
			}
		})
	}
}

func incomplete(s authorizationv1.SubjectRulesReviewStatus) authorizationv1.SubjectRulesReviewStatus {
	s.Incomplete, s.EvaluationError = true, "webhook"
	return s
}

func reviewStatus(rules []rbacv1.PolicyRule) authorizationv1.SubjectRulesReviewStatus {
	var s authorizationv1.SubjectRulesReviewStatus
	for _, r := range rules {
		s.ResourceRules = append(s.ResourceRules, authorizationv1.ResourceRule{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
	}
	return s
}

// rolesIn returns the rules of each ClusterRole and Role in a manifest, by
// "Kind/name".
func rolesIn(t *testing.T, path string) map[string][]rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, doc := range strings.Split(string(b), "\n---") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if obj.Kind == "ClusterRole" || obj.Kind == "Role" {
			roles[obj.Kind+"/"+obj.Metadata.Name] = obj.Rules
		}
	}
	return roles
}

// equivalent says whether two rule sets grant exactly the same, and what
// each grants that the other does not.
func equivalent(a, b []rbacv1.PolicyRule) (bool, []rbacv1.PolicyRule, []rbacv1.PolicyRule) {
	okAB, notInA := validation.Covers(a, b)
	okBA, notInB := validation.Covers(b, a)
	return okAB && okBA, notInB, notInA
}

func concat(sets ...[]rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, s := range sets {
		out = append(out, s...)
	}
	return out
}

const deployDir = "../../deploy/kubernetes/"

// Each feature's roles in deploy/kubernetes grant exactly what the
// sidecar's access check needs for that feature, nothing more, and a
// ServiceAccount bound to the roles of the features enabled so far gets
// exactly those features.
func TestFeatureRolesAreExactlyTheirRuleSets(t *testing.T) {
	base := rolesIn(t, deployDir+"base/rbac-attacher.yaml")
	failover := rolesIn(t, deployDir+"failover/rbac.yaml")
	power := rolesIn(t, deployDir+"power-fencing/rbac.yaml")
	stock := rolesIn(t, stockRBAC)

	fencedDetach := base["ClusterRole/csi-fence-attacher-runner"]
	failoverRoles := concat(failover["ClusterRole/csi-fence-attacher-failover-runner"], failover["Role/csi-fence-attacher-cluster-leases"])
	powerRole := power["ClusterRole/csi-fence-attacher-power-runner"]
	tests := []struct {
		name        string
		role, needs []rbacv1.PolicyRule
	}{
		{"fenced detach: base's ClusterRole", fencedDetach, concat(AttacherRules, NodeRules, RecordRules, EventRules)},
		{"failover: its ClusterRole and the Role of the cluster-wide Leases", failoverRoles, FailoverRules},
		{"power fencing: its ClusterRole", powerRole, PowerRules},
		{"leader election: base's Role", base["Role/csi-fence-attacher-cfg"], LeaderElectionRules},
		{"node agent: rbac-node's ClusterRole", rolesIn(t, deployDir+"base/rbac-node.yaml")["ClusterRole/csi-fence-attacher-node"], NodeAgentRules},
		// What external-attacher's controller uses is within what
		// external-attacher itself is granted, Lease included.
		{"the attacher's part of the fenced detach is within external-attacher's runner",
			concat(AttacherRules, stock["ClusterRole/external-attacher-runner"]), stock["ClusterRole/external-attacher-runner"]},
		{"the leader election Role is within external-attacher's",
			concat(base["Role/csi-fence-attacher-cfg"], stock["Role/external-attacher-cfg"]), stock["Role/external-attacher-cfg"]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.role) == 0 {
				t.Fatal("no such role")
			}
			if ok, extra, lacking := equivalent(tc.role, tc.needs); !ok {
				t.Errorf("the role grants more than needed: %v\nthe role lacks: %v", extra, lacking)
			}
		})
	}

	// Bound feature by feature, as the kustomize components bind them.
	grants := []struct {
		name  string
		rules []rbacv1.PolicyRule
		want  Access
	}{
		{"base alone: fenced detach", fencedDetach, Access{Nodes: true, Record: true, Events: true}},
		{"failover alone does nothing without base", failoverRoles, Access{}},
		{"base and failover", concat(fencedDetach, failoverRoles), Access{Nodes: true, Record: true, Events: true, Failover: true}},
		{"base, failover and power fencing", concat(fencedDetach, failoverRoles, powerRole), FullAccess},
		{"power without failover", concat(fencedDetach, powerRole), Access{Nodes: true, Record: true, Events: true}},
	}
	for _, g := range grants {
		t.Run(g.name, func(t *testing.T) {
			got := accessFrom(g.rules, true)
			got.Missing = nil
			if !reflect.DeepEqual(got, g.want) {
				t.Errorf("%+v, want %+v", got, g.want)
			}
		})
	}
}
