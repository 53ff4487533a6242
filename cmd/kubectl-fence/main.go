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
// kubectl-fence, run as `kubectl fence VERB ...`). It is built as kubectl's
// own sample-cli-plugin: cobra commands, the kubeconfig flags of
// k8s.io/cli-runtime's ConfigFlags, IOStreams, and per verb an options
// struct completed, validated and run.
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
// FencingRequest; pause and resume set and remove the storm guard's pause
// switch.
//
// Adding a verb: a file VERB.go with a newVERBCommand(f *factory)
// *cobra.Command building the command from its options struct, and one
// root.AddCommand line in newRootCommand below.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/csi-fence/fence-attacher/pkg/version"
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	args := os.Args[1:]
	if isCompletionExecutable(os.Args[0]) {
		// Run as kubectl_complete-fence: kubectl (>= 1.26) asks it for the
		// completions of `kubectl fence ARGS`, passing ARGS.
		args = append([]string{cobra.ShellCompRequestCmd}, args...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, newFactory(streams), args)
	stop()
	os.Exit(code)
}

// completionExecutable is the name kubectl looks up on PATH to complete
// `kubectl fence`: kubectl_complete-fence (kubectl's plugin completion).
const completionExecutable = "kubectl_complete-fence"

func isCompletionExecutable(argv0 string) bool {
	return strings.TrimSuffix(filepath.Base(argv0), ".exe") == completionExecutable
}

// run runs the plugin with args and returns its exit code: 0, or 1 after
// the error on stderr.
func run(ctx context.Context, f *factory, args []string) int {
	root := newRootCommand(f)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(f.ErrOut, "error:", err)
		return 1
	}
	return 0
}

// newRootCommand is `kubectl fence`, with every verb.
func newRootCommand(f *factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-fence",
		Short: "fence-attacher's kubectl plugin: fence, release and watch nodes, terminate pods with a reason, check manifests",
		Long: `kubectl fence is fence-attacher's kubectl plugin.

It terminates pods with a reason their preStop hook reads, checks built
manifests for an install that will fence, shows the nodes fenced or
quarantined and one node's failover step by step, and fences and releases
a node or pauses all fencing (the break-glass verbs; --as impersonates).`,
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fence"},
		// Errors are printed once, by run, without the usage after them.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(f.In)
	root.SetOut(f.Out)
	root.SetErr(f.ErrOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help' for usage)", err, c.CommandPath())
	})
	// --version, as the old `kubectl fence --version`.
	root.Version = version.String()
	root.SetVersionTemplate("kubectl-fence {{.Version}}\n")
	// completion is a verb of its own (completion.go), not cobra's default.
	root.CompletionOptions.DisableDefaultCmd = true

	root.AddCommand(newVersionCommand(f))
	root.AddCommand(newTerminateCommand(f))
	root.AddCommand(newCheckManifestsCommand(f))
	root.AddCommand(newStatusCommand(f))
	root.AddCommand(newTimelineCommand(f))
	root.AddCommand(newExplainCommand(f))
	root.AddCommand(newFenceCommand(f))
	root.AddCommand(newReleaseCommand(f))
	root.AddCommand(newPauseCommand(f))
	root.AddCommand(newResumeCommand(f))
	root.AddCommand(newCompletionCommand(f))
	return root
}
