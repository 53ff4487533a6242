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
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/yaml"

	"github.com/csi-fence/fence-attacher/pkg/prestop"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
	"github.com/csi-fence/fence-attacher/test/kubeletsim"
)

// PreStop is the termination reason delivery (issue 13) running beside the
// cluster: csi-fence-prestop-webhook as a process on loopback, called by the
// real kube-apiserver through deploy/'s MutatingWebhookConfiguration (its URL
// pointed at the process, its caBundle written by the webhook from the
// certificate it generated), with deploy/'s RBAC; and the binaries that
// simulated kubelets and tests run: the helper and the kubectl plugin.
type PreStop struct {
	BinDir  string
	Helper  string // csi-fence-prestop
	Plugin  string // kubectl-fence
	Webhook *Process
	Addr    string

	// NodeAgentURL, if set, returns where node's pods reach its agent's
	// termreason.ServedPath now: the stand-in for the Service of
	// deploy/kubernetes/sidecar (internalTrafficPolicy Local), whose
	// address the webhook gives every pod (NodeAgentServiceURL). No
	// Service network here: a runner's hooks get this address instead.
	NodeAgentURL func(node string) string

	c          *Cluster
	kubeconfig string
}

// NodeAgentServiceURL is the webhook's --node-agent-url in deploy/.
const NodeAgentServiceURL = "http://csi-fence-node-agent.default.svc:8081" + termreason.ServedPath

// PreStopWebhookConfig is the MutatingWebhookConfiguration of deploy/.
const PreStopWebhookConfig = "csi-fence-prestop"

// StartPreStop builds the binaries, applies deploy/kubernetes/prestop's RBAC,
// admission policy and webhook configuration and starts the webhook; it returns once the
// apiserver mutates an opted-in pod through it (a server-side dry run).
func (c *Cluster) StartPreStop(ctx context.Context) (*PreStop, error) {
	begin := time.Now()
	ps := &PreStop{BinDir: filepath.Join(c.WorkDir, "bin-prestop"), c: c}
	if err := BuildCommands(ctx, ps.BinDir, "./cmd/csi-fence-prestop", "./cmd/csi-fence-prestop-webhook", "./cmd/kubectl-fence"); err != nil {
		return nil, fmt.Errorf("building the preStop binaries: %w", err)
	}
	ps.Helper, ps.Plugin = filepath.Join(ps.BinDir, "csi-fence-prestop"), filepath.Join(ps.BinDir, "kubectl-fence")
	for _, m := range []string{"deploy/kubernetes/prestop/rbac.yaml", "deploy/kubernetes/prestop/admission-webhook.yaml"} {
		if err := c.ApplyManifest(ctx, m, ""); err != nil {
			return nil, err
		}
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, "default", "csi-fence-prestop-webhook")
	if err != nil {
		return nil, err
	}
	ps.kubeconfig = kubeconfig
	// A force-deleted pod is gone from the API at once, whether its node's
	// simulated kubelet runs or not.
	releaseCtx, stopRelease := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	released := make(chan struct{})
	go func() {
		defer close(released)
		kubeletsim.ReleaseForceDeleted(releaseCtx, c.Client)
	}()
	c.atStop(func() { stopRelease(); <-released })
	// The webhook first, so that it is there to write the caBundle as soon
	// as the configuration exists (it retries until then), as in a cluster
	// where both are applied at once.
	if err := ps.startWebhook(ctx); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "deploy/kubernetes/prestop/mutatingwebhookconfiguration.yaml"))
	if err != nil {
		return nil, err
	}
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return nil, err
	}
	// No Service network here: the apiserver calls the process directly.
	url := "https://" + ps.Addr + "/mutate"
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
	}
	cfgs := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if err := cfgs.Delete(ctx, cfg.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if _, err := cfgs.Create(ctx, &cfg, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		return nil, err
	}
	if err := ps.waitMutating(ctx); err != nil {
		return nil, err
	}
	c.log.Logf("csi-fence-prestop-webhook serving on %s, called by the apiserver (%.1fs)", ps.Addr, time.Since(begin).Seconds())
	return ps, nil
}

// RunPreStopHooks starts a simulated kubelet that runs the preStop hooks of
// node's pods (kubeletsim.PreStopRunner), with the helper's path in the pod
// mapped to the built helper. podEnv nil gives each pod what its mounted
// ServiceAccount token would: KUBECONFIG with a token of its ServiceAccount
// bound to the pod. Stop it with the returned runner's Stop.
func (ps *PreStop) RunPreStopHooks(ctx context.Context, node string, podEnv func(context.Context, *corev1.Pod) ([]string, error)) (*kubeletsim.PreStopRunner, error) {
	if podEnv == nil {
		podEnv = ps.PodTokenEnv
	}
	r, err := kubeletsim.NewPreStopRunner(kubeletsim.PreStopOptions{
		Client: ps.c.Client, NodeName: node, PathMap: map[string]string{prestop.HelperPath: ps.Helper}, PodEnv: podEnv,
		HookEnv: func(*corev1.Pod) []string {
			if ps.NodeAgentURL == nil {
				return nil
			}
			return []string{prestop.NodeAgentURLEnv + "=" + ps.NodeAgentURL(node)}
		},
	})
	if err != nil {
		return nil, err
	}
	return r, ps.ResumePreStopHooks(node, r)
}

// ResumePreStopHooks runs r again after its Stop: the node is back, and
// its pods deleted meanwhile are stopped, hooks first.
func (ps *PreStop) ResumePreStopHooks(node string, r *kubeletsim.PreStopRunner) error {
	f, err := os.OpenFile(filepath.Join(ps.c.WorkDir, "logs", "prestop-kubelet-"+node+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(f), textlogger.Verbosity(4)))
	rctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	go func() {
		r.Run(rctx)
		cancel()
		f.Close()
	}()
	return nil
}

// PodTokenEnv is the environment that gives the helper the API access of
// the pod's ServiceAccount: a token bound to the pod, as the kubelet mounts.
func (ps *PreStop) PodTokenEnv(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	user := "pod-" + pod.Namespace + "-" + pod.Name + "-" + strings.SplitN(string(pod.UID), "-", 2)[0]
	kc, err := ps.c.tokenKubeconfig(ctx, pod.Namespace, sa, user,
		&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	if err != nil {
		return nil, err
	}
	return []string{"KUBECONFIG=" + kc}, nil
}

// startWebhook starts csi-fence-prestop-webhook on a free port.
func (ps *PreStop) startWebhook(ctx context.Context) error {
	insecure := &tls.Config{InsecureSkipVerify: true}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		ps.Addr = "127.0.0.1:" + strconv.Itoa(ports[0])
		ps.Webhook, err = ps.c.StartProcess("prestop-webhook", filepath.Join(ps.BinDir, "csi-fence-prestop-webhook"),
			"--listen="+ps.Addr, "--generate-certificate", "--certificate-hosts=127.0.0.1",
			"--webhook-configuration="+PreStopWebhookConfig, "--kubeconfig="+ps.kubeconfig,
			"--helper-image=ghcr.io/csi-fence/csi-fence-prestop:canary", "--node-agent-url="+NodeAgentServiceURL, "--v=2")
		if err != nil {
			return err
		}
		err = waitHTTPOf(ctx, ps.Webhook, "https://"+ps.Addr+"/healthz", insecure, 30*time.Second)
		if err == nil {
			return nil
		}
		ps.Webhook.Stop(5 * time.Second)
		var exited *ExitedError
		if attempt == startAttempts || !errors.As(err, &exited) || !exited.PortConflict {
			return err
		}
	}
}

// MutatesPods reports whether the apiserver mutates an opted-in pod now
// (a server-side dry run, which runs the mutating webhooks).
func (ps *PreStop) MutatesPods(ctx context.Context) (bool, error) {
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "prestop-probe", Namespace: "default", Labels: map[string]string{termreason.OptInKey: termreason.OptInEnabled}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}}},
	}
	got, err := ps.c.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false, err
	}
	return len(got.Spec.InitContainers) > 0 && got.Spec.InitContainers[0].Name == prestop.InitName, nil
}

func (ps *PreStop) waitMutating(ctx context.Context) error {
	return WaitFor(ctx, 30*time.Second, "the apiserver mutating pods through the webhook", func(ctx context.Context) (bool, error) {
		if err := ps.c.alive(); err != nil {
			return false, err
		}
		return ps.MutatesPods(ctx)
	})
}

// StopWebhook stops the webhook process (an outage).
func (ps *PreStop) StopWebhook() {
	ps.Webhook.Stop(5 * time.Second)
}

// RestartWebhook starts the webhook again, with a new generated CA as a
// restarted replica has, and returns once the apiserver mutates through it.
func (ps *PreStop) RestartWebhook(ctx context.Context) error {
	if err := ps.startWebhook(ctx); err != nil {
		return err
	}
	// The configuration still points at the old port: point it at the
	// new one (a Service would hide this), keeping the caBundle the
	// webhook writes.
	url := "https://" + ps.Addr + "/mutate"
	cfgs := ps.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg, err := cfgs.Get(ctx, PreStopWebhookConfig, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range cfg.Webhooks {
			cfg.Webhooks[i].ClientConfig.URL = &url
		}
		_, err = cfgs.Update(ctx, cfg, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return err
	}
	return ps.waitMutating(ctx)
}
