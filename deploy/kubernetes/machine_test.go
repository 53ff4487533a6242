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
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/component-helpers/auth/rbac/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/csi-fence/fence-attacher/pkg/sidecar"
)

// The machine backend's RBAC is a component of its own: it grants what the
// sidecar checks for (sidecar.MachineRules) to the controller role's
// ServiceAccount, and the base grants nothing on Machines, so that only a
// cluster that uses the backend lets the sidecar delete them.
func TestMachineFencingComponent(t *testing.T) {
	dir := t.TempDir()
	abs, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// A user's kustomization: the base with the component.
	for name, content := range map[string]string{
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- base\n- fence-driver.yaml\ncomponents:\n- machine-fencing\n",
		"fence-driver.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: csi-fence-driver\n  annotations: {config.kubernetes.io/local-config: \"true\"}\ndata: {namespace: default, controllerServiceAccount: csi-fence-attacher, nodeServiceAccount: csi-fence-attacher-node}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"base": "base", "machine-fencing": "machine-fencing"} {
		if err := os.Symlink(filepath.Join(abs, target), filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	opts := krusty.MakeDefaultOptions()
	res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build of base + machine-fencing: %v", err)
	}
	var role *rbacv1.ClusterRole
	bound := false
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		switch r.GetKind() + "/" + r.GetName() {
		case "ClusterRole/csi-fence-attacher-machine-fencing":
			role = &rbacv1.ClusterRole{}
			if err := yaml.Unmarshal(y, role); err != nil {
				t.Fatal(err)
			}
		case "ClusterRoleBinding/csi-fence-attacher-machine-fencing":
			bound = strings.Contains(string(y), "name: csi-fence-attacher\n") && strings.Contains(string(y), "kind: ServiceAccount")
		}
	}
	if role == nil || !bound {
		t.Fatalf("the component renders no ClusterRole csi-fence-attacher-machine-fencing bound to csi-fence-attacher (role %v, bound %v)", role != nil, bound)
	}
	if ok, missing := validation.Covers(role.Rules, sidecar.MachineRules); !ok {
		t.Errorf("the component's ClusterRole lacks %v that the sidecar checks for", missing)
	}
	base, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), "base")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range base.Resources() {
		if y, _ := r.AsYAML(); strings.Contains(string(y), "cluster.x-k8s.io") && strings.HasPrefix(r.GetKind(), "ClusterRole") {
			t.Errorf("the base's %s %s grants on Cluster API objects: only the machine-fencing component may", r.GetKind(), r.GetName())
		}
	}
}
