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
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// partialAttacher is a ServiceAccount with external-attacher's stock RBAC
// less what one of its informers needs (list/watch CSINodes, which
// external-attacher's RBAC of some releases lacked): the controller never
// syncs.
const partialAttacher = "csi-attacher-partial"

func init() {
	// Its denied lists and watches of CSINodes are the point of
	// TestHealthReflectsInformerSync; the leader's Event is the one the
	// stock RBAC does not grant (see expectedDenials).
	expectedDenials[productServiceAccounts+partialAttacher] = []string{
		"list storage.k8s.io/csinodes /", "watch storage.k8s.io/csinodes /", "create core/events default/",
	}
}

// health answers GET path on the attacher's HTTP endpoint: status and body.
func health(ctx context.Context, addr, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	return rsp.StatusCode, string(b), err
}

// waitHealth waits until GET path answers code, and returns the body.
func waitHealth(ctx context.Context, t *testing.T, addr, path string, code int, timeout time.Duration) string {
	t.Helper()
	var body string
	var last int
	if err := framework.WaitFor(ctx, timeout, path+" answering "+http.StatusText(code), func(ctx context.Context) (bool, error) {
		var err error
		last, body, err = health(ctx, addr, path)
		return err == nil && last == code, nil
	}); err != nil {
		t.Fatalf("%v (last answer %d: %q)", err, last, body)
	}
	return body
}

// The controller role's health endpoints follow its caches: with an RBAC
// that lets it lead but not list one kind its informers watch, /readyz says
// not ready at once, naming the kind, /healthz/informer-sync stays healthy
// for its grace period and then fails (a liveness probe restarts the
// container, which a silent outage never would); once the missing rule is
// granted, the informer syncs and both answer 200.
func TestHealthReflectsInformerSync(t *testing.T) {
	ctx := context.Background()
	if err := cluster.ApplyManifest(ctx, "pkg/sidecar/testdata/external-attacher-rbac.yaml", ""); err != nil {
		t.Fatal(err)
	}
	stock, err := cluster.Client.RbacV1().ClusterRoles().Get(ctx, "external-attacher-runner", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lacksCSINodes := slices.DeleteFunc(slices.Clone(stock.Rules), func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "csinodes")
	})
	if len(lacksCSINodes) != len(stock.Rules)-1 {
		t.Fatalf("external-attacher's ClusterRole has no csinodes rule to leave out: %+v", stock.Rules)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: partialAttacher}, Rules: lacksCSINodes}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: partialAttacher, Namespace: "default"}}
	for _, create := range []func() error{
		func() error {
			_, err := cluster.Client.CoreV1().ServiceAccounts("default").Create(ctx,
				&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: partialAttacher}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cluster.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cluster.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: partialAttacher}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: partialAttacher}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cluster.Client.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: partialAttacher}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "external-attacher-cfg"}}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, "default", partialAttacher)
	if err != nil {
		t.Fatal(err)
	}
	if err := product.RestartAttacher(ctx, "--kubeconfig="+kubeconfig); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := product.RestartAttacher(ctx); err != nil {
			t.Errorf("restarting csi-fence-attacher with deploy/'s RBAC for the next tests: %v", err)
		}
	}()
	addr := product.AttacherHTTP
	// The killed replica's Lease expires first; then this one leads and
	// waits for its caches.
	if err := framework.WaitFor(ctx, 60*time.Second, "csi-fence-attacher leading", func(ctx context.Context) (bool, error) {
		return framework.Leading(ctx, addr)
	}); err != nil {
		t.Fatal(err)
	}
	leading := time.Now()
	body := waitHealth(ctx, t, addr, sidecar.ReadyzPath, http.StatusServiceUnavailable, 30*time.Second)
	if !strings.Contains(body, "CSINode") {
		t.Errorf("%s does not name the cache that does not sync: %q", sidecar.ReadyzPath, body)
	}
	code, body, err := health(ctx, addr, sidecar.SyncHealthzPath)
	switch {
	case err != nil:
		t.Fatal(err)
	case time.Since(leading) < sidecar.SyncGracePeriod && code != http.StatusOK:
		t.Errorf("%s failed within its grace period: %d %q", sidecar.SyncHealthzPath, code, body)
	}
	body = waitHealth(ctx, t, addr, sidecar.SyncHealthzPath, http.StatusServiceUnavailable, sidecar.SyncGracePeriod+time.Minute)
	if !strings.Contains(body, "CSINode") {
		t.Errorf("%s does not name the cache that does not sync: %q", sidecar.SyncHealthzPath, body)
	}

	// Granted: the reflector's next list succeeds (its backoff is at most
	// about a minute).
	role.Rules = stock.Rules
	if _, err := cluster.Client.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHealth(ctx, t, addr, sidecar.ReadyzPath, http.StatusOK, 2*time.Minute)
	waitHealth(ctx, t, addr, sidecar.SyncHealthzPath, http.StatusOK, 10*time.Second)
}
