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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/powerfence"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// The FenceAgentConfig CRD on the real apiserver: created with strict field
// validation, it refuses what it must (an agent that is not fence_*, a
// config with no node), keeps every field (a field pruned by the schema
// would silently drop a BMC address), and pkg/powerfence resolves a node's
// options and credentials from it and a real Secret through client-go, then
// runs the agent with them. The agent is a script: the real fence_ipmilan
// and a real BMC are test/bmcsim's business.
func TestFenceAgentConfigOnAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.ApplyManifest(ctx, "deploy/kubernetes/base/crd-fenceagentconfigs.yaml", ""); err != nil {
		t.Fatal(err)
	}
	res := cluster.Dynamic.Resource(fencingv1alpha1.FenceAgentConfigResource)
	strict := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	cfg := &fencingv1alpha1.FenceAgentConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-power"},
		Spec: fencingv1alpha1.FenceAgentConfigSpec{
			Agent:            "fence_e2e",
			SharedParameters: map[string]string{"lanplus": "1"},
			Credentials: &fencingv1alpha1.FenceAgentCredentials{SecretName: "e2e-bmc", SecretNamespace: "kube-system",
				Parameters: map[string]string{"username": "user", "password": "pass"}},
			Nodes:    []fencingv1alpha1.FenceAgentNode{{Name: "e2e-power-node", Parameters: map[string]string{"ip": "192.0.2.7"}}},
			Timeouts: &fencingv1alpha1.FenceAgentTimeouts{CallTimeoutSeconds: 10, RetryIntervalSeconds: 1},
		},
	}
	u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The CRD is served a moment after it is created.
	if err := framework.WaitFor(ctx, 30*time.Second, "FenceAgentConfig served", func(ctx context.Context) (bool, error) {
		_, err := res.Create(ctx, u, strict)
		return err == nil || apierrors.IsAlreadyExists(err), nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })

	got, err := res.Get(ctx, cfg.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	back, err := fencingv1alpha1.FenceAgentConfigFromUnstructured(got)
	if err != nil {
		t.Fatal(err)
	}
	if back.Spec.Nodes[0].Parameters["ip"] != "192.0.2.7" || back.Spec.Credentials.Parameters["password"] != "pass" ||
		back.Spec.Timeouts.CallTimeoutSeconds != 10 || back.Spec.SharedParameters["lanplus"] != "1" {
		t.Errorf("the apiserver lost fields: %+v", back.Spec)
	}

	for _, bad := range []struct {
		name   string
		mutate func(*fencingv1alpha1.FenceAgentConfig)
		want   string
	}{
		{"not-a-fence-agent", func(c *fencingv1alpha1.FenceAgentConfig) { c.Spec.Agent = "rm" }, "spec.agent"},
		{"no-nodes", func(c *fencingv1alpha1.FenceAgentConfig) { c.Spec.Nodes = nil }, "spec.nodes"},
		{"secret-without-namespace", func(c *fencingv1alpha1.FenceAgentConfig) { c.Spec.Credentials.SecretNamespace = "" }, "secretNamespace"},
	} {
		// A deep copy by way of the converter.
		c, err := fencingv1alpha1.FenceAgentConfigFromUnstructured(u.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		c.Name = "e2e-" + bad.name
		bad.mutate(c)
		u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Create(ctx, u, strict); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: created or wrong error: %v", bad.name, err)
			_ = res.Delete(ctx, c.Name, metav1.DeleteOptions{})
		}
	}

	const password = "e2e-bmc-Pa55word"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "e2e-bmc", Namespace: "kube-system",
		Labels: map[string]string{contract.FenceAgentCredentialsLabel: contract.FenceAgentCredentialsTrue}},
		Data: map[string][]byte{"user": []byte("admin"), "pass": []byte(password)}}
	if _, err := cluster.Client.CoreV1().Secrets("kube-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().Secrets("kube-system").Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})

	// An agent that keeps its stdin and says the node is off.
	dir := t.TempDir()
	script := "#!/bin/sh\ncat > " + filepath.Join(dir, "stdin") + "\necho 'Status: OFF'\nexit 2\n"
	if err := os.WriteFile(filepath.Join(dir, "fence_e2e"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	backend := powerfence.NewBackend(&powerfence.Resolver{Dynamic: cluster.Dynamic, Kube: cluster.Client, AgentDirs: []string{dir}})
	st, err := backend.Status(ctx, "e2e-power-node")
	if err != nil || st.State != powerfence.PowerOff || st.Config != cfg.Name {
		t.Fatalf("status through the real apiserver: %+v, %v", st, err)
	}
	stdin, err := os.ReadFile(filepath.Join(dir, "stdin"))
	if err != nil {
		t.Fatal(err)
	}
	want := "lanplus=1\nip=192.0.2.7\npassword=" + password + "\nusername=admin\nnodename=e2e-power-node\naction=status\n"
	if string(stdin) != want {
		t.Errorf("agent stdin %q, want %q", stdin, want)
	}
	if _, err := backend.Status(ctx, "some-other-node"); err == nil || !strings.Contains(err.Error(), powerfence.ErrNodeNotConfigured.Error()) {
		t.Errorf("a node no config lists: %v", err)
	}
}
