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

// Package prestop delivers a pod's termination reason to its preStop hooks
// on unmodified Kubernetes: the webhook's pod mutation (Mutate) makes a
// static helper available in each container and rewrites its preStop hook to
// run through it; the helper (the functions here, run by
// cmd/csi-fence-prestop) reads its own pod through the API with a short,
// bounded timeout, decides the reason (pkg/termreason) and runs the original
// hook with it: a command with the reason in an environment variable, an
// HTTP GET with it in a header.
//
// The helper never blocks or fails a termination for the reason's sake: an
// API that is slow, down or forbidden gives the reason Unknown, and the
// original hook runs all the same, with the rest of the grace period.
package prestop

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// Environment the webhook gives each container (downward API) so that the
// helper knows its own pod.
const (
	PodNameEnv      = "CSI_FENCE_POD_NAME"
	PodNamespaceEnv = "CSI_FENCE_POD_NAMESPACE"
	// PodUIDEnv tells a pod from its replacement of the same name, and
	// names it to its node's agent once it is gone from the API.
	PodUIDEnv = "CSI_FENCE_POD_UID"
	// NodeAgentURLEnv is the URL of the node agent's termreason.ServedPath
	// (MutateOptions.NodeAgentURL).
	NodeAgentURLEnv = "CSI_FENCE_NODE_AGENT_URL"
)

// DefaultTimeout bounds the helper's API reads: a small share of the
// default 30 s grace period, so the original hook keeps nearly all of it.
const DefaultTimeout = 2 * time.Second

// Reason returns the termination reason of the pod the helper runs in. It
// never takes longer than timeout and never fails: without an API, a pod
// identity or an answer in time, the reason is Unknown.
func Reason(ctx context.Context, timeout time.Duration) string {
	logger := klog.FromContext(ctx)
	name, namespace := os.Getenv(PodNameEnv), os.Getenv(PodNamespaceEnv)
	if name == "" || namespace == "" {
		logger.Info("The pod's name or namespace is not in the environment; reason Unknown", "nameEnv", PodNameEnv, "namespaceEnv", PodNamespaceEnv)
		return termreason.Unknown
	}
	cfg, err := restConfig()
	if err != nil {
		logger.Info("No API access; reason Unknown", "err", err)
		return termreason.Unknown
	}
	return ReasonOf(ctx, cfg, Pod{Namespace: namespace, Name: name, UID: os.Getenv(PodUIDEnv)}, os.Getenv(NodeAgentURLEnv), timeout)
}

// ReasonFrom is Reason with the API configuration and pod given.
func ReasonFrom(ctx context.Context, cfg *rest.Config, namespace, name string, timeout time.Duration) string {
	return ReasonOf(ctx, cfg, Pod{Namespace: namespace, Name: name}, "", timeout)
}

// Pod is the pod the helper runs in.
type Pod struct {
	Namespace, Name string
	// UID, if known, tells the pod from a replacement of the same name.
	UID string
}

// ReasonOf is ReasonFrom for pod, asking nodeAgentURL (if not empty) when
// the pod is gone from the API: force-deleted while its node was away, its
// hooks run now that the node is back, and its ServiceAccount token, bound
// to it, is rejected (401) or the pod is not found (404) or replaced (a
// StatefulSet's pod of the same name, another UID). The node agent, with
// credentials of its own, serves the reason this system recorded before
// the delete. Everything stays within timeout.
func ReasonOf(ctx context.Context, cfg *rest.Config, pod Pod, nodeAgentURL string, timeout time.Duration) string {
	namespace, name, uid := pod.Namespace, pod.Name, pod.UID
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(namespace, name))
	cfg = rest.CopyConfig(cfg)
	// Each request and the whole decision are bounded: a request that
	// hangs (an apiserver that accepts connections but never answers) must
	// not hold up the hook, and retries after throttling must not either.
	cfg.Timeout = timeout
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Info("Cannot build an API client; reason Unknown", "err", err)
		return termreason.Unknown
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		d   termreason.Decision
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := termreason.Gather(ctx, client, namespace, name)
		replaced := err == nil && uid != "" && string(s.Pod.UID) != uid
		if replaced {
			err = fmt.Errorf("the pod %s/%s is another one now (uid %s, not %s)", namespace, name, s.Pod.UID, uid)
		}
		if gone := replaced || apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err); gone && uid != "" && nodeAgentURL != "" {
			d, aerr := askNodeAgent(ctx, nodeAgentURL, pod)
			if aerr == nil {
				done <- result{d: d}
				return
			}
			logger.Info("The pod is gone and its node's agent has no reason for it", "apiErr", err, "err", aerr)
			err = fmt.Errorf("the pod is gone from the API (%v) and its node's agent has no reason for it: %w", err, aerr)
		}
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{d: termreason.Decide(s)}
	}()
	// The select makes the bound hold even for a client that ignored its
	// context.
	select {
	case r := <-done:
		if r.err != nil {
			logger.Info("Cannot read the pod; reason Unknown", "err", r.err)
			return termreason.Unknown
		}
		logger.Info("Termination reason", "reason", r.d.Reason, "source", r.d.Source)
		return r.d.Reason
	case <-ctx.Done():
		logger.Info("The API did not answer in time; reason Unknown", "timeout", timeout)
		return termreason.Unknown
	}
}

// restConfig is the in-cluster configuration of the pod's ServiceAccount,
// else $KUBECONFIG (a helper run outside a cluster, as the simulated kubelet
// of the end-to-end tests runs it).
func restConfig() (*rest.Config, error) {
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, nil
	}
	if kc := os.Getenv("KUBECONFIG"); kc != "" {
		return clientcmd.BuildConfigFromFlags("", kc)
	}
	return nil, err
}

// HTTPGet is an HTTP GET preStop hook, as the kubelet performs it.
type HTTPGet struct {
	Scheme  string // HTTP or HTTPS
	Host    string // default 127.0.0.1: the helper runs in the pod's network namespace
	Port    int
	Path    string
	Headers http.Header
}

// Do performs the GET with the reason in header. Like the kubelet it does
// not verify an HTTPS server's certificate and only fails when no response
// comes; the status is the server's business.
func (g HTTPGet) Do(ctx context.Context, header, reason string) error {
	host := g.Host
	if host == "" {
		host = "127.0.0.1"
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(g.Port)), Path: g.Path}
	if g.Scheme == "HTTPS" || g.Scheme == "https" {
		u.Scheme = "https"
	}
	// Path may carry a query, as the kubelet's does.
	target := u.Scheme + "://" + u.Host + g.Path
	if g.Path == "" || g.Path[0] != '/' {
		target = u.Scheme + "://" + u.Host + "/" + g.Path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	for k, vs := range g.Headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set(header, reason)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec G402: the kubelet's hook does the same
	rsp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("preStop HTTP GET %s: %w", target, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(rsp.Body, 1<<20))
	rsp.Body.Close()
	klog.FromContext(ctx).Info("PreStop HTTP GET done", "url", target, "status", rsp.StatusCode)
	return nil
}

// Default names of the variable and header (the seed's).
const (
	DefaultEnv    = contract.TerminationReasonEnv
	DefaultHeader = contract.TerminationReasonHeader
)

// askNodeAgent asks the node's agent for the reason of pod
// (termreason.ServedPath), within ctx.
func askNodeAgent(ctx context.Context, nodeAgentURL string, pod Pod) (termreason.Decision, error) {
	u, err := url.Parse(nodeAgentURL)
	if err != nil {
		return termreason.Decision{}, fmt.Errorf("%s: %w", NodeAgentURLEnv, err)
	}
	q := u.Query()
	q.Set("uid", pod.UID)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return termreason.Decision{}, err
	}
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		return termreason.Decision{}, err
	}
	defer rsp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(rsp.Body, 64<<10))
	if rsp.StatusCode != http.StatusOK {
		return termreason.Decision{}, fmt.Errorf("%s: %s", rsp.Status, strings.TrimSpace(string(body)))
	}
	var served termreason.ServedReason
	if err := json.Unmarshal(body, &served); err != nil {
		return termreason.Decision{}, fmt.Errorf("the node agent's answer: %w", err)
	}
	if served.UID != pod.UID || served.Namespace != pod.Namespace || served.Name != pod.Name || served.Reason == "" {
		return termreason.Decision{}, fmt.Errorf("the node agent answered for another pod: %+v", served)
	}
	return termreason.Decision{Reason: served.Reason, Source: "node agent " + u.Host + ": recorded when this system force-deleted the pod"}, nil
}
