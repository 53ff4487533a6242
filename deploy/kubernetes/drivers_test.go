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
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/csi-fence/fence-attacher/pkg/manifestcheck"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
)

// fenceImage is what the sidecar component runs instead of external-attacher.
const fenceImage = "ghcr.io/csi-fence/csi-fence-attacher:canary"

// build renders a kustomization as `kubectl kustomize` would.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		// Through JSON, as kubectl reads it: Map() keeps YAML's ints,
		// which unstructured cannot copy.
		j, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	return objs
}

// overlay writes a kustomization into a temporary directory under
// testdata ($HERE in it is deploy/kubernetes): kustomize refuses absolute
// paths.
func overlay(t *testing.T, kustomization string, files map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("testdata", "overlay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kustomization = strings.ReplaceAll(kustomization, "$HERE", "../..")
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// withIdentity adds a driver's fence-driver.yaml (testdata/drivers/<driver>)
// to an overlay's files, and to its resources; "" adds nothing.
func withIdentity(t *testing.T, driver, kustomization string, files map[string]string) (string, map[string]string) {
	t.Helper()
	if driver == "" {
		return kustomization, files
	}
	b, err := os.ReadFile(filepath.Join("testdata", "drivers", driver, "fence-driver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{"fence-driver.yaml": string(b)}
	for k, v := range files {
		out[k] = v
	}
	return strings.Replace(kustomization, "resources: [", "resources: [fence-driver.yaml, ", 1), out
}

// container returns the named container of the named workload.
func container(t *testing.T, objs []*unstructured.Unstructured, kind, name, containerName string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != kind || o.GetName() != name {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			if m := c.(map[string]any); m["name"] == containerName {
				return m
			}
		}
	}
	t.Fatalf("no container %s in %s %s", containerName, kind, name)
	return nil
}

func checkOptions() manifestcheck.Options {
	return manifestcheck.Options{Flags: sidecar.NewFlagSet}
}

// The sidecar component on manifests in the shapes real drivers ship
// (testdata/drivers/README.md): the csi-attacher container runs
// csi-fence-attacher and keeps everything else (arguments, socket, mounts,
// probes, ports, resources, security context), the driver's other
// containers are untouched, and kubectl fence check-manifests finds the
// controller and the node agent, each on the driver's socket, with
// arguments csi-fence-attacher accepts.
func TestDriverOverlays(t *testing.T) {
	tests := []struct {
		dir            string
		kind, workload string // where csi-attacher is
		socket         string // the driver's controller socket it must keep
		agentWorkload  string // where the node agent goes
		agentSocket    string
		// checkErr: what check-manifests must say instead of passing.
		checkErr string
	}{
		{"ceph-rbd", "Deployment", "csi-rbdplugin-provisioner", "/csi/csi-provisioner.sock", "csi-rbdplugin", "/csi/csi.sock", ""},
		// One pod runs the controller and the node plugin: the node agent
		// runs in a DaemonSet of its own, on the socket shared through the
		// host directory.
		{"csi-driver-host-path", "StatefulSet", "csi-hostpathplugin", "/csi/csi.sock", "csi-hostpath-fence-node", "/csi/csi.sock", ""},
		{"cloud-helm", "Deployment", "cloud-block-csi-controller", "/var/lib/csi/sockets/pluginproxy/csi.sock", "cloud-block-csi-node", "/csi/csi.sock", ""},
		{"aws-ebs", "Deployment", "ebs-csi-controller", "/var/lib/csi/sockets/pluginproxy/csi.sock", "ebs-csi-node", "/csi/csi.sock", ""},
		{"azuredisk", "Deployment", "csi-azuredisk-controller", "/csi/csi.sock", "csi-azuredisk-node", "/csi/csi.sock", ""},
		{"gce-pd", "Deployment", "csi-gce-pd-controller", "/csi/csi.sock", "csi-gce-pd-node", "/csi/csi.sock", ""},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			dir := filepath.Join("testdata", "drivers", tc.dir)
			upstream := build(t, filepath.Join(dir, "upstream"))
			built := build(t, dir)

			before := container(t, upstream, tc.kind, tc.workload, "csi-attacher")
			after := container(t, built, tc.kind, tc.workload, "csi-attacher")
			if !manifestcheck.IsExternalAttacher(before["image"].(string)) {
				t.Fatalf("fixture's csi-attacher runs %v, not external-attacher", before["image"])
			}
			if after["image"] != fenceImage {
				t.Errorf("csi-attacher runs %v, want %s", after["image"], fenceImage)
			}
			want := map[string]any{}
			for k, v := range before {
				want[k] = v
			}
			want["image"] = after["image"]
			// A recipe with the failover adds its gate, last.
			const gate = "--feature-gates=NonGracefulFailover=true"
			if args, _ := after["args"].([]any); len(args) > 0 && args[len(args)-1] == gate {
				want["args"] = append(append([]any{}, before["args"].([]any)...), gate)
			}
			if !reflect.DeepEqual(after, want) {
				t.Errorf("csi-attacher changed beyond its image:\nbefore %v\nafter  %v", before, after)
			}
			// The driver and its other sidecars are as shipped.
			for _, o := range upstream {
				if o.GetKind() != tc.kind || o.GetName() != tc.workload {
					continue
				}
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				for _, c := range cs {
					name := c.(map[string]any)["name"].(string)
					if name == "csi-attacher" {
						continue
					}
					if got := container(t, built, tc.kind, tc.workload, name); !reflect.DeepEqual(got, c) {
						t.Errorf("container %s changed:\nbefore %v\nafter  %v", name, c, got)
					}
				}
			}

			r, err := manifestcheck.Check(built, checkOptions())
			if err != nil {
				t.Fatal(err)
			}
			switch err := r.Err(); {
			case tc.checkErr == "" && err != nil:
				t.Fatalf("check-manifests fails on the overlay:\n%v", err)
			case tc.checkErr != "" && (err == nil || !strings.Contains(err.Error(), tc.checkErr) || len(r.Errors) != 1):
				t.Fatalf("check-manifests says %v, want only %q", err, tc.checkErr)
			}
			var controller, agent bool
			for _, s := range r.Sidecars {
				switch {
				case !s.Node && s.Workload.Name == tc.workload && s.Socket == tc.socket:
					controller = true
				case s.Node && s.Workload.Name == tc.agentWorkload && s.Socket == tc.agentSocket:
					agent = true
				}
			}
			// The node agent comes after the driver's containers, where
			// kubectl logs and exec do not pick it first.
			for _, o := range built {
				if o.GetName() != tc.agentWorkload || o.GetKind() == "Service" {
					continue
				}
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				if len(cs) > 1 && cs[0].(map[string]any)["name"] == "csi-fence-attacher" {
					t.Errorf("the node agent is container 0 of %s %s", o.GetKind(), o.GetName())
				}
			}
			if !controller || !agent {
				t.Errorf("controller on %s in %s: %v; node agent on %s in %s: %v; found %v", tc.socket, tc.workload, controller, tc.agentSocket, tc.agentWorkload, agent, r.Notes)
			}
		})
	}
}

// A build the component did not take effect on fails check-manifests,
// saying what it looked for: kustomize itself builds every one of these
// without a word.
func TestCheckManifestsFailsLoudly(t *testing.T) {
	const header = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "drivers", f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name          string
		driver        string // whose identities the overlay names
		kustomization string
		files         map[string]string
		want          []string // each must be in the errors
	}{
		{
			name:          "a cloud registry's attacher image the component does not know",
			driver:        "cloud-helm",
			kustomization: header + "resources: [$HERE/testdata/drivers/cloud-helm/upstream]\ncomponents: [$HERE/sidecar]\n",
			want: []string{
				`Deployment kube-system/cloud-block-csi-controller: container "csi-attacher" still runs external-attacher (image registry.example-cloud.com/kubernetes-csi/external-attacher:v4.9.0-cloud-1-40)`,
				"images: [{name: registry.example-cloud.com/kubernetes-csi/external-attacher, newName: ghcr.io/csi-fence/csi-fence-attacher",
				"found no csi-fence-attacher controller container",
			},
		},
		{
			// namePrefix renames the node agent's ServiceAccount, not the
			// user name inside the policy's CEL expression.
			name:          "a name prefix: the policy no longer names the node agent",
			kustomization: header + "namePrefix: acme-\nresources: [$HERE/mock-example]\n",
			want:          []string{`runs as ServiceAccount "acme-csi-fence-attacher-node", which the ValidatingAdmissionPolicy acme-csi-fence-node-agent-own-record does not name`},
		},
		{
			// The user's patch of the node plugin without the tolerations:
			// the out-of-service taint would evict the node agent for good.
			name:   "a node agent that does not tolerate the taints of a node under fencing",
			driver: "ceph-rbd",
			kustomization: header + "resources: [$HERE/testdata/drivers/ceph-rbd/upstream]\ncomponents: [$HERE/sidecar]\n" + `patches:
- path: node-patch.yaml
  target: {kind: DaemonSet, name: csi-rbdplugin}
- path: node-agent.yaml
  target: {kind: DaemonSet, name: csi-rbdplugin}
- target: {kind: DaemonSet, name: csi-rbdplugin}
  patch: |-
    - {op: remove, path: /spec/template/spec/tolerations}
`,
			files: map[string]string{"node-patch.yaml": read("ceph-rbd/node-patch.yaml"), "node-agent.yaml": read("ceph-rbd/node-agent.yaml")},
			want: []string{`DaemonSet ceph-csi/csi-rbdplugin: node agent "csi-fence-attacher" runs in a pod that does not tolerate the taints of a node under fencing`,
				"{key: csi-fence.io/quarantine, operator: Exists}, {key: node.kubernetes.io/out-of-service, operator: Exists}"},
		},
		{
			name:          "the component left out",
			driver:        "ceph-rbd",
			kustomization: header + "resources: [$HERE/testdata/drivers/ceph-rbd/upstream]\n",
			want:          []string{`container "csi-attacher" still runs external-attacher`, "found no csi-fence-attacher controller container"},
		},
		{
			name:          "the component on manifests without an attacher: nothing matched",
			driver:        "ceph-rbd",
			kustomization: header + "resources: [daemonset.yaml]\ncomponents: [$HERE/sidecar]\n",
			files: map[string]string{"daemonset.yaml": `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: my-node-plugin, namespace: storage}
spec:
  selector: {matchLabels: {app: n}}
  template:
    metadata: {labels: {app: n}}
    spec:
      containers:
      - {name: plugin, image: example.com/plugin:v1}
`},
			want: []string{"found no csi-fence-attacher controller container: looked for a container whose image is .../csi-fence-attacher without --role=node, and for an external-attacher container (image .../csi-attacher or .../external-attacher) it should have replaced, in DaemonSet storage/my-node-plugin"},
		},
		{
			name:          "no node agent",
			driver:        "ceph-rbd",
			kustomization: header + "resources: [$HERE/testdata/drivers/ceph-rbd/upstream]\ncomponents: [$HERE/sidecar]\n",
			want:          []string{"found no csi-fence-attacher node agent (image .../csi-fence-attacher with --role=node) in DaemonSet ceph-csi/csi-rbdplugin, Deployment ceph-csi/csi-rbdplugin-provisioner"},
		},
		{
			name:   "an attacher flag csi-fence-attacher does not accept",
			driver: "csi-driver-host-path",
			kustomization: header + "resources: [$HERE/testdata/drivers/csi-driver-host-path/upstream]\ncomponents: [$HERE/sidecar]\n" + `patches:
- target: {kind: StatefulSet, name: csi-hostpathplugin}
  patch: |-
    - op: test
      path: /spec/template/spec/containers/4/name
      value: csi-attacher
    - op: add
      path: /spec/template/spec/containers/4/args/-
      value: --leader-election-type=leases
`,
			want: []string{`StatefulSet default/csi-hostpathplugin: container "csi-attacher": csi-fence-attacher does not accept its arguments: flag provided but not defined: -leader-election-type`},
		},
		{
			name:   "a socket no volume holds",
			driver: "csi-driver-host-path",
			kustomization: header + "resources: [$HERE/testdata/drivers/csi-driver-host-path/upstream]\ncomponents: [$HERE/sidecar]\n" + `patches:
- target: {kind: StatefulSet, name: csi-hostpathplugin}
  patch: |-
    - op: test
      path: /spec/template/spec/containers/4/name
      value: csi-attacher
    - op: replace
      path: /spec/template/spec/containers/4/args/1
      value: --csi-address=/run/csi/socket
`,
			want: []string{`container "csi-attacher": the driver's socket /run/csi/socket is under none of its volume mounts`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, files := withIdentity(t, tc.driver, tc.kustomization, tc.files)
			objs := build(t, overlay(t, k, files))
			r, err := manifestcheck.Check(objs, checkOptions())
			if err != nil {
				t.Fatal(err)
			}
			got := r.Err()
			if got == nil {
				t.Fatalf("check-manifests passed; notes: %v", r.Notes)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("errors do not say %q:\n%v", w, got)
				}
			}
		})
	}
}

// The driver's namespace and ServiceAccounts are named once, in the
// ConfigMap csi-fence-driver, and every binding of every component, the
// admission policy and the namespaced objects follow them; without the
// ConfigMap the build fails.
func TestDriverIdentities(t *testing.T) {
	const header = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
	const identity = `apiVersion: v1
kind: ConfigMap
metadata:
  name: csi-fence-driver
  annotations: {config.kubernetes.io/local-config: "true"}
data: {namespace: storage, controllerServiceAccount: ctl-sa, nodeServiceAccount: node-sa}
`
	components := "components: [$HERE/sidecar, $HERE/failover, $HERE/power-fencing, $HERE/machine-fencing]\n"

	t.Run("without the ConfigMap the build fails", func(t *testing.T) {
		dir := overlay(t, header+"resources: [$HERE/testdata/drivers/ceph-rbd/upstream]\n"+components, nil)
		_, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err == nil || !strings.Contains(err.Error(), "csi-fence-driver") {
			t.Fatalf("build without the driver's identities: %v, want an error naming csi-fence-driver", err)
		}
	})

	objs := build(t, overlay(t, header+"resources: [$HERE/testdata/drivers/ceph-rbd/upstream, fence-driver.yaml]\n"+components,
		map[string]string{"fence-driver.yaml": identity}))
	want := map[string]string{ // binding -> ServiceAccount it must bind
		"ClusterRoleBinding/csi-fence-attacher-role":            "storage/ctl-sa",
		"RoleBinding/csi-fence-attacher-role-cfg":               "storage/ctl-sa",
		"ClusterRoleBinding/csi-fence-attacher-failover-role":   "storage/ctl-sa",
		"RoleBinding/csi-fence-attacher-cluster-leases":         "storage/ctl-sa",
		"ClusterRoleBinding/csi-fence-attacher-power-role":      "storage/ctl-sa",
		"ClusterRoleBinding/csi-fence-attacher-machine-fencing": "storage/ctl-sa",
		"ClusterRoleBinding/csi-fence-attacher-node":            "storage/node-sa",
	}
	wantNS := map[string]string{
		"Role/csi-fence-attacher-cfg":             "storage",
		"RoleBinding/csi-fence-attacher-role-cfg": "storage",
		"Service/csi-fence-node-agent":            "storage",
		// Shared by every driver, in --storm-guard-namespace.
		"Role/csi-fence-attacher-cluster-leases":        "kube-system",
		"RoleBinding/csi-fence-attacher-cluster-leases": "kube-system",
	}
	seen := map[string]bool{}
	for _, o := range objs {
		id := o.GetKind() + "/" + o.GetName()
		switch o.GetKind() {
		case "ConfigMap":
			if o.GetName() == "csi-fence-driver" {
				t.Errorf("the local ConfigMap %s is in the output", id)
			}
		case "ServiceAccount":
			if strings.HasPrefix(o.GetName(), "csi-fence-attacher") {
				t.Errorf("%s/%s is in the output: the driver brings its own ServiceAccounts", id, o.GetNamespace())
			}
		case "ClusterRoleBinding", "RoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			var got []string
			for _, s := range subjects {
				m := s.(map[string]any)
				got = append(got, fmt.Sprint(m["namespace"], "/", m["name"]))
			}
			if w, ok := want[id]; !ok || len(got) != 1 || got[0] != w {
				t.Errorf("%s binds %v, want [%s]", id, got, w)
			}
			seen[id] = true
		case "ValidatingAdmissionPolicy":
			// The node agents' policy names the node's user; the
			// machine backend's, the controller's.
			user := "node-sa"
			if o.GetName() == "csi-fence-attacher-no-control-plane-machines" {
				user = "ctl-sa"
			}
			conds, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
			if e := fmt.Sprint(conds); !strings.Contains(e, "'system:serviceaccount:' + 'storage' + ':' + '"+user+"'") {
				t.Errorf("%s does not name storage/%s: %s", id, user, e)
			}
		}
		if ns, ok := wantNS[id]; ok && o.GetNamespace() != ns {
			t.Errorf("%s is in %q, want %q", id, o.GetNamespace(), ns)
		}
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("no %s", id)
		}
	}
}

// recipeOverlay is a driver's recipe (testdata/drivers/<driver>) as an
// overlay of its own, its files changed by edit (file name -> content).
func recipeOverlay(t *testing.T, driver string, edit func(t *testing.T, files map[string]string)) string {
	t.Helper()
	dir := filepath.Join("testdata", "drivers", driver)
	files := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			files[e.Name()] = readFile(t, filepath.Join(dir, e.Name()))
		}
	}
	k := files["kustomization.yaml"]
	delete(files, "kustomization.yaml")
	k = strings.ReplaceAll(k, "- upstream\n", "- $HERE/testdata/drivers/"+driver+"/upstream\n")
	k = strings.ReplaceAll(k, "../../../", "$HERE/")
	files["kustomization.yaml"] = k
	edit(t, files)
	k = files["kustomization.yaml"]
	delete(files, "kustomization.yaml")
	return overlay(t, k, files)
}

// edit replaces old by new in a recipe's file, failing when old is not
// there (the mistake would not be made).
func edit(file, old, new string) func(t *testing.T, files map[string]string) {
	return func(t *testing.T, files map[string]string) {
		t.Helper()
		if !strings.Contains(files[file], old) {
			t.Fatalf("%s has no %q", file, old)
		}
		files[file] = strings.Replace(files[file], old, new, 1)
	}
}

// Per driver, one mistake a user makes in its recipe: check-manifests fails
// it, naming the fix (kustomize builds each without a word).
func TestDriverRecipeMistakes(t *testing.T) {
	tests := []struct {
		driver, mistake string
		edit            func(t *testing.T, files map[string]string)
		want            []string
	}{
		{"aws-ebs", "the chart's ServiceAccount name misspelt", edit("fence-driver.yaml", "controllerServiceAccount: ebs-csi-controller-sa", "controllerServiceAccount: ebs-csi-controller"),
			[]string{"runs as ServiceAccount kube-system/ebs-csi-controller-sa, which is not granted", "ClusterRoleBinding csi-fence-attacher-role binds kube-system/ebs-csi-controller", "{namespace: kube-system, controllerServiceAccount: ebs-csi-controller-sa}"}},
		{"azuredisk", "the driver's namespace left at default", edit("fence-driver.yaml", "namespace: kube-system", "namespace: default"),
			[]string{"runs as ServiceAccount kube-system/csi-azuredisk-controller-sa, which is not granted", "binds default/csi-azuredisk-controller-sa",
				"the Service csi-fence-node-agent is in namespace default, not in kube-system"}},
		{"gce-pd", "the failover's gate left out", edit("kustomization.yaml", "    - {op: add, path: /spec/template/spec/containers/1/args/-, value: --feature-gates=NonGracefulFailover=true}\n", ""),
			[]string{"is granted the failover's RBAC, but its arguments lack --feature-gates=NonGracefulFailover=true"}},
		{"ceph-rbd", "the provisioner's ServiceAccount named for the node plugin", edit("fence-driver.yaml", "nodeServiceAccount: rbd-csi-nodeplugin", "nodeServiceAccount: rbd-csi-provisioner"),
			[]string{`node agent "csi-fence-attacher" runs as ServiceAccount ceph-csi/rbd-csi-nodeplugin, which is not granted`, "nodeServiceAccount: rbd-csi-nodeplugin"}},
		{"csi-driver-host-path", "the node agent in the driver's StatefulSet, as the README once said", func(t *testing.T, files map[string]string) {
			edit("kustomization.yaml", "- node-agent.yaml\n", "")(t, files)
			files["kustomization.yaml"] += `patches:
- target: {kind: StatefulSet, name: csi-hostpathplugin}
  patch: |-
    - op: add
      path: /spec/template/spec/containers/-
      value:
        name: csi-fence-attacher
        image: ghcr.io/csi-fence/csi-fence-attacher:canary
        args: [--role=node, --csi-address=/csi/csi.sock, --kubelet-dir=/var/lib/kubelet]
        volumeMounts:
        - {name: socket-dir, mountPath: /csi}
        - {name: mountpoint-dir, mountPath: /var/lib/kubelet/pods}
`
		}, []string{`node agent "csi-fence-attacher" runs as ServiceAccount "csi-hostpathplugin-sa", as the csi-fence-attacher controller in StatefulSet default/csi-hostpathplugin does`,
			"Run the node agent in a pod with a ServiceAccount of its own"}},
		{"aws-ebs", "the node agent patched into the Windows DaemonSet", edit("kustomization.yaml", "- path: node-agent.yaml\n  target: {kind: DaemonSet, name: ebs-csi-node}", "- path: node-agent.yaml\n  target: {kind: DaemonSet, name: ebs-csi-node-windows}"),
			[]string{"DaemonSet kube-system/ebs-csi-node-windows: container \"csi-fence-attacher\": the node agent is in a DaemonSet for Windows nodes"}},
		{"ceph-cephfs", "the sidecar put next to CephFS", func(t *testing.T, files map[string]string) {
			files["kustomization.yaml"] = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [$HERE/testdata/drivers/ceph-cephfs/upstream, fence-driver.yaml]\ncomponents: [$HERE/sidecar]\n"
			files["fence-driver.yaml"] = strings.ReplaceAll(readFile(t, "testdata/drivers/ceph-rbd/fence-driver.yaml"), "rbd-", "cephfs-")
		}, []string{"CSIDriver cephfs.csi.ceph.com says attachRequired: false: this driver has no attachments to fence"}},
	}
	for _, tc := range tests {
		t.Run(tc.driver+": "+tc.mistake, func(t *testing.T) {
			objs := build(t, recipeOverlay(t, tc.driver, tc.edit))
			r, err := manifestcheck.Check(objs, checkOptions())
			if err != nil {
				t.Fatal(err)
			}
			got := r.Err()
			if len(tc.want) == 0 {
				if got != nil {
					t.Fatalf("check-manifests fails:\n%v", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("check-manifests passed; notes: %v", r.Notes)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("errors do not say %q:\n%v", w, got)
				}
			}
			if strings.Contains(got.Error(), "found no csi-fence-attacher controller container") && tc.driver == "ceph-cephfs" {
				t.Errorf("CephFS gets the generic message:\n%v", got)
			}
		})
	}
}
