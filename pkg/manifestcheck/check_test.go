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
	"os"
	"strings"
	"testing"

	"github.com/csi-fence/fence-attacher/pkg/sidecar"
)

const deployDir = "../../deploy/kubernetes/"

// driverYAML is a driver with csi-fence-attacher in place, running as the
// ServiceAccounts deploy/kubernetes/base binds, with the failover on.
const driverYAML = `apiVersion: apps/v1
kind: Deployment
metadata: {name: ctl, namespace: default}
spec:
  template:
    spec:
      serviceAccountName: csi-fence-attacher
      containers:
      - name: driver
        image: example.com/driver:v1
        volumeMounts: [{name: socket-dir, mountPath: /csi}]
      - name: csi-attacher
        image: ghcr.io/csi-fence/csi-fence-attacher:v1
        args: [--csi-address=/csi/csi.sock, --leader-election, --feature-gates=NonGracefulFailover=true, "--http-endpoint=:8080"]
        volumeMounts: [{name: socket-dir, mountPath: /csi}]
      volumes: [{name: socket-dir, emptyDir: {}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node, namespace: default}
spec:
  template:
    spec:
      serviceAccountName: csi-fence-attacher-node
      hostNetwork: true
      tolerations: [{operator: Exists}]
      containers:
      - name: driver
        image: example.com/driver:v1
        args: ["--http-endpoint=:8080"]
        volumeMounts: [{name: socket-dir, mountPath: /csi}]
      - name: csi-fence-attacher
        image: ghcr.io/csi-fence/csi-fence-attacher:v1
        args: [--role=node, --csi-address=/csi/csi.sock, "--http-endpoint=:9811"]
        volumeMounts:
        - {name: socket-dir, mountPath: /csi}
        - {name: kubelet-dir, mountPath: /var/lib/kubelet}
      volumes:
      - {name: socket-dir, hostPath: {path: /var/lib/kubelet/plugins/example.com}}
      - {name: kubelet-dir, hostPath: {path: /var/lib/kubelet}}
---
apiVersion: v1
kind: Service
metadata: {name: csi-fence-node-agent, namespace: default}
`

// fixture is the driver with every feature's RBAC (base/rbac-controller.yaml),
// the node role's and the admission policy.
func fixture(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(driverYAML)
	for _, f := range []string{"base/rbac-controller.yaml", "base/rbac-node.yaml", "base/admission-node.yaml"} {
		content, err := os.ReadFile(deployDir + f)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(content)
		b.WriteString("\n")
	}
	return b.String()
}

func check(t *testing.T, manifests string) Result {
	t.Helper()
	objs, err := Read(strings.NewReader(manifests))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Check(objs, Options{Flags: sidecar.NewFlagSet})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// replace is strings.Replace that fails when old is not there: a case
// whose mistake was not made would pass for the wrong reason.
func replace(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("fixture has no %q", old)
	}
	return strings.Replace(s, old, new, 1)
}

// Each mistake that leaves an install that cannot fence fails the check,
// with a message that names the fix; the fixture as it is passes.
func TestWillItFence(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, s string) string
		want   []string // each in the errors; none: must pass
		not    string   // must not be in the errors
	}{
		{name: "as it is", mutate: func(t *testing.T, s string) string { return s }},
		{
			name: "the controller runs as the driver's ServiceAccount, the roles are bound to the base's",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "serviceAccountName: csi-fence-attacher\n", "serviceAccountName: rbd-csi-provisioner\n")
			},
			want: []string{"runs as ServiceAccount default/rbd-csi-provisioner, which is not granted",
				"ClusterRoleBinding csi-fence-attacher-role binds default/csi-fence-attacher",
				"in the ConfigMap csi-fence-driver: {namespace: default, controllerServiceAccount: rbd-csi-provisioner}",
				"controller.serviceAccount={create: false, name: rbd-csi-provisioner}"},
		},
		{
			name: "the driver runs in another namespace than the bindings name",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "metadata: {name: ctl, namespace: default}", "metadata: {name: ctl, namespace: kube-system}")
			},
			want: []string{"Deployment kube-system/ctl: csi-fence-attacher \"csi-attacher\" runs as ServiceAccount kube-system/csi-fence-attacher, which is not granted",
				"may not get leases.coordination.k8s.io, create leases.coordination.k8s.io, update leases.coordination.k8s.io in namespace kube-system"},
		},
		{
			// GCE PD's shape: the Lease's namespace from the pod's.
			name: "the leader election's namespace from a fieldRef",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, `"--http-endpoint=:8080"]
        volumeMounts: [{name: socket-dir, mountPath: /csi}]
      volumes: [{name: socket-dir, emptyDir: {}}]`, `"--http-endpoint=:8080", "--leader-election-namespace=$(PDCSI_NAMESPACE)"]
        env: [{name: PDCSI_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}]
        volumeMounts: [{name: socket-dir, mountPath: /csi}]
      volumes: [{name: socket-dir, emptyDir: {}}]`)
			},
		},
		{
			name: "the node agent's ServiceAccount is not bound",
			mutate: func(t *testing.T, s string) string {
				s = replace(t, s, "serviceAccountName: csi-fence-attacher-node", "serviceAccountName: rbd-csi-nodeplugin")
				// The policy names it, so that only the RBAC is wrong.
				return replace(t, s, "endsWith(':csi-fence-attacher-node')", "endsWith(':rbd-csi-nodeplugin')")
			},
			want: []string{`node agent "csi-fence-attacher" runs as ServiceAccount default/rbd-csi-nodeplugin, which is not granted get fencingrequests.fencing.csi-fence.io`,
				"ClusterRoleBinding csi-fence-attacher-node binds default/csi-fence-attacher-node", "nodeServiceAccount: rbd-csi-nodeplugin"},
		},
		{
			name: "no RBAC at all (the csi-fence release's render not given)",
			mutate: func(t *testing.T, s string) string {
				return driverYAML + "---\n" + readDeploy(t, "base/admission-node.yaml")
			},
			want: []string{"no RoleBinding or ClusterRoleBinding in the input", "-f driver.yaml -f csi-fence.yaml"},
		},
		{
			name: "the gate without the failover's RBAC",
			mutate: func(t *testing.T, s string) string {
				return rebind(t, s, "csi-fence-attacher-failover-role")
			},
			want: []string{"with --feature-gates=NonGracefulFailover=true, but it is not granted patch nodes", "add the component deploy/kubernetes/failover (Helm: features.failover=true)"},
		},
		{
			// EBS's chart renders a gate of its own; ours is a second flag.
			name: "the gate in a second --feature-gates",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "--feature-gates=NonGracefulFailover=true, ", "--feature-gates=MutableCSINodeAllocatableCount=true, --feature-gates=NonGracefulFailover=true, ")
			},
		},
		{
			name: "the gate turned off by a later --feature-gates",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "--feature-gates=NonGracefulFailover=true, ", "--feature-gates=NonGracefulFailover=true, --feature-gates=NonGracefulFailover=false, ")
			},
			want: []string{"lack --feature-gates=NonGracefulFailover=true"},
		},
		{
			name: "the failover's RBAC without the gate",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "--feature-gates=NonGracefulFailover=true, ", "")
			},
			want: []string{"is granted the failover's RBAC, but its arguments lack --feature-gates=NonGracefulFailover=true"},
		},
		{
			name: "the cluster Leases' Role moved out of kube-system",
			mutate: func(t *testing.T, s string) string {
				s = replace(t, s, "name: csi-fence-attacher-cluster-leases\n  namespace: kube-system", "name: csi-fence-attacher-cluster-leases\n  namespace: default")
				return replace(t, s, "name: csi-fence-attacher-cluster-leases\n  namespace: kube-system", "name: csi-fence-attacher-cluster-leases\n  namespace: default")
			},
			want: []string{"but it is not granted create leases.coordination.k8s.io, update leases.coordination.k8s.io (in namespace kube-system for the Leases)"},
		},
		{
			name: "power named in --fencing-backends without its RBAC",
			mutate: func(t *testing.T, s string) string {
				s = replace(t, s, "--leader-election, ", "--leader-election, \"--fencing-backends=storage,power\", ")
				return rebind(t, s, "csi-fence-attacher-power-role")
			},
			want: []string{"with --fencing-backends naming power, but it is not granted list fenceagentconfigs.fencing.csi-fence.io, watch fenceagentconfigs.fencing.csi-fence.io, get secrets", "deploy/kubernetes/power-fencing"},
		},
		{
			// deploy/kubernetes/sidecar writes the user in parts.
			name: "the policy names the node agent in the sidecar component's form",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "request.userInfo.username.startsWith('system:serviceaccount:') &&\n      request.userInfo.username.endsWith(':csi-fence-attacher-node')",
					"request.userInfo.username == 'system:serviceaccount:' + 'default' + ':' + 'csi-fence-attacher-node'")
			},
		},
		{
			name: "the policy names another node agent in the sidecar component's form",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "request.userInfo.username.startsWith('system:serviceaccount:') &&\n      request.userInfo.username.endsWith(':csi-fence-attacher-node')",
					"request.userInfo.username == 'system:serviceaccount:' + 'kube-system' + ':' + 'csi-fence-attacher-node'")
			},
			want: []string{`runs as ServiceAccount "csi-fence-attacher-node", which the ValidatingAdmissionPolicy csi-fence-node-agent-own-record does not name`},
		},
		{
			name: "the node agents' Service in another namespace",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "metadata: {name: csi-fence-node-agent, namespace: default}", "metadata: {name: csi-fence-node-agent, namespace: kube-system}")
			},
			want: []string{"the Service csi-fence-node-agent is in namespace kube-system, not in default", "driver.namespace=default"},
		},
		{
			name: "a CSIDriver without attachments",
			mutate: func(t *testing.T, s string) string {
				return s + "---\napiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: cephfs.csi.ceph.com}\nspec: {attachRequired: false}\n"
			},
			want: []string{"CSIDriver cephfs.csi.ceph.com says attachRequired: false: this driver has no attachments to fence"},
		},
		{
			name: "a CSIDriver without attachments, and no attacher to replace",
			mutate: func(t *testing.T, s string) string {
				return "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: cephfs.csi.ceph.com}\nspec: {attachRequired: false}\n---\n" +
					"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: n}\nspec:\n  template:\n    spec:\n      containers: [{name: d, image: example.com/d}]\n"
			},
			want: []string{"this driver has no attachments to fence"},
			not:  "found no csi-fence-attacher controller container",
		},
		{
			name: "the node agent's socket volume shared with no container",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "args: [\"--http-endpoint=:8080\"]\n        volumeMounts: [{name: socket-dir, mountPath: /csi}]", "args: [\"--http-endpoint=:8080\"]")
			},
			want: []string{`DaemonSet default/node: container "csi-fence-attacher": its socket volume "socket-dir" (for /csi/csi.sock) is mounted by no other container`},
		},
		{
			name: "the node agent in a pod of its own, on the driver's socket through the host",
			mutate: func(t *testing.T, s string) string {
				// The driver's DaemonSet mounts the plugin directory's parent.
				s = replace(t, s, "args: [\"--http-endpoint=:8080\"]\n        volumeMounts: [{name: socket-dir, mountPath: /csi}]", "args: [\"--http-endpoint=:8080\"]\n        volumeMounts: [{name: plugins, mountPath: /plugins}]")
				s = replace(t, s, "      - {name: kubelet-dir, hostPath: {path: /var/lib/kubelet}}\n", "      - {name: kubelet-dir, hostPath: {path: /var/lib/kubelet}}\n      - {name: plugins, hostPath: {path: /var/lib/kubelet/plugins}}\n")
				return s
			},
		},
		{
			name: "the node agent on the host port of another container",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, `"--http-endpoint=:9811"`, `"--http-endpoint=:8080"`)
			},
			want: []string{`DaemonSet default/node: csi-fence-attacher "csi-fence-attacher" listens on port 8080, as container "driver" of DaemonSet default/node does, both on the host network`, "give csi-fence-attacher another port"},
		},
		{
			name: "the node agent on a port another container uses, off the host network",
			mutate: func(t *testing.T, s string) string {
				s = replace(t, s, "hostNetwork: true", "hostNetwork: false")
				return replace(t, s, `"--http-endpoint=:9811"`, `"--http-endpoint=:9812"`)
			},
		},
		{
			name: "the node agent in a Windows DaemonSet",
			mutate: func(t *testing.T, s string) string {
				return replace(t, s, "      hostNetwork: true\n", "      hostNetwork: true\n      nodeSelector: {kubernetes.io/os: windows}\n")
			},
			want: []string{"the node agent is in a DaemonSet for Windows nodes, and has no Windows build. Fix: patch the Linux node DaemonSet instead"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := check(t, tc.mutate(t, fixture(t)))
			err := r.Err()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("check fails:\n%v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("check passes; notes: %v", r.Notes)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("errors do not say %q:\n%v", w, err)
				}
			}
			if tc.not != "" && strings.Contains(err.Error(), tc.not) {
				t.Errorf("errors say %q:\n%v", tc.not, err)
			}
		})
	}
}

// A Windows node DaemonSet of the driver gets a word: no agent cleans its
// nodes.
func TestWindowsDaemonSetNote(t *testing.T) {
	s := fixture(t) + `---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-windows, namespace: default}
spec:
  template:
    spec:
      nodeSelector: {kubernetes.io/os: windows}
      containers: [{name: driver, image: example.com/driver:v1}]
`
	r := check(t, s)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	for _, n := range r.Notes {
		if strings.Contains(n, "DaemonSet default/node-windows runs on Windows nodes, where csi-fence-attacher has no node agent") {
			return
		}
	}
	t.Errorf("no note on the Windows DaemonSet: %v", r.Notes)
}

// rebind binds the named binding to another ServiceAccount.
func rebind(t *testing.T, s, binding string) string {
	t.Helper()
	return replace(t, s, "  name: "+binding+"\nsubjects:\n- kind: ServiceAccount\n  name: csi-fence-attacher\n",
		"  name: "+binding+"\nsubjects:\n- kind: ServiceAccount\n  name: someone-else\n")
}

func readDeploy(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(deployDir + f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Two releases installed side by side: an object in both, and the CRD
// in the driver's release, each fail naming the fix; csi-fence's release
// beside a driver's that only carries the containers passes.
func TestCheckReleases(t *testing.T) {
	driver := func(t *testing.T, extra string) Release {
		objs, err := Read(strings.NewReader(driverYAML + extra))
		if err != nil {
			t.Fatal(err)
		}
		return Release{Name: "driver.yaml", Objects: objs}
	}
	fence := func(t *testing.T) Release {
		var b strings.Builder
		for _, f := range []string{"base/crd-fencingrequests.yaml", "base/rbac-controller.yaml", "base/rbac-node.yaml", "base/admission-node.yaml"} {
			b.WriteString(readDeploy(t, f) + "\n---\n")
		}
		objs, err := Read(strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		return Release{Name: "csi-fence.yaml", Objects: objs}
	}
	tests := []struct {
		name     string
		releases func(t *testing.T) []Release
		want     []string
	}{
		{"the driver's containers and csi-fence's objects apart", func(t *testing.T) []Release { return []Release{driver(t, ""), fence(t)} }, nil},
		{"one release only", func(t *testing.T) []Release {
			return []Release{driver(t, "---\n"+readDeploy(t, "base/crd-fencingrequests.yaml"))}
		}, nil},
		{"csi-fence's objects in the driver's release too (the sidecar component as post-renderer)", func(t *testing.T) []Release {
			return []Release{driver(t, "---\n"+readDeploy(t, "base/rbac-node.yaml")), fence(t)}
		}, []string{"ClusterRole csi-fence-attacher-node is in driver.yaml and csi-fence.yaml", "deploy/kubernetes/attacher-image"}},
		{"the CRD in the driver's release", func(t *testing.T) []Release {
			return []Release{driver(t, "---\n"+readDeploy(t, "base/crd-fencingrequests.yaml")), fence(t)}
		}, []string{"CustomResourceDefinition fencingrequests.fencing.csi-fence.io is in driver.yaml with the driver's workloads", "install the CRDs with the csi-fence chart"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := strings.Join(CheckReleases(tc.releases(t), "default"), "\n")
			if len(tc.want) == 0 && errs != "" {
				t.Fatalf("errors:\n%s", errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("errors do not say %q:\n%s", w, errs)
				}
			}
		})
	}
}
