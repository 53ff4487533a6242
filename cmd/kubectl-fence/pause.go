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
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-fence/fence-attacher/pkg/fenceview"
)

// switchOptions are the flags of pause and resume: they write the storm
// guard's Lease, in the sidecars' --storm-guard-namespace (a setting of
// the install, not the user's namespace: no -n).
type switchOptions struct {
	genericiooptions.IOStreams
	kube  *kubeOptions
	write *writeOptions

	verb       string
	reason     string
	stormGuard string
}

func newPauseCommand(f *factory) *cobra.Command {
	o := &switchOptions{IOStreams: f.IOStreams, verb: "pause"}
	cmd := &cobra.Command{
		Use:   "pause --reason=REASON",
		Short: "Stop all new fencing (the storm guard's pause switch)",
		Long: `Set the storm guard's pause switch: no new node is fenced by any driver;
nodes under fencing go on. The reason is the switch's value, shown by
status. --as impersonates (break-glass roles).`,
		Example:           `  kubectl fence pause --reason="storage maintenance"`,
		RunE:              runVerb(o),
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "Why fencing is paused, shown by status (required)")
	o.addFlags(f, cmd)
	return cmd
}

func (o *switchOptions) addFlags(f *factory, cmd *cobra.Command) {
	addStormGuardFlag(cmd, &o.stormGuard)
	o.kube = addKubeFlags(f, cmd, false)
	o.write = addWriteFlags(cmd)
}

func (o *switchOptions) Complete(_ *cobra.Command, args []string) error {
	if err := noArgs(o.verb, args); err != nil {
		return err
	}
	return o.write.complete()
}

func (o *switchOptions) Validate() error {
	if o.verb == "pause" && o.reason == "" {
		return errors.New("pause: --reason is required (it is the pause switch's value, shown by status)")
	}
	return nil
}

func (o *switchOptions) Run(ctx context.Context) error {
	var reason *string
	if o.verb == "pause" {
		reason = &o.reason
	}
	return o.kube.run(ctx, func(ctx context.Context, kube kubernetes.Interface, _ dynamic.Interface) error {
		return o.setPaused(ctx, kube, reason)
	})
}

// setPaused sets (reason) or removes (nil) the pause switch on the storm
// guard's Lease by a merge patch (the admissions the sidecars write beside
// it are left alone), creating the Lease to pause if no sidecar has yet.
func (o *switchOptions) setPaused(ctx context.Context, kube kubernetes.Interface, reason *string) error {
	out := o.write.messages(o.IOStreams)
	leases := kube.CoordinationV1().Leases(o.stormGuard)
	where := fmt.Sprintf("Lease %s/%s", o.stormGuard, fenceview.StormGuardLease)
	paused := func(extra string) {
		fmt.Fprintf(out, "fencing paused%s (%s, reason: %s%s): no new node is fenced by any driver; nodes under fencing go on\n", o.write.mark(), where, *reason, extra)
	}
	lease, err := leases.Get(ctx, fenceview.StormGuardLease, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && reason == nil:
		fmt.Fprintf(out, "fencing is not paused (no %s)\n", where)
		return nil
	case apierrors.IsNotFound(err):
		created := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: fenceview.StormGuardLease, Namespace: o.stormGuard,
			Annotations: map[string]string{fenceview.PausedAnnotation: *reason},
		}}
		if o.write.sends() {
			created, err = leases.Create(ctx, created, metav1.CreateOptions{DryRun: o.write.serverDryRun()})
			if apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%s: %s was created meanwhile: run it again", o.verb, where)
			}
			if err != nil {
				return fmt.Errorf("%s: creating %s: %w", o.verb, where, err)
			}
		}
		paused("")
		return o.write.printObject(created, o.Out)
	case err != nil:
		return fmt.Errorf("%s: reading %s: %w", o.verb, where, err)
	}
	was, isPaused := lease.Annotations[fenceview.PausedAnnotation]
	if reason == nil && !isPaused {
		fmt.Fprintf(out, "fencing is not paused (%s has no %s)\n", where, fenceview.PausedAnnotation)
		return o.write.printObject(lease, o.Out)
	}
	var value any
	if reason != nil {
		value = *reason
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fenceview.PausedAnnotation: value}}})
	if err != nil {
		return err
	}
	patched := lease.DeepCopy()
	if o.write.sends() {
		patched, err = leases.Patch(ctx, fenceview.StormGuardLease, types.MergePatchType, patch, metav1.PatchOptions{DryRun: o.write.serverDryRun()})
		if err != nil {
			return fmt.Errorf("%s: patching %s: %w", o.verb, where, err)
		}
	} else if reason == nil {
		delete(patched.Annotations, fenceview.PausedAnnotation)
	} else {
		if patched.Annotations == nil {
			patched.Annotations = map[string]string{}
		}
		patched.Annotations[fenceview.PausedAnnotation] = *reason
	}
	switch {
	case reason == nil:
		fmt.Fprintf(out, "fencing resumed%s (%s; was paused: %s)\n", o.write.mark(), where, was)
	case isPaused:
		paused("; it was already paused: " + was)
	default:
		paused("")
	}
	return o.write.printObject(patched, o.Out)
}
