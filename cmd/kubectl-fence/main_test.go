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

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Arguments are refused before any API access (the kubeconfig here does not
// exist: reaching the API would fail differently).
func TestTerminateArguments(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"terminate", "--reason=x"}, "exactly one pod/NAME"},
		{[]string{"terminate", "db-0", "--reason=x"}, "not pod/NAME"},
		{[]string{"terminate", "deployment/web", "--reason=x"}, "only pods"},
		{[]string{"terminate", "pod/", "--reason=x"}, "not pod/NAME"},
		{[]string{"terminate", "pod/db-0"}, "--reason is required"},
		{[]string{"terminate", "pod/a", "pod/b", "--reason=x"}, "exactly one"},
		// Flags after the name, as kubectl takes them: parsed, then the
		// (missing) kubeconfig is the first thing that fails.
		{[]string{"terminate", "pod/db-0", "--reason=x", "-n", "ns", "--kubeconfig=/nonexistent/kubeconfig"}, "nonexistent"},
	} {
		err := newTestPlugin(t, nil, nil, "").execute(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}

// The grace period as kubectl delete takes it: 0 alone becomes 1 (a
// graceful delete, so that a pod on a live node is not force-deleted by a
// slip), --force with 0 (or no grace period) is a force delete, with
// kubectl's warning, and --force with another grace period is ignored,
// with a warning.
func TestTerminateGracePeriod(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		wantGrace   int64 // -1: none sent, the pod's own
		wantForce   bool
		wantWarning string
	}{
		{args: nil, wantGrace: -1},
		{args: []string{"--grace-period=30"}, wantGrace: 30},
		{args: []string{"--grace-period=1"}, wantGrace: 1},
		{args: []string{"--grace-period=0"}, wantGrace: 1},
		{args: []string{"--grace-period=-1"}, wantGrace: -1},
		{args: []string{"--grace-period=0", "--force"}, wantGrace: 0, wantForce: true, wantWarning: "Immediate deletion does not wait"},
		{args: []string{"--force"}, wantGrace: 0, wantForce: true, wantWarning: "Immediate deletion does not wait"},
		{args: []string{"--force", "--grace-period=5"}, wantGrace: 5, wantWarning: "--force is ignored because --grace-period is not 0"},
		{args: []string{"--force=false", "--grace-period=0"}, wantGrace: 1},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			kube := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "shop", UID: "u1"}})
			p := newTestPlugin(t, kube, nil, "")
			if err := p.execute(append([]string{"terminate", "pod/db-0", "--reason=x", "-n", "shop"}, tc.args...)...); err != nil {
				t.Fatal(err)
			}
			grace := int64(-2)
			for _, a := range kube.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok {
					grace = -1
					if g := d.GetDeleteOptions().GracePeriodSeconds; g != nil {
						grace = *g
					}
				}
			}
			if grace != tc.wantGrace {
				t.Errorf("grace period %d sent, want %d", grace, tc.wantGrace)
			}
			warning := p.errOut.String()
			if (tc.wantWarning == "") != (warning == "") || !strings.Contains(warning, tc.wantWarning) {
				t.Errorf("warning %q, want %q", warning, tc.wantWarning)
			}
			if forced := strings.Contains(p.out.String(), "pod/db-0 force deleted (reason: x)"); forced != tc.wantForce {
				t.Errorf("output %q says force deleted: %v, want %v", p.out.String(), forced, tc.wantForce)
			}
			if !tc.wantForce && !strings.Contains(p.out.String(), "pod/db-0 terminated (reason: x)") {
				t.Errorf("output %q", p.out.String())
			}
		})
	}
}

// check-manifests reads built manifests and fails, saying what it looked
// for, when csi-fence-attacher is not in them; it passes on the
// repository's own example (deploy/kubernetes tests the driver overlays).
func TestCheckManifests(t *testing.T) {
	const attacherOnly = `apiVersion: apps/v1
kind: Deployment
metadata: {name: ctrl, namespace: storage}
spec:
  selector: {matchLabels: {app: c}}
  template:
    metadata: {labels: {app: c}}
    spec:
      containers:
      - name: csi-attacher
        image: registry.k8s.io/sig-storage/csi-attacher:v4.10.0
        args: [--csi-address=/csi/csi.sock]
        volumeMounts: [{name: socket-dir, mountPath: /csi}]
      - name: driver
        image: example.com/driver:v1
        volumeMounts: [{name: socket-dir, mountPath: /csi}]
      volumes: [{name: socket-dir, emptyDir: {}}]
`
	replaced := strings.Replace(attacherOnly, "registry.k8s.io/sig-storage/csi-attacher:v4.10.0", "ghcr.io/csi-fence/csi-fence-attacher:v0.1.0", 1)
	// The fenced detach's RBAC, rendered apart (a second Helm release), bound
	// to the controller's ServiceAccount in storage.
	bound := strings.Replace(replaced, "    spec:\n      containers:", "    spec:\n      serviceAccountName: csi-fence-attacher\n      containers:", 1)
	rbac, err := os.ReadFile("../../deploy/kubernetes/base/rbac-attacher.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rbacFile := filepath.Join(t.TempDir(), "csi-fence.yaml")
	if err := os.WriteFile(rbacFile, []byte(strings.ReplaceAll(string(rbac), "namespace: default", "namespace: storage")), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		input   string
		wantErr string // "" for success
		wantOut string
	}{
		{"external-attacher left", nil, attacherOnly, `Deployment storage/ctrl: container "csi-attacher" still runs external-attacher`, ""},
		{"nothing at all", nil, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "no Deployment, StatefulSet, DaemonSet, ReplicaSet or Pod in the input", ""},
		{"replaced, no node agent", nil, replaced, "found no csi-fence-attacher node agent", "found: Deployment storage/ctrl"},
		{"replaced, node agent elsewhere, without its RBAC", []string{"--controller-only"}, replaced, "no RoleBinding or ClusterRoleBinding in the input", ""},
		{"replaced, node agent elsewhere, its RBAC in a second file", []string{"--controller-only", "-f", "-", "-f", rbacFile}, bound, "", "ok: csi-fence-attacher is in place"},
		{"its RBAC bound in another namespace", []string{"--controller-only", "-f", "-", "-f", rbacFile}, replaced, "runs as ServiceAccount storage/default, which is not granted", ""},
		// The same RBAC rendered by both releases (the driver's post-renderer
		// given the whole sidecar component).
		{"an object in two releases", []string{"--controller-only", "-f", "-", "-f", rbacFile}, bound + "---\n" + strings.ReplaceAll(string(rbac), "namespace: default", "namespace: storage"),
			"ClusterRole csi-fence-attacher-runner is in - and " + rbacFile, ""},
		{"a flag it does not accept", []string{"--controller-only"}, strings.Replace(replaced, "args: [--csi-address=/csi/csi.sock]", "args: [--csi-address=/csi/csi.sock, --no-such-flag]", 1),
			"does not accept its arguments: flag provided but not defined: -no-such-flag", ""},
		{"not YAML", nil, "{{{", "reading the manifests", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPlugin(t, nil, nil, tc.input)
			err := p.execute(append([]string{"check-manifests"}, tc.args...)...)
			out := p.out
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("output %q, want %q", out.String(), tc.wantOut)
			}
		})
	}
}

// Every documented verb is a command (check-manifests was documented and
// tested but not in the table, so `kubectl fence check-manifests` said
// "unknown command").
func TestRootKnowsEveryVerb(t *testing.T) {
	root := newRootCommand(newTestPlugin(t, nil, nil, "").f)
	for _, verb := range []string{"check-manifests", "completion", "fence", "pause", "release", "resume", "status", "terminate", "timeline", "version"} {
		if c, _, err := root.Find([]string{verb}); err != nil || c == root {
			t.Errorf("kubectl fence %s is not a command: %v", verb, err)
		}
	}
	err := newTestPlugin(t, nil, nil, "").execute("check-manifests", "-f", "/nonexistent/manifests.yaml")
	if err == nil || strings.Contains(err.Error(), "unknown command") {
		t.Errorf("check-manifests: %v, want it to run and fail on the missing file", err)
	}
}
