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

package powerfence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

func bmcConfig(name string, mutate func(*fencingv1alpha1.FenceAgentConfig)) *fencingv1alpha1.FenceAgentConfig {
	c := &fencingv1alpha1.FenceAgentConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fencingv1alpha1.FenceAgentConfigSpec{
			Agent:            "fence_ipmilan",
			SharedParameters: map[string]string{"lanplus": "1", "cipher": "3"},
			Credentials: &fencingv1alpha1.FenceAgentCredentials{SecretName: "bmc", SecretNamespace: "kube-system",
				Parameters: map[string]string{"username": "user", "password": "pass"}},
			Nodes: []fencingv1alpha1.FenceAgentNode{
				{Name: "node-1", Parameters: map[string]string{"ip": "10.0.0.1"}},
				{Name: "node-2", Parameters: map[string]string{"ip": "10.0.0.2", "cipher": "17"},
					Credentials: &fencingv1alpha1.FenceAgentCredentials{SecretName: "bmc-node-2", SecretNamespace: "kube-system",
						Parameters: map[string]string{"password": "pass"}}},
			},
		},
	}
	if mutate != nil {
		mutate(c)
	}
	return c
}

var testSecrets = map[string]map[string][]byte{
	"kube-system/bmc":        {"user": []byte("admin"), "pass": []byte("shared-pw")},
	"kube-system/bmc-node-2": {"pass": []byte("node-2-pw")},
	// Secrets that did not opt in as fence agent credentials: another
	// team's, or one labelled by a slip.
	"team-a/db":       {"user": []byte("app-user"), "pass": []byte("db-pw")},
	"kube-system/yes": {"user": []byte("admin"), "pass": []byte("yes-pw")},
}

// testSecretLabels are the labels of testSecrets (none: no label).
var testSecretLabels = map[string]map[string]string{
	"kube-system/bmc":        {contract.FenceAgentCredentialsLabel: "true"},
	"kube-system/bmc-node-2": {contract.FenceAgentCredentialsLabel: "true", "team": "infra"},
	"kube-system/yes":        {contract.FenceAgentCredentialsLabel: "yes"},
}

func testSecret(key string) *corev1.Secret {
	namespace, name, _ := strings.Cut(key, "/")
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: testSecretLabels[key]},
		Data: testSecrets[key]}
}

func readTestSecret(namespace, name string) (*corev1.Secret, error) {
	if _, ok := testSecrets[namespace+"/"+name]; ok {
		return testSecret(namespace + "/" + name), nil
	}
	return nil, fmt.Errorf("secrets %q not found", name)
}

func TestTargetFor(t *testing.T) {
	tests := []struct {
		name    string
		cfg     *fencingv1alpha1.FenceAgentConfig
		node    string
		want    []Option
		wantErr string
		check   func(*testing.T, *Target)
	}{
		{
			name: "shared parameters, the node's, shared credentials, the node's name",
			cfg:  bmcConfig("rack-1", nil), node: "node-1",
			want: []Option{{Name: "cipher", Value: "3"}, {Name: "lanplus", Value: "1"}, {Name: "ip", Value: "10.0.0.1"},
				{Name: "password", Value: "shared-pw", Secret: true}, {Name: "username", Value: "admin", Secret: true},
				{Name: "nodename", Value: "node-1"}},
			check: func(t *testing.T, target *Target) {
				if a := target.Agent; a.CallTimeout != DefaultCallTimeout || a.Retries != DefaultRetries || a.RetryInterval != DefaultRetryInterval ||
					target.ConfirmTimeout != DefaultConfirmTimeout || target.StatusInterval != DefaultStatusInterval {
					t.Errorf("defaults not applied: %+v %+v", target, a)
				}
			},
		},
		{
			name: "the node's parameters and credentials win",
			cfg:  bmcConfig("rack-1", nil), node: "node-2",
			want: []Option{{Name: "cipher", Value: "17"}, {Name: "lanplus", Value: "1"}, {Name: "ip", Value: "10.0.0.2"},
				{Name: "password", Value: "node-2-pw", Secret: true}, {Name: "nodename", Value: "node-2"}},
		},
		{
			name: "timeouts",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Timeouts = &fencingv1alpha1.FenceAgentTimeouts{CallTimeoutSeconds: 30, Retries: ptr.To[int32](0),
					RetryIntervalSeconds: 1, ConfirmTimeoutSeconds: 90, StatusIntervalSeconds: 3}
			}),
			node: "node-1",
			check: func(t *testing.T, target *Target) {
				if a := target.Agent; a.CallTimeout != 30*time.Second || a.Retries != 0 || a.RetryInterval != time.Second ||
					target.ConfirmTimeout != 90*time.Second || target.StatusInterval != 3*time.Second {
					t.Errorf("timeouts not applied: %+v %+v", target, a)
				}
			},
		},
		{
			name: "a plug given as nodename is kept",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Nodes[0].Parameters["nodename"] = "vm-17"
			}),
			node: "node-1",
			check: func(t *testing.T, target *Target) {
				var values []string
				for _, o := range target.Agent.Options {
					if o.Name == "nodename" {
						values = append(values, o.Value)
					}
				}
				if !reflect.DeepEqual(values, []string{"vm-17"}) {
					t.Errorf("nodename %v, want the configured vm-17 only", values)
				}
			},
		},
		{
			name: "a password in the config is refused",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.SharedParameters["passwd"] = "oops"
			}),
			node: "node-1", wantErr: `parameter "passwd" looks like a credential`,
		},
		{
			name: "so is a token, in any spelling",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Nodes[0].Parameters["API-Token"] = "oops"
			}),
			node: "node-1", wantErr: `parameter "API-Token" looks like a credential`,
		},
		{
			name: "a password script is a path, not a secret",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.SharedParameters["passwd_script"] = "/etc/fence/pw"
			}),
			node: "node-1",
		},
		{
			name: "a credential that is also a parameter",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Nodes[0].Parameters["username"] = "root"
			}),
			node: "node-1", wantErr: "option username is both a parameter and a credential",
		},
		{
			name: "a missing Secret key",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Credentials.Parameters["password"] = "nope"
			}),
			node: "node-1", wantErr: `Secret kube-system/bmc has no key "nope" (for option password)`,
		},
		{
			name: "a missing Secret",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Credentials.SecretName = "gone"
			}),
			node: "node-1", wantErr: "reading Secret kube-system/gone",
		},
		{
			name: "a Secret without the label is not fence agent credentials",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Credentials.SecretNamespace, c.Spec.Credentials.SecretName = "team-a", "db"
			}),
			node:    "node-1",
			wantErr: `Secret team-a/db does not opt in as fence agent credentials: it needs the label csi-fence.io/fence-agent-credentials="true"`,
		},
		{
			name: "nor is a node's own",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Nodes[1].Credentials.SecretNamespace, c.Spec.Nodes[1].Credentials.SecretName = "team-a", "db"
			}),
			node:    "node-2",
			wantErr: `Secret team-a/db does not opt in as fence agent credentials: it needs the label csi-fence.io/fence-agent-credentials="true"`,
		},
		{
			name: "the label with another value does not opt in",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Credentials.SecretName = "yes"
			}),
			node:    "node-1",
			wantErr: `Secret kube-system/yes does not opt in as fence agent credentials: its label csi-fence.io/fence-agent-credentials is "yes", not "true"`,
		},
		{
			name: "the action cannot be configured",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.SharedParameters["action"] = "reboot"
			}),
			node: "node-1", wantErr: `"action" is set by the fence itself`,
		},
		{
			name: "a node not in the config",
			cfg:  bmcConfig("rack-1", nil), node: "node-9", wantErr: ErrNodeNotConfigured.Error(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target, err := targetFor(tc.cfg, tc.node, "/usr/sbin/fence_ipmilan", readTestSecret)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				for _, d := range testSecrets {
					for _, v := range d {
						if strings.Contains(err.Error(), string(v)) && string(v) != "admin" {
							t.Errorf("error shows a Secret value: %v", err)
						}
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if target.Node != tc.node || target.Config != "rack-1" || target.Agent.Path != "/usr/sbin/fence_ipmilan" {
				t.Errorf("target %+v", target)
			}
			if tc.want != nil && !reflect.DeepEqual(target.Agent.Options, tc.want) {
				t.Errorf("options\n%+v\nwant\n%+v", target.Agent.Options, tc.want)
			}
			if tc.check != nil {
				tc.check(t, target)
			}
		})
	}
}

func TestConfigFor(t *testing.T) {
	other := bmcConfig("rack-2", func(c *fencingv1alpha1.FenceAgentConfig) {
		c.Spec.Nodes = []fencingv1alpha1.FenceAgentNode{{Name: "node-3"}, {Name: "node-2"}}
	})
	configs := []fencingv1alpha1.FenceAgentConfig{*bmcConfig("rack-1", nil), *other}
	for _, tc := range []struct{ node, want, wantErr string }{
		{node: "node-1", want: "rack-1"},
		{node: "node-3", want: "rack-2"},
		{node: "node-2", wantErr: "node node-2 is listed by several FenceAgentConfigs (rack-1, rack-2)"},
		{node: "node-9", wantErr: ErrNodeNotConfigured.Error()},
	} {
		c, err := ConfigFor(configs, tc.node)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.node, err, tc.wantErr)
			}
		case err != nil || c.Name != tc.want:
			t.Errorf("%s: got %v, %v; want %s", tc.node, c, err, tc.want)
		}
	}
	if _, err := ConfigFor(nil, "node-1"); !errors.Is(err, ErrNodeNotConfigured) {
		t.Errorf("error %v, want ErrNodeNotConfigured", err)
	}
}

func TestLookAgent(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"fence_good": 0o755, "fence_noexec": 0o644, "fence_rel": 0o755, "rm": 0o755} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "fence_dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		r       Resolver
		agent   string
		want    string
		wantErr string
	}{
		{name: "found", r: Resolver{AgentDirs: []string{"/nonexistent", dir}}, agent: "fence_good", want: filepath.Join(dir, "fence_good")},
		{name: "not a fence agent, even if it is there", r: Resolver{AgentDirs: []string{dir}}, agent: "rm", wantErr: "not a fence agent name"},
		{name: "no path tricks", r: Resolver{AgentDirs: []string{dir}}, agent: "fence_../../bin/sh", wantErr: "not a fence agent name"},
		{name: "not executable", r: Resolver{AgentDirs: []string{dir}}, agent: "fence_noexec", wantErr: exec.ErrNotFound.Error()},
		{name: "a directory", r: Resolver{AgentDirs: []string{dir}}, agent: "fence_dir", wantErr: exec.ErrNotFound.Error()},
		{name: "never a relative directory", r: Resolver{AgentDirs: []string{"."}}, agent: "fence_rel", wantErr: exec.ErrNotFound.Error()},
		{name: "allow-listed", r: Resolver{AgentDirs: []string{dir}, AllowedAgents: []string{"fence_good"}}, agent: "fence_good", want: filepath.Join(dir, "fence_good")},
		{name: "not allow-listed", r: Resolver{AgentDirs: []string{dir}, AllowedAgents: []string{"fence_ipmilan"}}, agent: "fence_good", wantErr: "not allowed here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "never a relative directory" {
				t.Chdir(dir)
			}
			got, err := tc.r.lookAgent(tc.agent)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// The backend reads the config and the Secret through client-go, runs the
// agent with the Secret's values on stdin, and logs none of them.
func TestBackendWithClients(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(10), ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	f := newFakeAgent(t, map[Action][]int{ActionOff: {0}, ActionStatus: {2}}, "")
	cfg := bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) { c.Spec.Agent = "fence_fake" })
	u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.FenceAgentConfigResource: "FenceAgentConfigList"}, u)
	kube := fake.NewClientset(testSecret("kube-system/bmc"))
	b := NewBackend(&Resolver{Dynamic: dyn, Kube: kube, AgentDirs: []string{f.dir}})

	res, err := b.Fence(ctx, "node-1")
	if err != nil || !res.Confirmed || res.State != PowerOff || res.Config != "rack-1" {
		t.Fatalf("fence: %+v, %v", res, err)
	}
	if got := f.read("stdin", ActionOff, 1); !strings.Contains(got, "password=shared-pw\n") || !strings.Contains(got, "ip=10.0.0.1\n") {
		t.Errorf("agent stdin %q lacks the Secret's password or the node's address", got)
	}
	res, err = b.Fence(ctx, "node-9")
	if !errors.Is(err, ErrNodeNotConfigured) || res.Confirmed || res.Node != "node-9" {
		t.Errorf("unconfigured node: %+v, %v", res, err)
	}
	// node-2's Secret does not exist: no agent runs.
	if _, err := b.Fence(ctx, "node-2"); err == nil || !strings.Contains(err.Error(), "bmc-node-2") {
		t.Errorf("node with a missing Secret: %v", err)
	}
	if n := f.calls(ActionOff); n != 1 {
		t.Errorf("off ran %d times, want 1", n)
	}
	b2, _ := json.Marshal(res)
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, text := range []string{logs, string(b2)} {
		if strings.Contains(text, "shared-pw") {
			t.Errorf("the password shows in:\n%s", text)
		}
	}
}

// A FenceAgentConfig may name any Secret, and the sidecar may read any
// Secret (external-attacher's publish secrets): only a Secret labelled as
// fence agent credentials is used, or anyone who may write a config could
// have another team's password sent to an address of their choosing. A
// refused Secret stops the fence before the agent runs, with an error that
// says which Secret and which label, and no value of it.
func TestBackendUsesOnlySecretsThatOptIn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		wantErr string
	}{
		{name: "labelled", labels: map[string]string{contract.FenceAgentCredentialsLabel: contract.FenceAgentCredentialsTrue}},
		{name: "labelled, among other labels", labels: map[string]string{"app": "bmc", contract.FenceAgentCredentialsLabel: "true"}},
		{name: "unlabelled", labels: map[string]string{"app": "bmc"},
			wantErr: `Secret kube-system/bmc does not opt in as fence agent credentials: it needs the label csi-fence.io/fence-agent-credentials="true"`},
		{name: "no labels at all",
			wantErr: `it needs the label csi-fence.io/fence-agent-credentials="true"`},
		{name: "another value", labels: map[string]string{contract.FenceAgentCredentialsLabel: "True"},
			wantErr: `its label csi-fence.io/fence-agent-credentials is "True", not "true"`},
		{name: "empty value", labels: map[string]string{contract.FenceAgentCredentialsLabel: ""},
			wantErr: `its label csi-fence.io/fence-agent-credentials is "", not "true"`},
		{name: "a similar key", labels: map[string]string{"csi-fence.io/fence-agent-credential": "true"},
			wantErr: `it needs the label csi-fence.io/fence-agent-credentials="true"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(10), ktesting.BufferLogs(true)))
			ctx := klog.NewContext(context.Background(), logger)
			f := newFakeAgent(t, map[Action][]int{ActionOff: {0}, ActionStatus: {2}}, "")
			cfg := bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) { c.Spec.Agent = "fence_fake" })
			u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(cfg)
			if err != nil {
				t.Fatal(err)
			}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{fencingv1alpha1.FenceAgentConfigResource: "FenceAgentConfigList"}, u)
			secret := testSecret("kube-system/bmc")
			secret.Labels = tc.labels
			b := NewBackend(&Resolver{Dynamic: dyn, Kube: fake.NewClientset(secret), AgentDirs: []string{f.dir}})

			res, err := b.Fence(ctx, "node-1")
			if tc.wantErr == "" {
				if err != nil || !res.Confirmed {
					t.Fatalf("fence: %+v, %v", res, err)
				}
				if got := f.read("stdin", ActionOff, 1); !strings.Contains(got, "password=shared-pw\n") {
					t.Errorf("agent stdin %q lacks the Secret's password", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if res.Confirmed || len(res.Steps) != 0 || f.calls(ActionOff)+f.calls(ActionStatus) != 0 {
				t.Errorf("the agent ran with a Secret that did not opt in: %+v", res)
			}
			b2, _ := json.Marshal(res)
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			for _, text := range []string{err.Error(), string(b2), logs} {
				if strings.Contains(text, "shared-pw") || strings.Contains(text, "admin") {
					t.Errorf("a value of the Secret shows in:\n%s", text)
				}
			}
		})
	}
}

// Check finds, when a config is loaded, what would make the fence of its
// nodes fail, a Secret that did not opt in first, and reads each Secret once.
func TestResolverCheck(t *testing.T) {
	unlabelled := testSecret("kube-system/bmc")
	unlabelled.Labels = nil
	for _, tc := range []struct {
		name    string
		cfg     *fencingv1alpha1.FenceAgentConfig
		secrets []runtime.Object
		wantErr string
	}{
		{name: "usable", cfg: bmcConfig("rack-1", nil),
			secrets: []runtime.Object{testSecret("kube-system/bmc"), testSecret("kube-system/bmc-node-2")}},
		{name: "the shared Secret did not opt in", cfg: bmcConfig("rack-1", nil),
			secrets: []runtime.Object{unlabelled, testSecret("kube-system/bmc-node-2")},
			wantErr: `FenceAgentConfig rack-1, node node-1: Secret kube-system/bmc does not opt in as fence agent credentials: it needs the label csi-fence.io/fence-agent-credentials="true"`},
		{name: "a Secret with the label's other value, for several nodes",
			cfg: bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) {
				c.Spec.Credentials.SecretName = "yes"
				c.Spec.Nodes = append(c.Spec.Nodes, fencingv1alpha1.FenceAgentNode{Name: "node-3"}, fencingv1alpha1.FenceAgentNode{Name: "node-4"})
			}),
			secrets: []runtime.Object{testSecret("kube-system/yes"), testSecret("kube-system/bmc-node-2")},
			wantErr: `node node-1: Secret kube-system/yes does not opt in as fence agent credentials: its label csi-fence.io/fence-agent-credentials is "yes", not "true"; its data was not used (and 2 more of its 4 nodes)`},
		{name: "a missing Secret", cfg: bmcConfig("rack-1", nil),
			secrets: []runtime.Object{testSecret("kube-system/bmc")},
			wantErr: "FenceAgentConfig rack-1, node node-2: reading Secret kube-system/bmc-node-2"},
		{name: "a password in the config",
			cfg:     bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) { c.Spec.SharedParameters["passwd"] = "oops" }),
			secrets: []runtime.Object{testSecret("kube-system/bmc"), testSecret("kube-system/bmc-node-2")},
			wantErr: `parameter "passwd" looks like a credential`},
		{name: "an agent that is not here",
			cfg:     bmcConfig("rack-1", func(c *fencingv1alpha1.FenceAgentConfig) { c.Spec.Agent = "fence_gone" }),
			secrets: []runtime.Object{testSecret("kube-system/bmc"), testSecret("kube-system/bmc-node-2")},
			wantErr: "FenceAgentConfig rack-1: agent fence_gone: executable file not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "fence_ipmilan"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			kube := fake.NewClientset(tc.secrets...)
			r := &Resolver{Kube: kube, AgentDirs: []string{dir}}
			err := r.Check(ctx, tc.cfg)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if err != nil && (strings.Contains(err.Error(), "shared-pw") || strings.Contains(err.Error(), "node-2-pw")) {
				t.Errorf("error shows a Secret value: %v", err)
			}
			gets := map[string]int{}
			for _, a := range kube.Actions() {
				if g, ok := a.(clienttesting.GetAction); ok && a.GetResource().Resource == "secrets" {
					gets[g.GetNamespace()+"/"+g.GetName()]++
				}
			}
			for s, n := range gets {
				if n != 1 {
					t.Errorf("Secret %s read %d times, want once", s, n)
				}
			}
		})
	}
}
