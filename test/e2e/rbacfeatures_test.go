//go:build e2e

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

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// featureRole is a role of deploy/kubernetes as the product applied it: a
// ClusterRole, or a Role in its namespace.
type featureRole struct{ kind, name, namespace string }

// The roles each feature's kustomize component (and the chart's value)
// binds to the controller's ServiceAccount.
var (
	// base/rbac-attacher.yaml; the chart always.
	fencedDetachRoles = []featureRole{{"ClusterRole", "csi-fence-attacher-runner", ""}, {"Role", "csi-fence-attacher-cfg", "default"}}
	// failover/; the chart's features.failover.
	failoverRoles = []featureRole{{"ClusterRole", "csi-fence-attacher-failover-runner", ""}, {"Role", "csi-fence-attacher-cluster-leases", "kube-system"}}
	// power-fencing/; the chart's features.powerFencing.
	powerRoles = []featureRole{{"ClusterRole", "csi-fence-attacher-power-runner", ""}}
	// machine-fencing/.
	machineRoles = []featureRole{{"ClusterRole", "csi-fence-attacher-machine-fencing", ""}}
)

// withheld is one verb on one resource taken out of a feature's roles.
type withheld struct{ verb, group, resource string }

// permission is how the sidecar names it (sidecar.Permission).
func (w withheld) permission() string {
	return sidecar.Permission{Verb: w.verb, Group: w.group, Resource: w.resource}.String()
}

// grantOnly creates the ServiceAccount sa and binds to it copies of roles
// (named after sa, read from the cluster as the product applied them from
// deploy/), without the verb w names when w is not nil; it returns a
// kubeconfig with the ServiceAccount's token.
func grantOnly(ctx context.Context, t *testing.T, sa string, w *withheld, roles ...[]featureRole) string {
	t.Helper()
	rbac := cluster.Client.RbacV1()
	if _, err := cluster.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "default"}}
	removed := false
	for _, r := range slices.Concat(roles...) {
		name := sa + "-" + r.name
		var rules []rbacv1.PolicyRule
		if r.kind == "ClusterRole" {
			cr, err := rbac.ClusterRoles().Get(ctx, r.name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("ClusterRole %s of deploy/: %v", r.name, err)
			}
			rules = cr.Rules
		} else {
			role, err := rbac.Roles(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Role %s/%s of deploy/: %v", r.namespace, r.name, err)
			}
			rules = role.Rules
		}
		if w != nil {
			var cut bool
			rules, cut = withholdRule(rules, *w)
			removed = removed || cut
		}
		var err error
		if r.kind == "ClusterRole" {
			_, err = rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
			if err == nil {
				_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}, metav1.CreateOptions{})
			}
		} else {
			_, err = rbac.Roles(r.namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.namespace}, Rules: rules}, metav1.CreateOptions{})
			if err == nil {
				_, err = rbac.RoleBindings(r.namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.namespace}, Subjects: subjects,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}, metav1.CreateOptions{})
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if w != nil && !removed {
		t.Fatalf("no role of %v grants %s: nothing withheld", roles, w.permission())
	}
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, "default", sa)
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// withholdRule returns rules without verb w on w's resource (a rule that
// names more resources is split), and whether a rule granted it.
func withholdRule(rules []rbacv1.PolicyRule, w withheld) ([]rbacv1.PolicyRule, bool) {
	var out []rbacv1.PolicyRule
	cut := false
	for _, r := range rules {
		r = *r.DeepCopy()
		if slices.Contains(r.APIGroups, w.group) && slices.Contains(r.Resources, w.resource) && slices.Contains(r.Verbs, w.verb) {
			cut = true
			if len(r.Resources) > 1 {
				rest := *r.DeepCopy()
				rest.Resources = slices.DeleteFunc(rest.Resources, func(s string) bool { return s == w.resource })
				out = append(out, rest)
				r.Resources = []string{w.resource}
			}
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == w.verb })
			if len(r.Verbs) == 0 {
				continue
			}
		}
		out = append(out, r)
	}
	return out, cut
}

// sidecarRun is csi-fence-attacher restarted as one ServiceAccount.
type sidecarRun struct {
	t       *testing.T
	user    string
	started time.Time
}

// runAs restarts the product's csi-fence-attacher with the kubeconfig of sa
// (a ServiceAccount of the product's namespace) and extra flags, and waits
// for its start-up summary of the features (runAsUser).
func runAs(ctx context.Context, t *testing.T, sa, kubeconfig string, flags ...string) *sidecarRun {
	t.Helper()
	return runAsUser(ctx, t, productServiceAccounts+sa, kubeconfig, flags...)
}

// logs is what the sidecar logged since runAs restarted it.
func (r *sidecarRun) logs() string {
	b, err := product.Attacher.Output()
	if err != nil {
		r.t.Fatal(err)
	}
	return string(b)
}

// line returns the first line since the restart that contains s.
func (r *sidecarRun) line(s string) string {
	for _, l := range strings.Split(r.logs(), "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// expectStates checks the start-up summary: feature -> state.
func (r *sidecarRun) expectStates(want map[string]string) {
	r.t.Helper()
	summary := r.line("Features of the controller role")
	for f, s := range want {
		if !strings.Contains(summary, fmt.Sprintf("%s=%q", f, s)) {
			r.t.Errorf("the sidecar does not say %s=%q: %s", f, s, summary)
		}
	}
}

const warningLine = "Warning: a feature the flags enable lacks permissions"

// expectNoWarning checks that the sidecar warned about no feature.
func (r *sidecarRun) expectNoWarning() {
	r.t.Helper()
	if l := r.line(warningLine); l != "" {
		r.t.Errorf("the sidecar warned: %s", l)
	}
}

// expectWarned checks the warning line and the Warning Event on the
// driver's CSIDriver for feature, naming the permission withheld.
func (r *sidecarRun) expectWarned(ctx context.Context, feature string, w withheld) {
	r.t.Helper()
	perm := w.permission()
	var warnings []string
	for _, l := range strings.Split(r.logs(), "\n") {
		if strings.Contains(l, warningLine) {
			warnings = append(warnings, l)
		}
	}
	// klog quotes the list's strings: the group's quotes are escaped.
	if len(warnings) != 1 || !strings.Contains(warnings[0], `feature="`+feature+`"`) || !strings.Contains(warnings[0], strings.ReplaceAll(perm, `"`, `\"`)) {
		r.t.Errorf("want one warning for %s naming %s, got %q", feature, perm, warnings)
	}
	var found string
	err := framework.WaitFor(ctx, 30*time.Second, "the Warning Event on CSIDriver "+framework.DriverName, func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=CSIDriver,involvedObject.name=" + framework.DriverName + ",reason=" + sidecar.EventReasonMissingPermissions})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeWarning && strings.HasPrefix(e.Message, feature+": ") && strings.Contains(e.Message, perm) &&
				!e.LastTimestamp.Time.Before(r.started) {
				found = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		r.t.Error(err)
	}
	r.t.Logf("Event: %s", found)
}

// expectNoDenial checks the audit log: the apiserver denied the
// ServiceAccount nothing (a feature it could not run did not try).
func (r *sidecarRun) expectNoDenial() {
	r.t.Helper()
	rep, err := cluster.RBAC(r.user)
	if err != nil {
		r.t.Fatal(err)
	}
	if d := rep.Denied[r.user]; len(d) > 0 {
		r.t.Errorf("the apiserver denied %s: %v", r.user, d)
	}
}

// waitUsed waits until the audit log shows the ServiceAccount used each
// permission ("verb group/resource", framework.AuditEvent.Permission).
// client-go's informers list by a watch that sends the initial objects
// (WatchListClient, on by default): an informer shows as a watch only.
func (r *sidecarRun) waitUsed(ctx context.Context, perms ...string) {
	r.t.Helper()
	if err := framework.WaitFor(ctx, 60*time.Second, fmt.Sprintf("%s using %v", r.user, perms), func(context.Context) (bool, error) {
		rep, err := cluster.RBAC(r.user)
		if err != nil {
			return false, err
		}
		for _, p := range perms {
			if !slices.Contains(rep.Used[r.user], p) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		rep, _ := cluster.RBAC(r.user)
		r.t.Errorf("%v; used: %v", err, rep.Used[r.user])
	}
}

// expectNotUsed checks the ServiceAccount never used a permission.
func (r *sidecarRun) expectNotUsed(perm string) {
	r.t.Helper()
	rep, err := cluster.RBAC(r.user)
	if err != nil {
		r.t.Fatal(err)
	}
	if slices.Contains(rep.Used[r.user], perm) {
		r.t.Errorf("%s used %s", r.user, perm)
	}
}

// Issue 21 item 5 on the real apiserver. Each feature of the controller
// role runs with only its own roles bound (copies of deploy/'s, read from
// the cluster, bound to a ServiceAccount of its own, as the kustomize
// components and the chart's values bind them), the real csi-fence-attacher
// running with that ServiceAccount's token: the feature does its job, the
// apiserver denies it nothing, the sidecar warns of nothing. Then one rule
// a feature needs is withheld: the sidecar says which (verb, resource, API
// group) in a warning line and a Warning Event on the CSIDriver, leaves
// that feature out, and runs the others.
func TestRBACPerFeature(t *testing.T) {
	ctx := context.Background()
	t.Cleanup(func() {
		if err := product.RestartAttacher(context.Background()); err != nil {
			t.Errorf("restarting csi-fence-attacher with deploy/'s RBAC for the next tests: %v", err)
		}
	})
	gateOff := "--feature-gates=NonGracefulFailover=false"

	t.Run("fenced detach alone", func(t *testing.T) {
		r := runAs(ctx, t, "rbf-detach", grantOnly(ctx, t, "rbf-detach", nil, fencedDetachRoles), gateOff)
		r.expectStates(map[string]string{sidecar.FeatureFencedDetach: "on", sidecar.FeatureFailover: "off",
			sidecar.FeaturePowerFencing: "off", sidecar.FeatureMachineFencing: "off"})
		r.expectNoWarning()
		// Attached through the sidecar, then fenced on detach: the node
		// is powered off and the operator adds the out-of-service taint.
		env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "rbfd", 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		victim, err := env.WaitAttached(ctx, 0, "", 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rec := watchTimeline(t, env, victim, env.Volumes[0])
		if err := env.Failover(ctx, rec, scenario.FailoverOptions{OutOfServiceTaint: true}); err != nil {
			t.Fatal(err)
		}
		fr, err := fencingv1alpha1.NewClient(cluster.Dynamic).Get(ctx, victim)
		if err != nil {
			t.Fatalf("no FencingRequest recorded for %s: %v", victim, err)
		}
		if v := fencerecord.Find(fr, framework.DriverName, env.Volumes[0]); v == nil || v.FencedTime == nil {
			t.Errorf("the detach from %s was not recorded fenced: %+v", victim, fr.Status.Volumes)
		}
		// Only the fenced detach ran: no failover quarantined the node.
		if rec.Has(timeline.Quarantined) {
			t.Errorf("%s was quarantined: the failover ran without its roles", victim)
		}
		r.waitUsed(ctx, "create fencing.csi-fence.io/fencingrequests", "update fencing.csi-fence.io/fencingrequests/status")
		r.expectNoDenial()
		// The failover's pod watch (what the other cases take as the sign
		// that it runs) was never started.
		r.expectNotUsed("watch core/pods")
		// Back, so that a failover of a later test cleans it up.
		if err := cluster.RemoveTaint(ctx, victim, contract.OutOfServiceTaintKey); err != nil {
			t.Error(err)
		}
		if err := env.PowerOn(ctx, victim); err != nil {
			t.Error(err)
		}
		expectNoViolations(t)
	})

	t.Run("failover", func(t *testing.T) {
		r := runAs(ctx, t, "rbf-failover", grantOnly(ctx, t, "rbf-failover", nil, fencedDetachRoles, failoverRoles))
		// power is one of the default backends: without its roles it is
		// off, and not warned about (the admin did not ask for it).
		r.expectStates(map[string]string{sidecar.FeatureFencedDetach: "on", sidecar.FeatureFailover: "on",
			sidecar.FeaturePowerFencing: "off", sidecar.FeatureMachineFencing: "off"})
		r.expectNoWarning()
		env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "rbff", 3, 1)
		if err != nil {
			t.Fatal(err)
		}
		victim, err := env.WaitAttached(ctx, 0, "", 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rec := watchTimeline(t, env, victim, env.Volumes[0])
		if err := env.Failover(ctx, rec, scenario.FailoverOptions{Return: true}); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{timeline.Quarantined, timeline.StorageFenced, timeline.PodForceDeleted} {
			if !rec.Has(m) {
				t.Errorf("the failover never got to %q", m)
			}
		}
		r.waitUsed(ctx, "delete core/pods", "patch core/nodes", "update coordination.k8s.io/leases")
		r.expectNoDenial()
		expectNoViolations(t)
	})

	t.Run("power fencing", func(t *testing.T) {
		r := runAs(ctx, t, "rbf-power", grantOnly(ctx, t, "rbf-power", nil, fencedDetachRoles, failoverRoles, powerRoles),
			"--fencing-backends=storage,power,out-of-service")
		r.expectStates(map[string]string{sidecar.FeatureFencedDetach: "on", sidecar.FeatureFailover: "on", sidecar.FeaturePowerFencing: "on"})
		r.expectNoWarning()
		// The power backend loads a FenceAgentConfig and checks it with
		// its Secret (the reads a power fence makes), with these roles.
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rbf-bmc", Namespace: "kube-system",
			Labels: map[string]string{contract.FenceAgentCredentialsLabel: contract.FenceAgentCredentialsTrue}},
			Data: map[string][]byte{"user": []byte("admin"), "pass": []byte("rbf-Pa55word")}}
		if _, err := cluster.Client.CoreV1().Secrets("kube-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		cfg := &fencingv1alpha1.FenceAgentConfig{
			ObjectMeta: metav1.ObjectMeta{Name: "rbf-power"},
			Spec: fencingv1alpha1.FenceAgentConfigSpec{
				Agent: "fence_ipmilan",
				Credentials: &fencingv1alpha1.FenceAgentCredentials{SecretName: secret.Name, SecretNamespace: secret.Namespace,
					Parameters: map[string]string{"username": "user", "password": "pass"}},
				Nodes: []fencingv1alpha1.FenceAgentNode{{Name: "rbf-power-node", Parameters: map[string]string{"ip": "192.0.2.9"}}},
			},
		}
		u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res := cluster.Dynamic.Resource(fencingv1alpha1.FenceAgentConfigResource)
		if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = res.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })
		if err := framework.WaitFor(ctx, 60*time.Second, "the FenceAgentConfig checked with its Secret", func(context.Context) (bool, error) {
			return r.line("FenceAgentConfig checked") != "" && strings.Contains(r.line("FenceAgentConfig checked"), cfg.Name), nil
		}); err != nil {
			t.Fatalf("%v: %s", err, r.line("FenceAgentConfig"))
		}
		r.waitUsed(ctx, "watch fencing.csi-fence.io/fenceagentconfigs", "get core/secrets")
		r.expectNoDenial()
	})

	t.Run("machine fencing", func(t *testing.T) {
		installMachineAPI(ctx, t)
		if err := cluster.ApplyManifest(ctx, "deploy/kubernetes/machine-fencing/rbac-machine.yaml", ""); err != nil {
			t.Fatal(err)
		}
		r := runAs(ctx, t, "rbf-machine", grantOnly(ctx, t, "rbf-machine", nil, fencedDetachRoles, failoverRoles, machineRoles),
			"--fencing-backends=storage,machine")
		r.expectStates(map[string]string{sidecar.FeatureFencedDetach: "on", sidecar.FeatureFailover: "on", sidecar.FeatureMachineFencing: "on"})
		r.expectNoWarning()
		// The machine backend watches the Machines with these roles.
		r.waitUsed(ctx, "watch cluster.x-k8s.io/machines")
		r.expectNoDenial()
	})

	t.Run("failover without patching node status", func(t *testing.T) {
		w := withheld{"patch", "", "nodes/status"}
		r := runAs(ctx, t, "rbf-nofailover", grantOnly(ctx, t, "rbf-nofailover", &w, fencedDetachRoles, failoverRoles))
		r.expectStates(map[string]string{sidecar.FeatureFencedDetach: "on", sidecar.FeatureFailover: "off: missing permissions"})
		r.expectWarned(ctx, sidecar.FeatureFailover, w)
		// The rest runs: a volume is attached through the sidecar.
		env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "rbfn", 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.WaitAttached(ctx, 0, "", 60*time.Second); err != nil {
			t.Fatal(err)
		}
		r.expectNoDenial()
	})

	t.Run("power fencing without get secrets", func(t *testing.T) {
		w := withheld{"get", "", "secrets"}
		r := runAs(ctx, t, "rbf-nopower", grantOnly(ctx, t, "rbf-nopower", &w, fencedDetachRoles, failoverRoles, powerRoles),
			"--fencing-backends=storage,power,out-of-service")
		r.expectStates(map[string]string{sidecar.FeatureFailover: "on", sidecar.FeaturePowerFencing: "off: missing permissions"})
		r.expectWarned(ctx, sidecar.FeaturePowerFencing, w)
		// The failover runs without it: it watches the pods.
		r.waitUsed(ctx, "watch core/pods")
		r.expectNoDenial()
	})

	t.Run("machine fencing without delete machines", func(t *testing.T) {
		installMachineAPI(ctx, t)
		w := withheld{"delete", "cluster.x-k8s.io", "machines"}
		r := runAs(ctx, t, "rbf-nomachine", grantOnly(ctx, t, "rbf-nomachine", &w, fencedDetachRoles, failoverRoles, machineRoles),
			"--fencing-backends=storage,machine")
		r.expectStates(map[string]string{sidecar.FeatureFailover: "on", sidecar.FeatureMachineFencing: "off: missing permissions"})
		r.expectWarned(ctx, sidecar.FeatureMachineFencing, w)
		r.waitUsed(ctx, "watch core/pods")
		r.expectNoDenial()
	})

	t.Run("fenced detach without create fencingrequests", func(t *testing.T) {
		w := withheld{"create", contract.FencingGroup, contract.FencingResource}
		r := runAs(ctx, t, "rbf-norecord", grantOnly(ctx, t, "rbf-norecord", &w, fencedDetachRoles), gateOff)
		r.expectStates(map[string]string{sidecar.FeatureFencedDetach: "off: missing permissions", sidecar.FeatureFailover: "off"})
		r.expectWarned(ctx, sidecar.FeatureFencedDetach, w)
		env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "rbfr", 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.WaitAttached(ctx, 0, "", 60*time.Second); err != nil {
			t.Fatal(err)
		}
		r.expectNoDenial()
	})
}

// installMachineAPI installs Cluster API's CRDs (built and cached by
// hack/capi-binaries.sh) without its manager: the machine backend needs
// the Machine API served, not Machines.
func installMachineAPI(ctx context.Context, t *testing.T) {
	t.Helper()
	dir, err := framework.CAPIBinaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Cluster API CRDs in %s/crds: %v", dir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := framework.DecodeManifests(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := cluster.CreateObjects(ctx, objs, framework.ApplyOptions{}); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if err := framework.WaitFor(ctx, 30*time.Second, "Cluster API's Machines served", func(context.Context) (bool, error) {
		list, err := cluster.Client.Discovery().ServerResourcesForGroupVersion("cluster.x-k8s.io/v1beta2")
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "machines" }), nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A standby started before the failover's roles were bound to its
// ServiceAccount runs the failover once it leads: a replica checks its
// permissions again when it takes over, and runs the features granted
// then, not those of its start (a rolling update that adds a feature's
// roles beside the new pods, or roles applied after the Deployment).
func TestStandbyRunsTheFeaturesGrantedWhenItLeads(t *testing.T) {
	ctx := context.Background()
	const sa = "rbf-late"
	kubeconfig := grantOnly(ctx, t, sa, nil, fencedDetachRoles)
	standby, addr, err := product.StartStandbyAttacher(ctx, "--kubeconfig="+kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if product.Attacher != standby {
			standby.Stop(10 * time.Second)
		}
		if err := product.RestartAttacher(context.Background()); err != nil {
			t.Errorf("restarting csi-fence-attacher with deploy/'s RBAC for the next tests: %v", err)
		}
	})
	output := func() string {
		b, err := standby.Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	summaries := func() []string {
		var out []string
		for _, l := range strings.Split(output(), "\n") {
			if strings.Contains(l, "Features of the controller role") {
				out = append(out, l)
			}
		}
		return out
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "the standby's start-up summary of its features", func(context.Context) (bool, error) {
		return len(summaries()) > 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	if s := summaries()[0]; !strings.Contains(s, sidecar.FeatureFailover+`="off: missing permissions"`) {
		t.Fatalf("the standby's start-up summary: %s; want the failover off for missing permissions", s)
	}

	// The failover's roles are bound while it waits for the Lease: once
	// the authorizer grants them, the leader terminates.
	grantOnly(ctx, t, sa, nil, failoverRoles)
	if err := framework.WaitFor(ctx, 30*time.Second, "the failover's Lease rule granted to "+sa, func(ctx context.Context) (bool, error) {
		r, err := cluster.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: productServiceAccounts + sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: nodeFencingNamespace, Verb: "update", Group: "coordination.k8s.io", Resource: "leases"},
		}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, err
	}); err != nil {
		t.Fatal(err)
	}
	product.Attacher.Stop(30 * time.Second)
	product.Attacher, product.AttacherHTTP = standby, addr

	// It leads, and its failover runs: it holds the node-fencing Lease.
	holder := standby.Name + "_" + contract.SanitizeDriverName(product.Driver.Name)
	if err := framework.WaitFor(ctx, 60*time.Second, "the standby's failover holding the node-fencing Lease", func(ctx context.Context) (bool, error) {
		l, err := cluster.Client.CoordinationV1().Leases(nodeFencingNamespace).Get(ctx, contract.NodeFencingLeaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == holder, nil
	}); err != nil {
		t.Fatalf("%v; the standby said: %q", err, summaries())
	}
	s := summaries()
	if len(s) != 2 || !strings.Contains(s[1], sidecar.FeatureFailover+`="on"`) || !strings.Contains(output(), "changed while it waited to lead") {
		t.Errorf("want a second summary, with the failover on, said when it led: %q", s)
	}
}
