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

package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
)

// factory is what every verb is built from: the streams, and how it
// connects to the cluster its kubeconfig flags name (tests connect to
// fakes instead).
type factory struct {
	genericiooptions.IOStreams
	clients func(*genericclioptions.ConfigFlags) (kubernetes.Interface, dynamic.Interface, error)
	now     func() time.Time
}

func newFactory(streams genericiooptions.IOStreams) *factory {
	return &factory{IOStreams: streams, clients: restClients, now: time.Now}
}

// restClients are the clients of the REST config the flags resolve, as
// kubectl resolves them (kubeconfig, context, impersonation...).
func restClients(flags *genericclioptions.ConfigFlags) (kubernetes.Interface, dynamic.Interface, error) {
	rc, err := flags.ToRESTConfig()
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	return kube, dyn, err
}

// defaultRequestTimeout bounds a verb's API requests unless
// --request-timeout says otherwise (0: no bound, as kubectl's).
const defaultRequestTimeout = "30s"

// kubeOptions are the kubeconfig flags of a verb that reads or writes the
// cluster: all of kubectl's (genericclioptions.ConfigFlags), -n/--namespace
// only on a verb that acts on namespaced objects.
type kubeOptions struct {
	flags *genericclioptions.ConfigFlags
	f     *factory
}

func addKubeFlags(f *factory, cmd *cobra.Command, namespaced bool) *kubeOptions {
	flags := genericclioptions.NewConfigFlags(true)
	*flags.Timeout = defaultRequestTimeout
	if !namespaced {
		flags.Namespace = nil
	}
	flags.AddFlags(cmd.Flags())
	return &kubeOptions{flags: flags, f: f}
}

func (k *kubeOptions) clients() (kubernetes.Interface, dynamic.Interface, error) {
	return k.f.clients(k.flags)
}

// namespace is -n, or the kubeconfig context's namespace, or default.
func (k *kubeOptions) namespace() (string, error) {
	ns, _, err := k.flags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// withTimeout bounds ctx by --request-timeout (0: not bounded).
func (k *kubeOptions) withTimeout(ctx context.Context) (context.Context, context.CancelFunc, error) {
	d, err := clientcmd.ParseTimeout(*k.flags.Timeout)
	if err != nil {
		return nil, nil, err
	}
	if d == 0 {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	return ctx, cancel, nil
}

// run is a verb's Run once completed: fn with the clients of the
// kubeconfig flags, its context bounded by --request-timeout.
func (k *kubeOptions) run(ctx context.Context, fn func(context.Context, kubernetes.Interface, dynamic.Interface) error) error {
	kube, dyn, err := k.clients()
	if err != nil {
		return err
	}
	ctx, cancel, err := k.withTimeout(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return fn(ctx, kube, dyn)
}

// completeArg completes a verb's one argument with the names list reads
// from the cluster (the verb's kubeconfig flags given so far apply):
// nothing after the first argument, an error directive when list fails.
func (k *kubeOptions) completeArg(cmd *cobra.Command, args []string, list func(context.Context, kubernetes.Interface) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	err := k.run(cmd.Context(), func(ctx context.Context, kube kubernetes.Interface, _ dynamic.Interface) error {
		var err error
		names, err = list(ctx, kube)
		return err
	})
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeNodeNames completes the NODE argument of fence, release and
// timeline with the cluster's node names.
func (k *kubeOptions) completeNodeNames(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return k.completeArg(cmd, args, func(ctx context.Context, kube kubernetes.Interface) ([]string, error) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, n := range nodes.Items {
			if strings.HasPrefix(n.Name, toComplete) {
				names = append(names, n.Name)
			}
		}
		sort.Strings(names)
		return names, nil
	})
}

// dryRun is --dry-run: none, client or server, as kubectl's.
type dryRun string

const (
	dryRunNone   dryRun = "none"
	dryRunClient dryRun = "client"
	dryRunServer dryRun = "server"
)

// writeOptions are the flags of a verb that writes: --dry-run, and -o to
// print the object written (cli-runtime's printers: name, json, yaml,
// jsonpath, go-template) instead of the sentences saying what was done,
// which then go to stderr.
type writeOptions struct {
	dryRun  dryRun
	print   *genericclioptions.PrintFlags
	printer printers.ResourcePrinter // nil without -o
}

func addWriteFlags(cmd *cobra.Command) *writeOptions {
	w := &writeOptions{dryRun: dryRunNone, print: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme.Scheme)}
	cmd.Flags().StringVar((*string)(&w.dryRun), "dry-run", string(dryRunNone),
		`Must be "none", "server", or "client". If client strategy, only print what would be done: the reads that decide it are made, no write is sent. If server strategy, send the writes with dry run (DryRun: All): the apiserver checks them (admission, the CRD's rules) and persists nothing.`)
	_ = cmd.RegisterFlagCompletionFunc("dry-run", cobra.FixedCompletions([]string{string(dryRunNone), string(dryRunClient), string(dryRunServer)}, cobra.ShellCompDirectiveNoFileComp))
	w.print.AddFlags(cmd)
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(w.print.AllowedFormats(), cobra.ShellCompDirectiveNoFileComp))
	return w
}

// complete checks --dry-run and builds the -o printer.
func (w *writeOptions) complete() error {
	switch w.dryRun {
	case dryRunNone, dryRunClient, dryRunServer:
	default:
		return fmt.Errorf(`invalid dry-run value (%q). Must be "none", "server", or "client"`, string(w.dryRun))
	}
	if *w.print.OutputFormat == "" {
		return nil
	}
	p, err := w.print.ToPrinter()
	if err != nil {
		return err
	}
	w.printer = p
	return nil
}

// sends reports whether the writes are sent (not a client dry run).
func (w *writeOptions) sends() bool { return w.dryRun != dryRunClient }

// serverDryRun is the writes' DryRun option.
func (w *writeOptions) serverDryRun() []string {
	if w.dryRun == dryRunServer {
		return []string{metav1.DryRunAll}
	}
	return nil
}

// mark follows the word saying what was done, as kubectl's: "created (dry
// run)".
func (w *writeOptions) mark() string {
	switch w.dryRun {
	case dryRunClient:
		return " (dry run)"
	case dryRunServer:
		return " (server dry run)"
	}
	return ""
}

// messages is where the sentences go: stdout, or stderr when stdout has
// the object (-o).
func (w *writeOptions) messages(s genericiooptions.IOStreams) io.Writer {
	if w.printer != nil {
		return s.ErrOut
	}
	return s.Out
}

// printObject prints obj as -o asks, if it does.
func (w *writeOptions) printObject(obj runtime.Object, out io.Writer) error {
	if w.printer == nil || obj == nil {
		return nil
	}
	return w.printer.PrintObj(obj, out)
}

// nodeWriteOptions are what fence and release share: NODE (a Node,
// cluster-scoped: no -n), the kubeconfig flags and the write flags, and
// the Complete and Validate of a verb that writes for one node.
type nodeWriteOptions struct {
	genericiooptions.IOStreams
	kube  *kubeOptions
	write *writeOptions

	verb string
	node string
}

// addFlags adds the kubeconfig and write flags, and completes NODE with
// the cluster's node names.
func (o *nodeWriteOptions) addFlags(f *factory, cmd *cobra.Command) {
	o.kube = addKubeFlags(f, cmd, false)
	o.write = addWriteFlags(cmd)
	cmd.ValidArgsFunction = o.kube.completeNodeNames
}

func (o *nodeWriteOptions) Complete(_ *cobra.Command, args []string) error {
	node, err := oneNode(o.verb, args)
	if err != nil {
		return err
	}
	o.node = node
	return o.write.complete()
}

func (o *nodeWriteOptions) Validate() error { return nil }

// runVerb is a verb's RunE: Complete, Validate, Run, as kubectl's
// commands.
func runVerb(o interface {
	Complete(cmd *cobra.Command, args []string) error
	Validate() error
	Run(ctx context.Context) error
}) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := o.Complete(cmd, args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
}

// oneNode is the NODE argument of a verb that takes exactly one.
func oneNode(verb string, args []string) (string, error) {
	if len(args) != 1 {
		return "", fmt.Errorf("%s: want exactly one NODE", verb)
	}
	return args[0], nil
}

// noArgs refuses the arguments of a verb that takes none.
func noArgs(verb string, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", verb, args)
	}
	return nil
}
