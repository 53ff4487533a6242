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

package framework

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The webhook's real-node overlay renders from the shipped
// deploy/kubernetes/prestop and changes only the images (the webhook's, and
// the helper's in --helper-image, both built here) and the pod's node; the
// certificate stays the shipped generated one, and the configuration's
// caBundle is left for the webhook to write.
func TestPreStopOverlay(t *testing.T) {
	overlay := filepath.Join(t.TempDir(), "deploy-prestop")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	kust, err := preStopOverlay(overlay, "real-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(RepoRoot(), overlay)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := RenderKustomization(rel)
	if err != nil {
		t.Fatalf("%v\n%s", err, kust)
	}
	shipped, err := RenderKustomization(filepath.Join("deploy", "kubernetes", "prestop"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(shipped) {
		t.Errorf("the overlay renders %d objects, the shipped kustomization %d", len(objs), len(shipped))
	}
	var dep *appsv1.Deployment
	var cfg *admissionv1.MutatingWebhookConfiguration
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			dep = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, dep); err != nil {
				t.Fatal(err)
			}
		case "MutatingWebhookConfiguration":
			cfg = &admissionv1.MutatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	if dep == nil || cfg == nil {
		t.Fatalf("no Deployment or MutatingWebhookConfiguration rendered:\n%s", kust)
	}
	spec := dep.Spec.Template.Spec
	if spec.NodeName != "real-1" {
		t.Errorf("the webhook's pod is on %q, want real-1", spec.NodeName)
	}
	c := spec.Containers[0]
	if c.Image != WebhookImage {
		t.Errorf("the webhook's image is %s, want %s", c.Image, WebhookImage)
	}
	if !slices.Contains(c.Args, "--helper-image="+HelperImage) || slices.ContainsFunc(c.Args, func(a string) bool {
		return strings.HasPrefix(a, "--helper-image="+ShippedImageRegistry)
	}) {
		t.Errorf("the webhook's arguments %q do not inject %s alone", c.Args, HelperImage)
	}
	if !slices.Contains(c.Args, "--generate-certificate") {
		t.Errorf("the webhook's arguments %q lost the shipped generated certificate", c.Args)
	}
	for _, w := range cfg.Webhooks {
		if len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("webhook %s has a caBundle in the manifests; the webhook writes it", w.Name)
		}
	}
}
