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

package manifestcheck

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
)

// rbac is the RBAC found in the manifests: what a ServiceAccount is
// granted by them, as the apiserver's authorizer would grant it.
type rbac struct {
	clusterRoles map[string][]rbacv1.PolicyRule
	roles        map[string][]rbacv1.PolicyRule // by namespace/name
	crbs         []rbacv1.ClusterRoleBinding
	rbs          []rbacv1.RoleBinding
}

func readRBAC(objs []*unstructured.Unstructured, defaultNamespace string) (*rbac, error) {
	r := &rbac{clusterRoles: map[string][]rbacv1.PolicyRule{}, roles: map[string][]rbacv1.PolicyRule{}}
	conv := runtime.DefaultUnstructuredConverter
	for _, o := range objs {
		if o.GroupVersionKind().Group != rbacv1.GroupName {
			continue
		}
		ns := o.GetNamespace()
		if ns == "" {
			ns = defaultNamespace
		}
		var err error
		switch o.GetKind() {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err = conv.FromUnstructured(o.Object, &cr); err == nil {
				r.clusterRoles[cr.Name] = cr.Rules
			}
		case "Role":
			var role rbacv1.Role
			if err = conv.FromUnstructured(o.Object, &role); err == nil {
				r.roles[ns+"/"+role.Name] = role.Rules
			}
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err = conv.FromUnstructured(o.Object, &b); err == nil {
				r.crbs = append(r.crbs, b)
			}
		case "RoleBinding":
			var b rbacv1.RoleBinding
			if err = conv.FromUnstructured(o.Object, &b); err == nil {
				b.Namespace = ns
				r.rbs = append(r.rbs, b)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return r, nil
}

func (r *rbac) empty() bool { return len(r.crbs) == 0 && len(r.rbs) == 0 }

// names reports whether a binding's subjects include the ServiceAccount.
func names(subjects []rbacv1.Subject, bindingNS string, sa serviceAccount) bool {
	for _, s := range subjects {
		ns := s.Namespace
		if ns == "" {
			ns = bindingNS // a RoleBinding's subject defaults to its namespace
		}
		if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa.Name && ns == sa.Namespace {
			return true
		}
	}
	return false
}

// granted is what sa may do in namespace (cluster-wide grants and those
// of the RoleBindings there).
func (r *rbac) granted(sa serviceAccount, namespace string) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, b := range r.crbs {
		if names(b.Subjects, "", sa) && b.RoleRef.Kind == "ClusterRole" {
			out = append(out, r.clusterRoles[b.RoleRef.Name]...)
		}
	}
	for _, b := range r.rbs {
		if b.Namespace != namespace || !names(b.Subjects, b.Namespace, sa) {
			continue
		}
		if b.RoleRef.Kind == "ClusterRole" {
			out = append(out, r.clusterRoles[b.RoleRef.Name]...)
		} else {
			out = append(out, r.roles[b.Namespace+"/"+b.RoleRef.Name]...)
		}
	}
	return out
}

// boundInstead says to whom the bindings that would grant needed in
// namespace are bound: the ServiceAccounts a misnamed identity went to.
func (r *rbac) boundInstead(needed []rbacv1.PolicyRule, namespace string) string {
	var out []string
	add := func(kind, name string, subjects []rbacv1.Subject, bindingNS string) {
		for _, s := range subjects {
			if s.Kind != rbacv1.ServiceAccountKind {
				continue
			}
			ns := s.Namespace
			if ns == "" {
				ns = bindingNS
			}
			out = append(out, fmt.Sprintf("%s %s binds %s/%s", kind, name, ns, s.Name))
		}
	}
	helps := func(rules []rbacv1.PolicyRule) bool {
		_, uncovered := validation.Covers(rules, needed)
		return len(uncovered) < len(needed) || len(needed) == 0
	}
	for _, b := range r.crbs {
		if helps(r.clusterRoles[b.RoleRef.Name]) {
			add("ClusterRoleBinding", b.Name, b.Subjects, "")
		}
	}
	for _, b := range r.rbs {
		rules := r.roles[b.Namespace+"/"+b.RoleRef.Name]
		if b.RoleRef.Kind == "ClusterRole" {
			rules = r.clusterRoles[b.RoleRef.Name]
		}
		if b.Namespace == namespace && helps(rules) {
			add("RoleBinding", b.Namespace+"/"+b.Name, b.Subjects, b.Namespace)
		}
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ", ")
}

// missing lists what rules does not grant of needed, as RBAC writes it.
func missing(rules, needed []rbacv1.PolicyRule) []string {
	_, uncovered := validation.Covers(rules, needed)
	var out []string
	for _, u := range uncovered {
		for _, res := range u.Resources {
			g := ""
			if len(u.APIGroups) > 0 && u.APIGroups[0] != "" {
				g = "." + u.APIGroups[0]
			}
			for _, v := range u.Verbs {
				out = append(out, v+" "+res+g)
			}
		}
	}
	return slices.Compact(out)
}

// serviceAccount is who a pod runs as.
type serviceAccount struct{ Namespace, Name string }

func (s serviceAccount) String() string { return s.Namespace + "/" + s.Name }

func podServiceAccount(w Workload, defaultNamespace string) serviceAccount {
	sa := serviceAccount{Namespace: w.Namespace, Name: w.Spec.ServiceAccountName}
	if sa.Namespace == "" {
		sa.Namespace = defaultNamespace
	}
	if sa.Name == "" {
		sa.Name = "default"
	}
	return sa
}

// identityFix is how the driver's identities are named to the install.
func identityFix(role string, sa serviceAccount) string {
	key, helm := "controllerServiceAccount", "controller.serviceAccount"
	if role == "node" {
		key, helm = "nodeServiceAccount", "nodeAgent.serviceAccount"
	}
	return fmt.Sprintf("name the driver's ServiceAccount: kustomize, in the ConfigMap csi-fence-driver: {namespace: %s, %s: %s}; Helm, csi-fence's values: driver.namespace=%s, %s={create: false, name: %s}",
		sa.Namespace, key, sa.Name, sa.Namespace, helm, sa.Name)
}

// podNamespaceRef resolves a $(VAR) the container sets from its pod's
// namespace (fieldRef metadata.namespace, as GCE PD's chart passes
// --leader-election-namespace=$(PDCSI_NAMESPACE)).
func podNamespaceRef(v string, c corev1.Container, podNS string) string {
	m := envRef.FindStringSubmatch(v)
	if m == nil || m[0] != v {
		return v
	}
	for _, e := range c.Env {
		if e.Name == m[1] && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			return podNS
		}
	}
	return v
}

// boolArg reads a bool flag: --name, --name=true.
func boolArg(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || a == name+"=true" {
			return true
		}
	}
	return false
}

// failoverGate reports whether --feature-gates turns the failover on. The
// flag may be given more than once (EBS's chart sets one gate of its own,
// the user adds ours): each adds to the others, the last value of a gate
// wins.
func failoverGate(args []string) bool {
	on := false
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		v, ok := strings.CutPrefix(a, "feature-gates=")
		if a == "feature-gates" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if !ok {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			switch strings.TrimSpace(kv) {
			case contract.NonGracefulFailoverGate + "=true":
				on = true
			case contract.NonGracefulFailoverGate + "=false":
				on = false
			}
		}
	}
	return on
}

// checkControllerRBAC says what the controller's ServiceAccount lacks for
// each feature its arguments enable, as the sidecar's preflight would say
// at start (the same rule sets, pkg/sidecar/access.go), and the failover's
// RBAC granted without its gate.
func checkControllerRBAC(s Sidecar, r *rbac, defaultNamespace string) []string {
	sa := podServiceAccount(s.Workload, defaultNamespace)
	where := fmt.Sprintf("%s: csi-fence-attacher %q runs as ServiceAccount %s", s.Workload, s.Container.Name, sa)
	args := s.Container.Args
	var errs []string
	cluster := r.granted(sa, "")
	fenced := slices.Concat(sidecar.AttacherRules, sidecar.NodeRules, sidecar.RecordRules, sidecar.EventRules)
	if m := missing(cluster, fenced); len(m) > 0 {
		instead := r.boundInstead(fenced, "")
		if instead == "" {
			instead = "no binding in the input grants them"
		}
		errs = append(errs, fmt.Sprintf("%s, which is not granted %s: it would attach as external-attacher and never fence (%s). Fix: %s",
			where, strings.Join(m, ", "), instead, identityFix("controller", sa)))
	}
	if boolArg(args, "leader-election") {
		ns, ok := argValue(args, "leader-election-namespace")
		if ok {
			ns = podNamespaceRef(expand(ns, s.Container), s.Container, sa.Namespace)
		} else {
			ns = sa.Namespace
		}
		if m := missing(r.granted(sa, ns), sidecar.LeaderElectionRules); len(m) > 0 {
			instead := r.boundInstead(sidecar.LeaderElectionRules, ns)
			if instead == "" {
				instead = "no RoleBinding in " + ns + " grants them"
			}
			errs = append(errs, fmt.Sprintf("%s, which may not %s in namespace %s (its leader election's Lease): no replica would ever lead (%s). Fix: the Role csi-fence-attacher-cfg and its RoleBinding belong in %s; %s",
				where, strings.Join(m, ", "), ns, instead, ns, identityFix("controller", sa)))
		}
	}
	storm, ok := argValue(args, "storm-guard-namespace")
	if !ok {
		storm = sidecar.DefaultStormGuardNamespace
	}
	failoverGranted := len(missing(r.granted(sa, storm), sidecar.FailoverRules)) == 0
	switch gate := failoverGate(args); {
	case gate && !failoverGranted:
		m := missing(r.granted(sa, storm), sidecar.FailoverRules)
		errs = append(errs, fmt.Sprintf("%s with --feature-gates=%s=true, but it is not granted %s (in namespace %s for the Leases): the failover would stay off. Fix: add the component deploy/kubernetes/failover (Helm: features.failover=true), bound to this ServiceAccount; its Role csi-fence-attacher-cluster-leases must stay in %s",
			where, contract.NonGracefulFailoverGate, strings.Join(m, ", "), storm, storm))
	case !gate && failoverGranted:
		errs = append(errs, fmt.Sprintf("%s and is granted the failover's RBAC, but its arguments lack --feature-gates=%s=true: the failover would stay off. Fix: add that argument to container %q (a JSON patch adding it to its args; Helm: features.failover=true renders it, and on the driver chart's own attacher image value add it to the chart's attacher arguments), or leave the failover's RBAC out",
			where, contract.NonGracefulFailoverGate, s.Container.Name))
	}
	if b, _ := argValue(args, "fencing-backends"); slices.Contains(strings.Split(b, ","), "power") {
		if m := missing(r.granted(sa, storm), sidecar.PowerRules); len(m) > 0 {
			errs = append(errs, fmt.Sprintf("%s with --fencing-backends naming power, but it is not granted %s. Fix: add the component deploy/kubernetes/power-fencing (Helm: features.powerFencing=true)",
				where, strings.Join(m, ", ")))
		}
	}
	return errs
}

// checkNodeAgentRBAC says what a node agent's ServiceAccount lacks.
func checkNodeAgentRBAC(s Sidecar, r *rbac, defaultNamespace string) []string {
	sa := podServiceAccount(s.Workload, defaultNamespace)
	m := missing(r.granted(sa, ""), sidecar.NodeAgentRules)
	if len(m) == 0 {
		return nil
	}
	instead := r.boundInstead(sidecar.NodeAgentRules, "")
	if instead == "" {
		instead = "no binding in the input grants them"
	}
	return []string{fmt.Sprintf("%s: node agent %q runs as ServiceAccount %s, which is not granted %s: it could never clean a fenced node, which would stay quarantined (%s). Fix: %s",
		s.Workload, s.Container.Name, sa, strings.Join(m, ", "), instead, identityFix("node", sa))}
}
