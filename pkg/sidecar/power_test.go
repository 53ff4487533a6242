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

package sidecar

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// A FenceAgentConfig that names a Secret without the opt-in label is said
// to be unusable in the log when it is loaded, not first when a node dies:
// which config, which Secret, which label; never a value.
func TestPowerFencerChecksLoadedConfigs(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	cfg := &fencingv1alpha1.FenceAgentConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "rack-1"},
		Spec: fencingv1alpha1.FenceAgentConfigSpec{
			Agent: "fence_test", // in agentDir: the check looks for it first

			Credentials: &fencingv1alpha1.FenceAgentCredentials{SecretName: "db", SecretNamespace: "team-a",
				Parameters: map[string]string{"password": "password"}},
			Nodes: []fencingv1alpha1.FenceAgentNode{{Name: "node-1", Parameters: map[string]string{"ip": "10.0.0.1"}}},
		},
	}
	u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.FenceAgentConfigResource: "FenceAgentConfigList"}, u)
	kube := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team-a"},
		Data: map[string][]byte{"password": []byte("db-password-value")}})
	p := newPowerFencer(kube, dyn, dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0), nil)
	p.resolver.AgentDirs = []string{agentDir(t)}
	p.start(ctx)

	// The log quotes the error: its own quotes are escaped.
	want := `Secret team-a/db does not opt in as fence agent credentials: it needs the label csi-fence.io/fence-agent-credentials=\"true\"`
	buffer := logger.GetSink().(ktesting.Underlier).GetBuffer()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(buffer.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no log says the config is unusable, want one containing %q; logs:\n%s", want, buffer.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if logs := buffer.String(); !strings.Contains(logs, `config="rack-1"`) || strings.Contains(logs, "db-password-value") {
		t.Errorf("the log should name the config and show no value:\n%s", logs)
	}
}

// agentDir holds an executable fence_test that fails whatever it is asked.
func agentDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fence_test"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
