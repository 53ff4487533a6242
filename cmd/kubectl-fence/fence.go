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
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// fenceOptions are fence's flags and NODE (a Node, cluster-scoped: no -n).
type fenceOptions struct {
	nodeWriteOptions
	reason string
}

func newFenceCommand(f *factory) *cobra.Command {
	o := &fenceOptions{nodeWriteOptions: nodeWriteOptions{IOStreams: f.IOStreams, verb: "fence"}}
	cmd := &cobra.Command{
		Use:   "fence NODE [--reason=REASON]",
		Short: "Create the admin's FencingRequest for the node (fences its storage even when it is Ready)",
		Long: `Create the admin's FencingRequest for the node, named after it, origin
Manual: the product fences the node's volumes' storage, even when the node
is Ready, and quarantines it. A node with a FencingRequest already is
refused, unless it is an admin's request released and Complete, which the
new one replaces. --as impersonates (break-glass roles).`,
		Example: `  kubectl fence fence node-a --reason="disk controller wedged"
  kubectl fence fence node-a --dry-run=server -o yaml
  kubectl fence fence node-a --as=oncall --as-group=csi-fence:break-glass`,
		RunE: runVerb(o),
	}
	cmd.Flags().StringVar(&o.reason, "reason", "", "Why the node is fenced (the FencingRequest's spec.reason)")
	o.addFlags(f, cmd)
	return cmd
}

func (o *fenceOptions) Run(ctx context.Context) error {
	return o.kube.run(ctx, o.run)
}

// describe says what an existing FencingRequest is, for refusals.
func describe(fr *fencingv1alpha1.FencingRequest) string {
	origin := fr.Spec.Origin
	if origin == "" {
		origin = fencingv1alpha1.OriginManual
	}
	phase := string(fr.Status.Phase)
	if phase == "" {
		phase = "no phase yet"
	}
	s := fmt.Sprintf("origin %s, %s", origin, phase)
	if fr.Spec.Released {
		s += ", released"
	}
	if fr.DeletionTimestamp != nil {
		s += fmt.Sprintf(", withdrawn at %s and kept by its finalizer %s until its volumes are cleaned", fr.DeletionTimestamp.UTC().Format(time.RFC3339), contract.RecordFinalizer)
	}
	return s
}

// run creates the admin's FencingRequest for the node: named after it,
// spec.nodeName the node (the CRD's rule), origin Manual. It refuses when
// the node has a FencingRequest already, whatever its origin: there is one
// per node, and the existing one is either the admin's or the failover's
// record, which must not be replaced while it has work to do. An admin's
// request released and Complete has none: the new one replaces it.
func (o *fenceOptions) run(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	out := o.write.messages(o.IOStreams)
	node, err := kube.CoreV1().Nodes().Get(ctx, o.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("fence: node %q not found: nothing created (a FencingRequest fences a Node by its name)", o.node)
	}
	if err != nil {
		return fmt.Errorf("fence: reading node %q: %w", o.node, err)
	}
	frs := fencingv1alpha1.NewClient(dyn)
	res := dyn.Resource(fencingv1alpha1.Resource)
	refuse := func(fr *fencingv1alpha1.FencingRequest) error {
		hint := "`kubectl fence release " + o.node + "` withdraws it"
		switch {
		case fr.Spec.Origin == fencingv1alpha1.OriginAutomatic:
			hint = "it is the failover's record of the node, released by the controller once every volume recorded there is cleaned"
		case fr.DeletionTimestamp != nil:
			hint = "a new request can be created once it is gone"
		case fr.Spec.Released:
			hint = "it was released and waits for its volumes to be cleaned; a new request can be created once it is Complete"
		}
		return fmt.Errorf("fence: fencingrequest/%s already exists (%s): nothing created; %s (kubectl fence status, timeline %s)", o.node, describe(fr), hint, o.node)
	}
	replaced := false
	existing, err := frs.Get(ctx, o.node)
	switch {
	case err == nil && finished(existing):
		// A released request whose work is done is only a record now: the
		// new request takes its place (only that one, by UID).
		replaced = true
		if o.write.sends() {
			uid := existing.UID
			err := res.Delete(ctx, o.node, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, DryRun: o.write.serverDryRun()})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("fence: replacing the completed fencingrequest/%s: %w", o.node, err)
			}
		}
		fmt.Fprintf(out, "fencingrequest/%s of an earlier fence was released and Complete: replaced%s\n", o.node, o.write.mark())
	case err == nil:
		return refuse(existing)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("fence: reading fencingrequest/%s: %w", o.node, err)
	}
	u, err := fencingv1alpha1.ToUnstructured(&fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: o.node},
		Spec: fencingv1alpha1.FencingRequestSpec{
			NodeName: o.node,
			Origin:   fencingv1alpha1.OriginManual,
			Reason:   o.reason,
		},
	})
	if err != nil {
		return err
	}
	created := u
	if o.write.sends() {
		created, err = res.Create(ctx, u, metav1.CreateOptions{DryRun: o.write.serverDryRun()})
		switch {
		case apierrors.IsAlreadyExists(err) && replaced && o.write.dryRun == dryRunServer:
			// The request it replaces was deleted in a dry run only: the
			// apiserver cannot check the create behind it.
			fmt.Fprintf(out, "fencingrequest/%s: the create is not checked by the apiserver in a dry run: the request it replaces is still there\n", o.node)
			created = u
		case apierrors.IsAlreadyExists(err):
			if existing, gerr := frs.Get(ctx, o.node); gerr == nil {
				return refuse(existing)
			}
			return fmt.Errorf("fence: creating fencingrequest/%s: %w", o.node, err)
		case err != nil:
			return fmt.Errorf("fence: creating fencingrequest/%s: %w", o.node, err)
		}
	}
	fmt.Fprintf(out, "fencingrequest/%s created%s (origin Manual", o.node, o.write.mark())
	if o.reason != "" {
		fmt.Fprintf(out, ", reason: %s", o.reason)
	}
	fmt.Fprintln(out, ")")
	if nodeReady(node) {
		fmt.Fprintf(out, "node %s is Ready: its volumes' storage is fenced while it runs, and no pod on it is force-deleted\n", o.node)
	}
	if o.write.dryRun == dryRunNone {
		fmt.Fprintf(out, "follow it with `kubectl fence timeline %s`; `kubectl fence release %s` withdraws it\n", o.node, o.node)
	}
	return o.write.printObject(created, o.Out)
}

// finished reports whether fr is an admin's request that was released and
// whose work is done: Complete, nothing left to clean, no finalizer.
func finished(fr *fencingv1alpha1.FencingRequest) bool {
	return fr.Spec.Origin != fencingv1alpha1.OriginAutomatic && fr.Spec.Released && fr.DeletionTimestamp == nil &&
		fr.Status.Phase == fencingv1alpha1.PhaseComplete && len(fr.Finalizers) == 0 && !fencerecord.Pending(fr)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
