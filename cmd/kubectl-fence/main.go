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

// Command kubectl-fence is fence-attacher's kubectl plugin (on PATH as
// kubectl-fence, run as `kubectl fence ...`).
//
//	kubectl fence terminate pod/NAME --reason="..." [-n NAMESPACE] [--grace-period=N] [--force]
//	kubectl fence check-manifests [-f FILE]... [-n NAMESPACE] [--controller-only]
//	kubectl fence status [-o table|json|yaml] [--storm-guard-namespace=NS]
//	kubectl fence timeline NODE [-o table|json|yaml]
//	kubectl fence fence NODE [--reason=REASON]
//	kubectl fence release NODE
//	kubectl fence pause --reason=REASON [--storm-guard-namespace=NS]
//	kubectl fence resume [--storm-guard-namespace=NS]
//	kubectl fence completion bash|zsh
//	kubectl fence version
//
// terminate does what the seed's `kubectl delete po NAME --reason=...`
// would: it records the reason on the pod, where its preStop hook reads it
// (pkg/termreason, csi-fence-prestop), then deletes the pod.
//
// status and timeline are the views an operator reads in an outage
// (pkg/fenceview): which nodes are fenced or quarantined and how far each
// got, and one node's failover step by step.
//
// fence and release create and withdraw (spec.released) an admin's
// FencingRequest; pause
// and resume set and remove the storm guard's pause switch.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/csi-fence/fence-attacher/pkg/termreason"
	"github.com/csi-fence/fence-attacher/pkg/version"
)

type command struct {
	usage string
	run   func(args []string) error
}

var commands = map[string]command{
	"version":         {"version: print the plugin's version", func([]string) error { fmt.Println("kubectl-fence", version.String()); return nil }},
	"terminate":       {"terminate pod/NAME --reason=REASON [-n NAMESPACE] [--grace-period=SECONDS] [--force]: record why, then delete the pod", terminate},
	"check-manifests": {"check-manifests [-f FILE]... [-n NAMESPACE] [--controller-only] [-q]: check built manifests (kustomize, helm template; several -f together) for an install that will fence", checkManifests},
	"status":          {"status [-o table|json|yaml] [--storm-guard-namespace=NS]: nodes fenced or quarantined, their records, volumes and the storm guard", status},
	"timeline":        {"timeline NODE [-o table|json|yaml]: the steps of a node's failover, from its record, conditions, taints and Events", timeline},
	"fence":           {"fence NODE [--reason=REASON]: create the admin's FencingRequest for the node (fences its storage even when it is Ready)", adminVerb("fence", runFence)},
	"release":         {"release NODE: withdraw the admin's FencingRequest (spec.released; the node leaves quarantine once its volumes are cleaned, the request stays as the record)", adminVerb("release", runRelease)},
	"pause":           {"pause --reason=REASON [--storm-guard-namespace=NS]: stop all new fencing (the storm guard's pause switch)", adminVerb("pause", runPause)},
	"resume":          {"resume [--storm-guard-namespace=NS]: remove the pause switch", adminVerb("resume", runResume)},
	"completion":      {"completion bash|zsh: print a shell completion script", completion},
}

func main() {
	if err := dispatch(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func dispatch(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		return nil
	}
	if args[0] == "--version" {
		args[0] = "version"
	}
	c, ok := commands[args[0]]
	if !ok {
		usage()
		return fmt.Errorf("unknown command %q", args[0])
	}
	return c.run(args[1:])
}

func usage() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(os.Stderr, "Usage: kubectl fence COMMAND\n\nCommands:")
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %s\n", commands[n].usage)
	}
}

// kubeFlags are the usual kubectl connection flags.
type kubeFlags struct {
	kubeconfig, context, namespace string
}

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "path to the kubeconfig file")
	fs.StringVar(&k.context, "context", "", "kubeconfig context")
	fs.StringVar(&k.namespace, "namespace", "", "namespace (default: the context's)")
	fs.StringVar(&k.namespace, "n", "", "namespace (short)")
}

func (k *kubeFlags) client() (kubernetes.Interface, string, error) {
	rc, ns, err := k.config()
	if err != nil {
		return nil, "", err
	}
	c, err := kubernetes.NewForConfig(rc)
	return c, ns, err
}

// config is the REST config and namespace of the flags' kubeconfig.
func (k *kubeFlags) config() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context})
	ns, _, err := cfg.Namespace()
	if err != nil {
		return nil, "", err
	}
	if k.namespace != "" {
		ns = k.namespace
	}
	rc, err := cfg.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	return rc, ns, nil
}

// interleave lets flags follow the positional argument, as kubectl's do.
func interleave(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// terminateOptions are terminate's parsed arguments.
type terminateOptions struct {
	k       kubeFlags
	name    string
	reason  string
	grace   int64 // -1: the pod's own
	timeout time.Duration
	// force: a force delete (grace period 0 with --force).
	force bool
	// warning, if any, goes to stderr before the delete, as kubectl's.
	warning string
}

// Warnings of kubectl delete, for the same cases.
const (
	forceWarning   = "Warning: Immediate deletion does not wait for confirmation that the running resource has been terminated. The resource may continue to run on the cluster indefinitely."
	ignoredWarning = "Warning: --force is ignored because --grace-period is not 0."
)

// gracePeriod resolves --grace-period and --force as kubectl delete does.
// A zero grace period is a force delete: the pod is gone from the API at
// once while its containers may still run (and write its volumes) on a live
// node, and a replacement may start elsewhere. So 0 alone becomes 1 (the
// kubelet still stops the pod, as fast as it can), and only --force keeps
// 0; --force without a grace period means 0.
func (o *terminateOptions) gracePeriod(force bool) {
	if o.grace < 0 {
		o.grace = -1
	}
	switch {
	case force && o.grace <= 0:
		o.grace, o.force, o.warning = 0, true, forceWarning
	case force:
		o.warning = ignoredWarning
	case o.grace == 0:
		o.grace = 1
	}
}

// done is what terminate prints once the pod is deleted.
func (o *terminateOptions) done() string {
	if o.force {
		return fmt.Sprintf("pod/%s force deleted (reason: %s)", o.name, o.reason)
	}
	return fmt.Sprintf("pod/%s terminated (reason: %s)", o.name, o.reason)
}

func parseTerminate(args []string) (*terminateOptions, error) {
	fs := flag.NewFlagSet("terminate", flag.ContinueOnError)
	o := &terminateOptions{}
	o.k.register(fs)
	fs.StringVar(&o.reason, "reason", "", "why the pod is terminated, delivered to its preStop hook (required)")
	fs.Int64Var(&o.grace, "grace-period", -1, "seconds the pod has to stop (default: its own terminationGracePeriodSeconds); 0 is taken as 1 unless --force is given")
	force := fs.Bool("force", false, "with --grace-period=0 (or none): force delete, the pod is removed from the API at once without waiting for its containers to stop (as kubectl delete --force)")
	fs.DurationVar(&o.timeout, "request-timeout", 30*time.Second, "bound of the API requests")
	pos, err := interleave(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) != 1 {
		return nil, errors.New("terminate: want exactly one pod/NAME")
	}
	name, ok := strings.CutPrefix(pos[0], "pod/")
	if !ok {
		name, ok = strings.CutPrefix(pos[0], "pods/")
	}
	if !ok || name == "" {
		return nil, fmt.Errorf("terminate: %q is not pod/NAME (only pods carry a termination reason)", pos[0])
	}
	if o.reason == "" {
		return nil, errors.New("terminate: --reason is required")
	}
	o.name = name
	o.gracePeriod(*force)
	return o, nil
}

func terminate(args []string) error {
	o, err := parseTerminate(args)
	if err != nil {
		return err
	}
	client, ns, err := o.k.client()
	if err != nil {
		return err
	}
	if o.warning != "" {
		fmt.Fprintln(os.Stderr, o.warning)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := termreason.Terminate(ctx, client, ns, o.name, o.reason, o.grace); err != nil {
		return err
	}
	fmt.Println(o.done())
	return nil
}
