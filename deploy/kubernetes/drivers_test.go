package kubernetes

import (
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
		// One pod runs the controller and the node plugin: the node
		// agent cannot be told from the controller (single node only).
		{"csi-driver-host-path", "StatefulSet", "csi-hostpathplugin", "/csi/csi.sock", "csi-hostpathplugin", "/csi/csi.sock",
			`runs as ServiceAccount "csi-hostpathplugin-sa", as the csi-fence-attacher controller in StatefulSet default/csi-hostpathplugin does`},
		{"cloud-helm", "Deployment", "cloud-block-csi-controller", "/var/lib/csi/sockets/pluginproxy/csi.sock", "cloud-block-csi-node", "/csi/csi.sock", ""},
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
	b, err := os.ReadFile("testdata/drivers/ceph-rbd/node-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cephNodeAgent := string(b)
	tests := []struct {
		name          string
		kustomization string
		files         map[string]string
		want          []string // each must be in the errors
	}{
		{
			name:          "a cloud registry's attacher image the component does not know",
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
			name: "a node agent that does not tolerate the taints of a node under fencing",
			kustomization: header + "resources: [$HERE/testdata/drivers/ceph-rbd/upstream]\ncomponents: [$HERE/sidecar]\n" + `patches:
- path: node-agent.yaml
  target: {kind: DaemonSet, name: csi-rbdplugin}
- target: {kind: DaemonSet, name: csi-rbdplugin}
  patch: |-
    - {op: remove, path: /spec/template/spec/tolerations}
`,
			files: map[string]string{"node-agent.yaml": cephNodeAgent},
			want: []string{`DaemonSet csi-rbdplugin: node agent "csi-fence-attacher" runs in a pod that does not tolerate the taints of a node under fencing`,
				"{key: csi-fence.io/quarantine, operator: Exists}, {key: node.kubernetes.io/out-of-service, operator: Exists}"},
		},
		{
			name:          "the component left out",
			kustomization: header + "resources: [$HERE/testdata/drivers/ceph-rbd/upstream]\n",
			want:          []string{`container "csi-attacher" still runs external-attacher`, "found no csi-fence-attacher controller container"},
		},
		{
			name:          "the component on manifests without an attacher: nothing matched",
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
			kustomization: header + "resources: [$HERE/testdata/drivers/ceph-rbd/upstream]\ncomponents: [$HERE/sidecar]\n",
			want:          []string{"found no csi-fence-attacher node agent (image .../csi-fence-attacher with --role=node) in DaemonSet csi-rbdplugin, Deployment csi-rbdplugin-provisioner"},
		},
		{
			name: "an attacher flag csi-fence-attacher does not accept",
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
			name: "a socket no volume holds",
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
			objs := build(t, overlay(t, tc.kustomization, tc.files))
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
