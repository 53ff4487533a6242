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
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// ErrNodeNotConfigured: no FenceAgentConfig lists the node, so it cannot be
// power-fenced (a caller escalating from storage fencing stops there).
var ErrNodeNotConfigured = errors.New("no FenceAgentConfig lists the node")

// agentNamePattern is the CRD's pattern, checked again here: the CRD may be
// an older version, and this is the gate on what program runs.
var agentNamePattern = regexp.MustCompile(`^fence_[a-z0-9_]+$`)

// Resolver builds a node's Target from the FenceAgentConfigs and the Secrets
// they name, read live at the moment of the fence: a fence is rare, and one
// that acts on a stale BMC address or an old password fails at the worst
// moment. Secret values are held only in the Target's options, in memory.
type Resolver struct {
	Dynamic dynamic.Interface
	Kube    kubernetes.Interface
	// AgentDirs are where agent executables are looked up, in order. Empty
	// means this process' PATH plus /usr/sbin and /sbin.
	AgentDirs []string
	// AllowedAgents, if not empty, are the only agent names that may run
	// (an admin's allow-list, e.g. from a flag); otherwise any fence_*
	// executable in AgentDirs may.
	AllowedAgents []string
	// Env is the agents' environment (nil: PATH and proxy variables only).
	Env []string
}

// Resolve returns the Target that fences node.
func (r *Resolver) Resolve(ctx context.Context, node string) (*Target, error) {
	list, err := fencingv1alpha1.ListFenceAgentConfigs(ctx, r.Dynamic)
	if err != nil {
		return nil, fmt.Errorf("listing FenceAgentConfigs: %w", err)
	}
	cfg, err := ConfigFor(list.Items, node)
	if err != nil {
		return nil, err
	}
	path, err := r.lookAgent(cfg.Spec.Agent)
	if err != nil {
		return nil, fmt.Errorf("FenceAgentConfig %s: %w", cfg.Name, err)
	}
	t, err := targetFor(cfg, node, path, r.secretReader(ctx))
	if err != nil {
		return nil, err
	}
	t.Agent.Env = r.Env
	return t, nil
}

// Check tells whether cfg could fence its nodes now: its agent, its options,
// its Secrets (read live, each once) and their opt-in label, as a fence
// would find them, without running anything. It is for an early word to the
// admin when a config is loaded; it decides nothing: a fence resolves its
// node again, live (a Secret may lose its label after the check). The error
// is the first node's that cannot be fenced, with how many more cannot.
func (r *Resolver) Check(ctx context.Context, cfg *fencingv1alpha1.FenceAgentConfig) error {
	if _, err := r.lookAgent(cfg.Spec.Agent); err != nil {
		return fmt.Errorf("FenceAgentConfig %s: %w", cfg.Name, err)
	}
	type read struct {
		secret *corev1.Secret
		err    error
	}
	reads := map[string]read{} // namespace/name: shared credentials are read once
	live := r.secretReader(ctx)
	readSecret := func(namespace, name string) (*corev1.Secret, error) {
		key := namespace + "/" + name
		if got, ok := reads[key]; ok {
			return got.secret, got.err
		}
		s, err := live(namespace, name)
		reads[key] = read{s, err}
		return s, err
	}
	var first error
	failed := 0
	for _, n := range cfg.Spec.Nodes {
		if _, err := targetFor(cfg, n.Name, "", readSecret); err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if failed > 1 {
		return fmt.Errorf("%w (and %d more of its %d nodes)", first, failed-1, len(cfg.Spec.Nodes))
	}
	return first
}

// secretReader reads a Secret live; targetFor checks it opted in before it
// uses its data.
func (r *Resolver) secretReader(ctx context.Context) func(namespace, name string) (*corev1.Secret, error) {
	return func(namespace, name string) (*corev1.Secret, error) {
		return r.Kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	}
}

// ConfigFor picks the one config that lists node (ErrNodeNotConfigured if
// none does; an error if several do).
func ConfigFor(configs []fencingv1alpha1.FenceAgentConfig, node string) (*fencingv1alpha1.FenceAgentConfig, error) {
	var found []*fencingv1alpha1.FenceAgentConfig
	for i := range configs {
		for _, n := range configs[i].Spec.Nodes {
			if n.Name == node {
				found = append(found, &configs[i])
				break
			}
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("node %s: %w", node, ErrNodeNotConfigured)
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, c := range found {
		names[i] = c.Name
	}
	sort.Strings(names)
	// Two descriptions of one node's power switch: at most one is right, and
	// powering off the wrong machine is the worst a fence can do.
	return nil, fmt.Errorf("node %s is listed by several FenceAgentConfigs (%s): refusing to guess which switch is its own",
		node, strings.Join(names, ", "))
}

// lookAgent finds the agent's executable.
func (r *Resolver) lookAgent(name string) (string, error) {
	if !agentNamePattern.MatchString(name) {
		return "", fmt.Errorf("agent %q is not a fence agent name (fence_*)", name)
	}
	if len(r.AllowedAgents) > 0 && !slices.Contains(r.AllowedAgents, name) {
		return "", fmt.Errorf("agent %s is not allowed here (allowed: %s)", name, strings.Join(r.AllowedAgents, ", "))
	}
	dirs := r.AgentDirs
	if len(dirs) == 0 {
		dirs = filepath.SplitList(agentPath())
	}
	for _, d := range dirs {
		if d == "" || !filepath.IsAbs(d) {
			continue // never the working directory
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("agent %s: %w in %s", name, exec.ErrNotFound, strings.Join(dirs, ":"))
}

// targetFor builds node's Target from its config: shared parameters, then
// the node's own over them, then the credentials from the Secret, then the
// node's name (nodename, which the fence agent API passes to every agent and
// the agents that do not use it ignore). Errors name options and Secret
// keys, never values.
func targetFor(cfg *fencingv1alpha1.FenceAgentConfig, node, agentPath string,
	readSecret func(namespace, name string) (*corev1.Secret, error)) (*Target, error) {
	var n *fencingv1alpha1.FenceAgentNode
	for i := range cfg.Spec.Nodes {
		if cfg.Spec.Nodes[i].Name == node {
			n = &cfg.Spec.Nodes[i]
		}
	}
	if n == nil {
		return nil, fmt.Errorf("node %s: %w", node, ErrNodeNotConfigured)
	}
	errorf := func(format string, args ...interface{}) error {
		return fmt.Errorf("FenceAgentConfig %s, node %s: %s", cfg.Name, node, fmt.Sprintf(format, args...))
	}

	var opts []Option
	index := map[string]int{} // normalized name -> position in opts
	set := func(o Option) {
		if i, ok := index[normalizeName(o.Name)]; ok {
			opts[i] = o
			return
		}
		index[normalizeName(o.Name)] = len(opts)
		opts = append(opts, o)
	}
	for _, params := range []map[string]string{cfg.Spec.SharedParameters, n.Parameters} {
		for _, name := range sortedKeys(params) {
			if looksLikeCredential(name) {
				return nil, errorf("parameter %q looks like a credential: put it in the Secret of credentials, not in the FenceAgentConfig", name)
			}
			set(Option{Name: name, Value: params[name]})
		}
	}

	creds := cfg.Spec.Credentials
	if n.Credentials != nil {
		creds = n.Credentials
	}
	if creds != nil {
		secret, err := readSecret(creds.SecretNamespace, creds.SecretName)
		if err != nil {
			return nil, errorf("reading Secret %s/%s: %v", creds.SecretNamespace, creds.SecretName, err)
		}
		if err := optedIn(secret); err != nil {
			return nil, errorf("%v", err)
		}
		data := secret.Data
		for _, name := range sortedKeys(creds.Parameters) {
			key := creds.Parameters[name]
			v, ok := data[key]
			if !ok {
				return nil, errorf("Secret %s/%s has no key %q (for option %s)", creds.SecretNamespace, creds.SecretName, key, name)
			}
			if _, dup := index[normalizeName(name)]; dup {
				return nil, errorf("option %s is both a parameter and a credential", name)
			}
			set(Option{Name: name, Value: string(v), Secret: true})
		}
	}
	if _, ok := index["nodename"]; !ok {
		set(Option{Name: "nodename", Value: node})
	}
	for _, o := range opts {
		if err := validateOption(o); err != nil {
			return nil, errorf("%v", err)
		}
	}

	to := cfg.Spec.Timeouts
	if to == nil {
		to = &fencingv1alpha1.FenceAgentTimeouts{}
	}
	retries := DefaultRetries
	if to.Retries != nil {
		retries = int(*to.Retries)
	}
	return &Target{
		Node:   node,
		Config: cfg.Name,
		Agent: &Agent{
			Path:          agentPath,
			Options:       opts,
			CallTimeout:   seconds(to.CallTimeoutSeconds, DefaultCallTimeout),
			Retries:       retries,
			RetryInterval: seconds(to.RetryIntervalSeconds, DefaultRetryInterval),
		},
		ConfirmTimeout: seconds(to.ConfirmTimeoutSeconds, DefaultConfirmTimeout),
		StatusInterval: seconds(to.StatusIntervalSeconds, DefaultStatusInterval),
	}, nil
}

// optedIn accepts a Secret as fence agent credentials only if it carries
// contract.FenceAgentCredentialsLabel="true". A FenceAgentConfig may name any
// Secret, and the sidecar may get every Secret in the cluster (the CSI publish
// secrets external-attacher reads); the agent then connects to an address the
// config names. Without this consent anyone allowed to write a config could
// have the sidecar send another team's password wherever they like. The
// label is set by whoever may write the Secret, who can normally read it
// already, so it gives the config's author nothing they could not get. A
// namespace allow-list would add nothing to that consent (a labelled Secret
// in any namespace is one its owner meant for this), so there is none. The
// error names the Secret and the label, never a value: the Secret's data is
// not touched when it did not opt in.
func optedIn(s *corev1.Secret) error {
	v, ok := s.Labels[contract.FenceAgentCredentialsLabel]
	switch {
	case !ok:
		return fmt.Errorf("Secret %s/%s does not opt in as fence agent credentials: it needs the label %s=%q; its data was not used",
			s.Namespace, s.Name, contract.FenceAgentCredentialsLabel, contract.FenceAgentCredentialsTrue)
	case v != contract.FenceAgentCredentialsTrue:
		return fmt.Errorf("Secret %s/%s does not opt in as fence agent credentials: its label %s is %q, not %q; its data was not used",
			s.Namespace, s.Name, contract.FenceAgentCredentialsLabel, v, contract.FenceAgentCredentialsTrue)
	}
	return nil
}

func seconds(s int32, def time.Duration) time.Duration {
	if s <= 0 {
		return def
	}
	return time.Duration(s) * time.Second
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
