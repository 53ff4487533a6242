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
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// upstreamDeployment is external-attacher's own example, in the module our
// go.mod pins.
const upstreamDeployment = "deploy/kubernetes/deployment.yaml"

// upstreamContainer reads the csi-attacher container of external-attacher's
// deployment.yaml from the module cache.
func upstreamContainer(t *testing.T) (corev1.Container, *appsv1.Deployment) {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubernetes-csi/external-attacher/v4")
	cmd.Dir = framework.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("locating external-attacher's module: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), upstreamDeployment)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "csi-attacher" {
				return c, &d
			}
		}
	}
	t.Fatalf("%s has no csi-attacher container", path)
	return corev1.Container{}, nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) in s with env's value, as the kubelet expands a
// container's args; an undefined reference stays as it is.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// A Deployment that swaps external-attacher's image for csi-fence-attacher
// keeps external-attacher's container args: the ones of its own
// deploy/kubernetes/deployment.yaml (v4.13.0), read from the module and
// passed unchanged, run it, and it attaches and detaches. The process runs
// as that pod would: its environment from the manifest, the in-cluster
// client config (the ServiceAccount's token and CA where a pod has them,
// the apiserver in KUBERNETES_SERVICE_HOST/PORT), the driver's socket in
// the emptyDir the manifest mounts, a hostname of its own, with the
// manifest's ServiceAccount (external-attacher's stock RBAC).
func TestExternalAttacherDeploymentArgs(t *testing.T) {
	ctx := context.Background()
	container, deployment := upstreamContainer(t)
	podName := "csi-attacher-e2e"
	env := map[string]string{}
	var envArgs []string
	for _, e := range container.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Fatalf("env %s: only metadata.name is emulated, got %+v", e.Name, e.ValueFrom)
			}
			v = podName
		}
		env[e.Name] = v
		envArgs = append(envArgs, e.Name+"="+v)
	}
	var args []string
	for _, a := range container.Args {
		args = append(args, expand(a, env))
	}
	t.Logf("external-attacher's args %q, run as %q", container.Args, args)
	socketDir := ""
	for _, m := range container.VolumeMounts {
		if m.Name == "socket-dir" {
			socketDir = m.MountPath
		}
	}
	if socketDir == "" || !strings.HasPrefix(env["ADDRESS"], socketDir) {
		t.Fatalf("the manifest no longer serves the driver's socket from the socket-dir volume: mounts %+v, env %v", container.VolumeMounts, env)
	}
	httpPort := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--http-endpoint="); ok {
			_, httpPort, _ = net.SplitHostPort(v)
		}
	}
	if httpPort == "" {
		t.Fatalf("the manifest's args name no --http-endpoint: %q", args)
	}
	if l, err := net.Listen("tcp", ":"+httpPort); err != nil {
		t.Skipf("port %s of the manifest's --http-endpoint is taken on this machine: %v", httpPort, err)
	} else {
		l.Close()
	}

	// The pod's ServiceAccount, with external-attacher's own RBAC.
	if err := cluster.ApplyManifest(ctx, "pkg/sidecar/testdata/external-attacher-rbac.yaml", ""); err != nil {
		t.Fatal(err)
	}
	sa := deployment.Spec.Template.Spec.ServiceAccountName
	if sa == "" {
		sa = deployment.Spec.Template.Spec.DeprecatedServiceAccount
	}
	exp := int64(3600)
	tok, err := cluster.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets := t.TempDir()
	ca := cluster.Config.TLSClientConfig.CAData
	if ca == nil {
		if ca, err = os.ReadFile(cluster.Config.TLSClientConfig.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string][]byte{"token": []byte(tok.Status.Token), "ca.crt": ca, "namespace": []byte("default")} {
		if err := os.WriteFile(filepath.Join(secrets, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	server, err := url.Parse(cluster.Config.Host)
	if err != nil {
		t.Fatal(err)
	}

	// One replica at a time: the product's attacher steps down, this one
	// takes external-attacher's Lease once it expires.
	product.KillAttacher()
	defer func() {
		if err := product.StartAttacher(ctx); err != nil {
			t.Errorf("restarting csi-fence-attacher for the next tests: %v", err)
		}
	}()
	// A private mount namespace stands for the pod's filesystem: tmpfs over
	// /var/lib and /run, the emptyDir with the driver's socket, the
	// ServiceAccount's files where the kubelet mounts them.
	const script = `set -e
hostname "$MY_POD"
mount -t tmpfs tmpfs /var/lib
mkdir -p "$SOCKET_DIR"
ln -s "$DRIVER_SOCKET" "$ADDRESS_PATH"
mount -t tmpfs tmpfs /run
mkdir -p /run/secrets/kubernetes.io/serviceaccount
cp "$SECRETS"/* /run/secrets/kubernetes.io/serviceaccount/
exec "$0" "$@"`
	cmdline := append([]string{"--mount", "--uts", "env",
		"MY_POD=" + podName, "SOCKET_DIR=" + socketDir, "ADDRESS_PATH=" + env["ADDRESS"],
		"DRIVER_SOCKET=" + filepath.Join(cluster.WorkDir, "controller.sock"), "SECRETS=" + secrets,
		"KUBERNETES_SERVICE_HOST=" + server.Hostname(), "KUBERNETES_SERVICE_PORT=" + server.Port()},
		envArgs...)
	cmdline = append(cmdline, "sh", "-c", script, filepath.Join(product.BinDir, "csi-fence-attacher"))
	cmdline = append(cmdline, args...)
	proc, err := cluster.StartProcess("csi-fence-attacher-upstream-args", "unshare", cmdline...)
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Stop(10 * time.Second)
	addr := "127.0.0.1:" + httpPort
	if err := framework.WaitFor(ctx, 90*time.Second, "csi-fence-attacher with external-attacher's args leading", func(ctx context.Context) (bool, error) {
		if proc.Exited() {
			return false, fmt.Errorf("exited: %v\n%s", proc.Err(), proc.Tail(30))
		}
		leading, _ := framework.Leading(ctx, addr)
		return leading, nil
	}); err != nil {
		t.Fatal(err)
	}

	envS, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "uargs", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	node, err := envS.WaitAttached(ctx, 0, "", 90*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Tail(30))
	}
	if err := cluster.Client.AppsV1().StatefulSets(envS.NS).Delete(ctx, envS.App, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 90*time.Second, "VolumeAttachment deleted", func(ctx context.Context) (bool, error) {
		va, err := envS.VA(ctx, envS.Volumes[0], node)
		return va == nil, err
	}); err != nil {
		t.Fatalf("%v\n%s", err, proc.Tail(30))
	}
	if proc.Exited() {
		t.Fatalf("csi-fence-attacher exited: %v", proc.Err())
	}
	expectNoViolations(t)
}
