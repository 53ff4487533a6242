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

// Package kubernetes holds the manifests users apply; this test renders the
// kustomizations as `kubectl apply -k` would and checks that the sidecar is
// placed where the README says.
package kubernetes

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/csi-fence/fence-attacher/pkg/manifestcheck"
)

func TestMockExampleRenders(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), "mock-example")
	if err != nil {
		t.Fatalf("kustomize build deploy/kubernetes/mock-example: %v", err)
	}
	kinds := map[string]bool{}
	for _, r := range res.Resources() {
		kinds[r.GetKind()+"/"+r.GetName()] = true
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		s := string(y)
		switch r.GetKind() + "/" + r.GetName() {
		case "Deployment/csi-driver-controller":
			for _, want := range []string{"image: " + fenceImage, "--leader-election", "NonGracefulFailover=true", "path: /readyz", "serviceAccountName: csi-fence-attacher", "name: csi-fence-mock"} {
				if !strings.Contains(s, want) {
					t.Errorf("controller Deployment lacks %q:\n%s", want, s)
				}
			}
		// The Leases one per cluster (node-fencing owner, storm guard,
		// registrations) live in kube-system, the sidecar's default
		// --storm-guard-namespace, whatever the driver's namespace.
		case "Role/csi-fence-attacher-cluster-leases":
			if r.GetNamespace() != "kube-system" {
				t.Errorf("Role %s is in %q, want kube-system", r.GetName(), r.GetNamespace())
			}
			for _, want := range []string{"- leases", "- get", "- list", "- watch", "- create", "- update"} {
				if !strings.Contains(s, want) {
					t.Errorf("Role %s lacks %q:\n%s", r.GetName(), want, s)
				}
			}
		case "RoleBinding/csi-fence-attacher-cluster-leases":
			if r.GetNamespace() != "kube-system" {
				t.Errorf("RoleBinding %s is in %q, want kube-system", r.GetName(), r.GetNamespace())
			}
			for _, want := range []string{"name: csi-fence-attacher\n", "name: csi-fence-attacher-cluster-leases\n", "kind: ServiceAccount"} {
				if !strings.Contains(s, want) {
					t.Errorf("RoleBinding %s lacks %q:\n%s", r.GetName(), want, s)
				}
			}
		case "Service/csi-fence-node-agent":
			// Only the agent on the pod's own node has its reason.
			for _, want := range []string{"internalTrafficPolicy: Local", "csi-fence.io/node-agent: \"true\"", "targetPort: fence-http"} {
				if !strings.Contains(s, want) {
					t.Errorf("node agent Service lacks %q:\n%s", want, s)
				}
			}
		case "DaemonSet/csi-driver-node":
			for _, want := range []string{"--role=node", "mountPropagation: HostToContainer", "serviceAccountName: csi-fence-attacher-node", "fieldPath: spec.nodeName", "name: csi-fence-mock",
				"csi-fence.io/node-agent: \"true\"", "name: fence-http"} {
				if !strings.Contains(s, want) {
					t.Errorf("node DaemonSet lacks %q:\n%s", want, s)
				}
			}
		}
	}
	// What a user runs on their own build.
	r, err := manifestcheck.Check(build(t, "mock-example"), checkOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Errorf("check-manifests fails on the example:\n%v", err)
	}
	for _, want := range []string{
		"CustomResourceDefinition/fencingrequests.fencing.csi-fence.io", "CustomResourceDefinition/fenceagentconfigs.fencing.csi-fence.io",
		"ClusterRole/csi-fence-attacher-runner", "ClusterRoleBinding/csi-fence-attacher-role",
		"ClusterRole/csi-fence-attacher-failover-runner", "ClusterRoleBinding/csi-fence-attacher-failover-role",
		"ClusterRole/csi-fence-attacher-power-runner", "ClusterRoleBinding/csi-fence-attacher-power-role",
		"Role/csi-fence-attacher-cluster-leases", "RoleBinding/csi-fence-attacher-cluster-leases",
		"ClusterRole/csi-fence-attacher-node", "CSIDriver/fence.csi-fence.io",
		"Deployment/csi-driver-controller", "DaemonSet/csi-driver-node",
		"Service/csi-fence-node-agent",
	} {
		if !kinds[want] {
			t.Errorf("rendered example lacks %s (has %v)", want, kinds)
		}
	}
}

// The features' RBAC is bound only where their component is used: the
// sidecar component alone (the fenced detach) binds no role that deletes
// pods, patches nodes or reads Secrets.
func TestFeatureRBACOnlyWithItsComponent(t *testing.T) {
	tests := []struct {
		components []string
		want, not  []string
	}{
		{[]string{"sidecar"}, []string{"ClusterRoleBinding/csi-fence-attacher-role"},
			[]string{"ClusterRoleBinding/csi-fence-attacher-failover-role", "RoleBinding/csi-fence-attacher-cluster-leases", "ClusterRoleBinding/csi-fence-attacher-power-role"}},
		{[]string{"sidecar", "failover"}, []string{"ClusterRoleBinding/csi-fence-attacher-role", "ClusterRoleBinding/csi-fence-attacher-failover-role", "RoleBinding/csi-fence-attacher-cluster-leases"},
			[]string{"ClusterRoleBinding/csi-fence-attacher-power-role"}},
		{[]string{"sidecar", "failover", "power-fencing"}, []string{"ClusterRoleBinding/csi-fence-attacher-power-role"}, nil},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.components, "+"), func(t *testing.T) {
			k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../mock-example/mock-driver.yaml]\ncomponents:\n"
			for _, c := range tc.components {
				k += "- ../../" + c + "\n"
			}
			objs := build(t, overlay(t, strings.Replace(k, "resources: [../../mock-example/mock-driver.yaml]", "resources: [mock-driver.yaml, fence-driver.yaml]", 1),
				map[string]string{"mock-driver.yaml": readFile(t, "mock-example/mock-driver.yaml"), "fence-driver.yaml": readFile(t, "mock-example/fence-driver.yaml")}))
			have := map[string]bool{}
			var secrets, podDelete bool
			for _, o := range objs {
				have[o.GetKind()+"/"+o.GetName()] = true
				if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
					continue
				}
				rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
				for _, r := range rules {
					s := fmt.Sprint(r)
					secrets = secrets || strings.Contains(s, "secrets")
					podDelete = podDelete || strings.Contains(s, "resources:[pods]") && strings.Contains(s, "delete")
				}
			}
			for _, w := range tc.want {
				if !have[w] {
					t.Errorf("no %s", w)
				}
			}
			for _, n := range tc.not {
				if have[n] {
					t.Errorf("%s bound without its component", n)
				}
			}
			if len(tc.components) == 1 && (secrets || podDelete) {
				t.Errorf("the fenced detach alone grants Secrets (%v) or pod deletion (%v)", secrets, podDelete)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
