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

package kubernetes

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// The webhook's manifests render, fail open, send exactly the opted-in pods
// (the key the code reads), and carry each certificate story.
func TestPreStopWebhookRenders(t *testing.T) {
	for _, tc := range []struct {
		dir        string
		want       map[string][]string // object -> strings its YAML must have
		wantAbsent []string
	}{
		{dir: "prestop", want: map[string][]string{
			"MutatingWebhookConfiguration/csi-fence-prestop":  {"failurePolicy: Ignore", "'" + termreason.OptInKey + "'", "== '" + termreason.OptInEnabled + "'", "operations:\n    - CREATE"},
			"Deployment/csi-fence-prestop-webhook":            {"--generate-certificate", "--webhook-configuration=csi-fence-prestop", "--helper-image=", "--node-agent-url=http://csi-fence-node-agent.default.svc:8081" + termreason.ServedPath},
			"ClusterRole/csi-fence-prestop-webhook":           {"mutatingwebhookconfigurations", "csi-fence-prestop"},
			"ClusterRole/csi-fence-termination-reason-reader": {"controllerrevisions"},
			"Service/csi-fence-prestop-webhook":               {"targetPort: https"},
		}},
		{dir: "prestop-cert-manager", want: map[string][]string{
			"MutatingWebhookConfiguration/csi-fence-prestop":  {"cert-manager.io/inject-ca-from: default/csi-fence-prestop-webhook", "failurePolicy: Ignore"},
			"Deployment/csi-fence-prestop-webhook":            {"--tls-cert-file=/tls/tls.crt", "secretName: csi-fence-prestop-webhook-tls", "--node-agent-url=http://csi-fence-node-agent.default.svc:8081" + termreason.ServedPath},
			"Certificate/csi-fence-prestop-webhook":           {"csi-fence-prestop-webhook.default.svc"},
			"ClusterRole/csi-fence-termination-reason-reader": {"pods"},
		}, wantAbsent: []string{"ClusterRole/csi-fence-prestop-webhook"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), tc.dir)
			if err != nil {
				t.Fatalf("kustomize build deploy/kubernetes/%s: %v", tc.dir, err)
			}
			got := map[string]string{}
			for _, r := range res.Resources() {
				y, err := r.AsYAML()
				if err != nil {
					t.Fatal(err)
				}
				got[r.GetKind()+"/"+r.GetName()] = string(y)
			}
			for obj, wants := range tc.want {
				y, ok := got[obj]
				if !ok {
					t.Errorf("no %s", obj)
					continue
				}
				for _, w := range wants {
					if !strings.Contains(y, w) {
						t.Errorf("%s lacks %q:\n%s", obj, w, y)
					}
				}
			}
			for _, obj := range tc.wantAbsent {
				if _, ok := got[obj]; ok {
					t.Errorf("%s should not be there", obj)
				}
			}
			if strings.Contains(got["Deployment/csi-fence-prestop-webhook"], "--generate-certificate") && tc.dir != "prestop" {
				t.Errorf("the cert-manager variant still generates its certificate")
			}
		})
	}
}

// negativeControl replaces from by to in a manifest, after which the check
// must report want: it shows the check sees what it is for.
type negativeControl struct{ from, to, want string }

// The webhook may write one thing: the caBundle of its own
// MutatingWebhookConfiguration, with --generate-certificate. Its rule must
// stay that narrow (get and update of that one object by name: no patch,
// no delete, no create, no other configuration, which would let it change
// or remove what the apiserver sends to which webhook), and the
// cert-manager variant, whose CA injector writes the caBundle, has no such
// rule at all.
func TestPreStopWebhookRBACIsNarrow(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		mayWrite bool
		controls []negativeControl
	}{
		{dir: "prestop", mayWrite: true, controls: []negativeControl{
			{from: `- get
  - update`, to: `- get
  - update
  - patch`, want: "verbs"},
			{from: `resourceNames:
  - csi-fence-prestop`, to: `resourceNames:
  - csi-fence-prestop
  - other`, want: "resourceNames"},
			{from: `  resourceNames:
  - csi-fence-prestop
`, to: ``, want: "resourceNames"},
			{from: `- mutatingwebhookconfigurations`, to: `- '*'`, want: "resources"},
			{from: `--webhook-configuration=csi-fence-prestop`, to: `--webhook-configuration=another`, want: "--webhook-configuration"},
		}},
		{dir: "prestop-cert-manager"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), tc.dir)
			if err != nil {
				t.Fatalf("kustomize build deploy/kubernetes/%s: %v", tc.dir, err)
			}
			b, err := res.AsYaml()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range webhookRBACProblems(t, string(b), tc.mayWrite) {
				t.Error(p)
			}
			for _, c := range tc.controls {
				mutated := strings.Replace(string(b), c.from, c.to, 1)
				if mutated == string(b) {
					t.Fatalf("negative control: %q not in the rendered manifests", c.from)
				}
				found := false
				for _, p := range webhookRBACProblems(t, mutated, tc.mayWrite) {
					found = found || strings.Contains(p, c.want)
				}
				if !found {
					t.Errorf("negative control: replacing %q by %q not reported (want %q)", c.from, c.to, c.want)
				}
			}
		})
	}
}

// webhookRBACProblems reads rendered manifests and reports every rule of
// the webhook's ServiceAccount (bound by a ClusterRoleBinding or
// RoleBinding) on webhook configurations that is not exactly get and update
// of its own configuration, the one the Deployment names; with mayWrite
// false, any such rule.
func webhookRBACProblems(t *testing.T, manifests string, mayWrite bool) []string {
	t.Helper()
	const sa = "csi-fence-prestop-webhook"
	roles := map[string][]rbacv1.PolicyRule{} // Kind/name -> rules
	var bound []string                        // roles bound to the webhook's ServiceAccount
	configName, webhookArg := "", ""
	for _, doc := range strings.Split(manifests, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole // a Role has the same fields
			if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			roles[meta.Kind+"/"+r.Name] = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := yaml.Unmarshal([]byte(doc), &b); err != nil {
				t.Fatal(err)
			}
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa {
					bound = append(bound, b.RoleRef.Kind+"/"+b.RoleRef.Name)
				}
			}
		case "MutatingWebhookConfiguration":
			var c admissionregistrationv1.MutatingWebhookConfiguration
			if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
				t.Fatal(err)
			}
			configName = c.Name
		case "Deployment":
			var d appsv1.Deployment
			if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
				t.Fatal(err)
			}
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, a := range c.Args {
					if v, ok := strings.CutPrefix(a, "--webhook-configuration="); ok {
						webhookArg = v
					}
				}
			}
		}
	}
	var problems []string
	if mayWrite && webhookArg != configName {
		problems = append(problems, fmt.Sprintf("the Deployment's --webhook-configuration=%q is not the MutatingWebhookConfiguration %q", webhookArg, configName))
	}
	touches := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	writing := 0
	for _, role := range bound {
		for _, r := range roles[role] {
			if !touches(r.APIGroups, "admissionregistration.k8s.io") ||
				!(touches(r.Resources, "mutatingwebhookconfigurations") || touches(r.Resources, "validatingwebhookconfigurations")) {
				continue
			}
			writing++
			if !mayWrite {
				problems = append(problems, fmt.Sprintf("%s: a rule on webhook configurations, which cert-manager's CA injector keeps: %+v", role, r))
				continue
			}
			if !slices.Equal(r.Resources, []string{"mutatingwebhookconfigurations"}) {
				problems = append(problems, fmt.Sprintf("%s: resources %q, want only mutatingwebhookconfigurations", role, r.Resources))
			}
			if !slices.Equal(r.ResourceNames, []string{configName}) {
				problems = append(problems, fmt.Sprintf("%s: resourceNames %q, want only its own configuration %q", role, r.ResourceNames, configName))
			}
			verbs := slices.Sorted(slices.Values(r.Verbs))
			if !slices.Equal(verbs, []string{"get", "update"}) {
				problems = append(problems, fmt.Sprintf("%s: verbs %q, want only get and update", role, r.Verbs))
			}
		}
	}
	if mayWrite && writing != 1 {
		problems = append(problems, fmt.Sprintf("%d rules of the webhook on webhook configurations, want the one that keeps its caBundle", writing))
	}
	return problems
}
