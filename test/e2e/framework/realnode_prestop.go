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
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/prestop"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// The termination-reason webhook on real nodes, deployed as a user deploys
// it: the shipped kustomization deploy/kubernetes/prestop (its Deployment
// and Service, the MutatingWebhookConfiguration, the RBAC), applied
// through an overlay that changes what this machine makes different: the
// webhook's image and the helper image it injects (--helper-image, an
// argument the images: transformer does not see), both built here, and the
// webhook's pod pinned to a node. Its certificate is the shipped default:
// the webhook generates a CA and serving certificate at start and writes
// the CA into the configuration's caBundle; nothing is handed to it.
//
// The apiserver reaches it through the cluster's Service network
// (Options.ServiceNetwork), which the cluster must have been started with.

// Shipped names of deploy/kubernetes/prestop.
const (
	webhookNamespace  = "default"
	webhookDeployment = "csi-fence-prestop-webhook"
	// WebhookConfiguration is the shipped MutatingWebhookConfiguration.
	WebhookConfiguration = "csi-fence-prestop"
	shippedHelperImage   = ShippedImageRegistry + "/csi-fence-prestop:canary"
)

// RealPreStop is the webhook deployed on real nodes.
type RealPreStop struct {
	// Overlay is the directory of the kustomization applied.
	Overlay string
	// Objects are the objects created.
	Objects []*unstructured.Unstructured
	// Pod is the webhook's pod, ready.
	Pod *corev1.Pod
}

// DeployPreStopWebhook applies deploy/kubernetes/prestop through the
// real-node overlay with the webhook's pod on node, and waits until the
// pod is ready, the webhook has written its CA into the configuration and
// the apiserver calls it: a server-side dry run of an opted-in pod in
// namespace comes back mutated (the init container that installs the
// helper). Namespace must exist; nothing is created in it.
func (c *Cluster) DeployPreStopWebhook(ctx context.Context, node, namespace string) (*RealPreStop, error) {
	begin := time.Now()
	if !c.serviceNetwork {
		return nil, fmt.Errorf("the webhook on real nodes needs the cluster's Service network (framework.Options.ServiceNetwork): the apiserver cannot reach it otherwise")
	}
	d := &RealPreStop{Overlay: filepath.Join(c.WorkDir, "deploy-prestop")}
	if err := os.MkdirAll(d.Overlay, 0o755); err != nil {
		return nil, err
	}
	kust, err := preStopOverlay(d.Overlay, node)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(d.Overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(RepoRoot(), d.Overlay)
	if err != nil {
		return nil, err
	}
	if d.Objects, err = c.ApplyKustomization(ctx, rel, ApplyOptions{}); err != nil {
		return nil, err
	}
	err = waitFor(ctx, 2*time.Minute, 500*time.Millisecond, "the webhook's pod ready on "+node, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(webhookNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{"app": webhookDeployment}.String()})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if err := crashing(p); err != nil {
				return false, err
			}
			if podReady(p) {
				d.Pod = p
				return true, nil
			}
		}
		return false, fmt.Errorf("no ready pod among %d", len(pods.Items))
	})
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, time.Minute, 500*time.Millisecond, "the webhook's CA in "+WebhookConfiguration, func(ctx context.Context) (bool, error) {
		cfg, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, WebhookConfiguration, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range cfg.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false, fmt.Errorf("webhook %s has no caBundle", w.Name)
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	// The configuration's change reaches the apiserver's webhook
	// manager through its informer: ask until a pod is mutated.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "prestop-probe", Namespace: namespace,
			Labels: map[string]string{termreason.OptInKey: termreason.OptInEnabled}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "probe", Image: WriterImage, ImagePullPolicy: corev1.PullNever,
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/writer", "-prestop"}}}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	err = waitFor(ctx, time.Minute, 500*time.Millisecond, "the apiserver calling the webhook", func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		for _, ic := range p.Spec.InitContainers {
			if ic.Name == prestop.InitName {
				return true, nil
			}
		}
		return false, fmt.Errorf("a dry-run opted-in pod came back without the init container %s", prestop.InitName)
	})
	if err != nil {
		return nil, fmt.Errorf("%w (the webhook's log: kubectl logs -n %s deploy/%s; the egress proxy's lines in this test's output)", err, webhookNamespace, webhookDeployment)
	}
	c.log.Logf("prestop webhook deployed on %s in %.1fs (overlay %s), called by the apiserver", node, time.Since(begin).Seconds(), d.Overlay)
	return d, nil
}

// preStopOverlay returns the overlay's kustomization.yaml.
func preStopOverlay(overlay, node string) (string, error) {
	shipped := filepath.Join("deploy", "kubernetes", "prestop")
	rel, err := filepath.Rel(overlay, filepath.Join(RepoRoot(), shipped))
	if err != nil {
		return "", err
	}
	base, err := RenderKustomization(shipped)
	if err != nil {
		return "", err
	}
	// The JSON patch names the argument by index, guarded by a test of
	// its value: a shipped manifest that changed fails the render.
	const arg = "--helper-image=" + shippedHelperImage
	var idx = -1
	var name string
	for _, o := range base {
		if o.GetKind() != "Deployment" || o.GetName() != webhookDeployment {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(cs) == 0 {
			break
		}
		m, _ := cs[0].(map[string]any)
		name, _ = m["name"].(string)
		args, _ := m["args"].([]any)
		for j, a := range args {
			if a == arg {
				idx = j
			}
		}
	}
	if idx < 0 {
		return "", fmt.Errorf("%s: the Deployment %s's first container has no argument %s", shipped, webhookDeployment, arg)
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- {name: %s/csi-fence-prestop-webhook, newName: %s/csi-fence-prestop-webhook, newTag: %s}
patches:
- target: {kind: Deployment, name: %s}
  patch: |-
    - {op: test, path: /spec/template/spec/containers/0/name, value: %s}
    - {op: test, path: /spec/template/spec/containers/0/args/%d, value: %s}
    - {op: replace, path: /spec/template/spec/containers/0/args/%d, value: %s}
    - {op: add, path: /spec/template/spec/nodeName, value: %s}
`, rel, ShippedImageRegistry, ProductImageRegistry, ProductImageTag, webhookDeployment,
		q(name), idx, q(arg), idx, q("--helper-image="+HelperImage), q(node))
	return b.String(), nil
}
