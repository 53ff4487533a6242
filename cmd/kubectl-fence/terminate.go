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
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// terminateOptions are terminate's flags and argument.
type terminateOptions struct {
	genericiooptions.IOStreams
	kube  *kubeOptions
	write *writeOptions

	name      string
	namespace string
	reason    string
	grace     int64 // -1: the pod's own
	// forceFlag is --force; force, what it resolves to with the grace
	// period: a force delete (grace period 0 with --force).
	forceFlag bool
	force     bool
	// warning, if any, goes to stderr before the delete, as kubectl's.
	warning string
}

func newTerminateCommand(f *factory) *cobra.Command {
	o := &terminateOptions{IOStreams: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "terminate pod/NAME --reason=REASON",
		Short: "Record why, then delete the pod",
		Long: `Record why the pod is terminated, where its preStop hook reads it
(csi-fence-prestop), then delete the pod, for the pod read only (never a
namesake created meanwhile). A pod already terminating is refused.

--grace-period and --force are kubectl delete's: 0 alone is taken as 1 (a
graceful delete), --force with 0 (or none) is a force delete.`,
		Example: `  kubectl fence terminate pod/db-0 -n shop --reason="Moving to rack B"
  kubectl fence terminate pod/db-0 -n shop --reason="Rack 7 retired" --dry-run=server`,
		RunE: runVerb(o),
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "Why the pod is terminated, delivered to its preStop hook (required)")
	cmd.Flags().Int64Var(&o.grace, "grace-period", -1, "Seconds the pod has to stop (default: its own terminationGracePeriodSeconds); 0 is taken as 1 unless --force is given")
	cmd.Flags().BoolVar(&o.forceFlag, "force", false, "With --grace-period=0 (or none): force delete, the pod is removed from the API at once without waiting for its containers to stop (as kubectl delete --force)")
	o.kube = addKubeFlags(f, cmd, true)
	o.write = addWriteFlags(cmd)
	cmd.ValidArgsFunction = o.completePods
	return cmd
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
func (o *terminateOptions) gracePeriod() {
	if o.grace < 0 {
		o.grace = -1
	}
	switch {
	case o.forceFlag && o.grace <= 0:
		o.grace, o.force, o.warning = 0, true, forceWarning
	case o.forceFlag:
		o.warning = ignoredWarning
	case o.grace == 0:
		o.grace = 1
	}
}

// Complete takes pod/NAME, resolves the grace period, the output and the
// namespace (-n, or the kubeconfig context's).
func (o *terminateOptions) Complete(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return errors.New("terminate: want exactly one pod/NAME")
	}
	name, ok := strings.CutPrefix(args[0], "pod/")
	if !ok {
		name, ok = strings.CutPrefix(args[0], "pods/")
	}
	if !ok || name == "" {
		return fmt.Errorf("terminate: %q is not pod/NAME (only pods carry a termination reason)", args[0])
	}
	o.name = name
	if o.reason == "" {
		return errors.New("terminate: --reason is required")
	}
	o.gracePeriod()
	if err := o.write.complete(); err != nil {
		return err
	}
	ns, err := o.kube.namespace()
	if err != nil {
		return err
	}
	o.namespace = ns
	return nil
}

// Validate checks the reason as the preStop hook will read it.
func (o *terminateOptions) Validate() error {
	return termreason.ValidReason(o.reason)
}

func (o *terminateOptions) Run(ctx context.Context) error {
	return o.kube.run(ctx, o.run)
}

func (o *terminateOptions) run(ctx context.Context, kube kubernetes.Interface, _ dynamic.Interface) error {
	if o.warning != "" {
		fmt.Fprintln(o.ErrOut, o.warning)
	}
	var pod *corev1.Pod
	var err error
	if o.write.sends() {
		pod, err = termreason.TerminatePod(ctx, kube, o.namespace, o.name, o.reason, o.grace, o.write.serverDryRun())
		if err != nil {
			return err
		}
	} else {
		// What the patch would record, for -o; nothing is sent.
		pod, err = termreason.Check(ctx, kube, o.namespace, o.name, o.reason)
		if err != nil {
			return err
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[termreason.ReasonAnnotation] = o.reason
	}
	fmt.Fprintln(o.write.messages(o.IOStreams), o.done())
	return o.write.printObject(pod, o.Out)
}

// done is what terminate prints once the pod is deleted.
func (o *terminateOptions) done() string {
	if o.force {
		return fmt.Sprintf("pod/%s force deleted%s (reason: %s)", o.name, o.write.mark(), o.reason)
	}
	return fmt.Sprintf("pod/%s terminated%s (reason: %s)", o.name, o.write.mark(), o.reason)
}

// completePods completes pod/NAME with the pods of the namespace.
func (o *terminateOptions) completePods(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return o.kube.completeArg(cmd, args, func(ctx context.Context, kube kubernetes.Interface) ([]string, error) {
		ns, err := o.kube.namespace()
		if err != nil {
			return nil, err
		}
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, p := range pods.Items {
			if n := "pod/" + p.Name; strings.HasPrefix(n, toComplete) {
				names = append(names, n)
			}
		}
		return names, nil
	})
}
