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

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// releaseOptions are release's flags and NODE (cluster-scoped: no -n).
type releaseOptions struct {
	nodeWriteOptions
}

func newReleaseCommand(f *factory) *cobra.Command {
	o := &releaseOptions{nodeWriteOptions: nodeWriteOptions{IOStreams: f.IOStreams, verb: "release"}}
	cmd := &cobra.Command{
		Use:   "release NODE",
		Short: "Withdraw the admin's FencingRequest (spec.released; the node leaves quarantine once its volumes are cleaned, the request stays as the record)",
		Long: `Withdraw the admin's FencingRequest for the node through its spec
(spec.released=true): nothing new is fenced for it; the failover lifts the
quarantine once the node agent has cleaned every volume recorded in it, and
marks it Complete. The request is never deleted: it stays as the record.
The failover's automatic record is refused: the controller releases that
node itself. --as impersonates (break-glass roles).`,
		Example: "  kubectl fence release node-a\n  kubectl fence release node-a --dry-run=client",
		RunE:    runVerb(o),
	}
	o.addFlags(f, cmd)
	return cmd
}

func (o *releaseOptions) Run(ctx context.Context) error {
	return o.kube.run(ctx, o.run)
}

// run withdraws the admin's FencingRequest for the node through its
// spec: spec.released=true, by an update of the object it read. The
// failover writes the request's status while it fences (its intents and
// outcomes), which conflicts with the update without changing what it
// decides: on a conflict it reads the request again, decides again and
// retries (client-go's default backoff, a few tries). The request is never
// deleted: it stays as the record of what was done. The failover's
// automatic record is refused: the controller releases that node itself
// once it is clean.
func (o *releaseOptions) run(ctx context.Context, _ kubernetes.Interface, dyn dynamic.Interface) error {
	out := o.write.messages(o.IOStreams)
	frs := fencingv1alpha1.NewClient(dyn)
	var updated, withdrawn *fencingv1alpha1.FencingRequest
	var written runtime.Object
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fr, err := frs.Get(ctx, o.node)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("release: node %q has no FencingRequest: nothing to release", o.node)
		}
		if err != nil {
			return fmt.Errorf("release: reading fencingrequest/%s: %w", o.node, err)
		}
		if fr.Spec.Origin == fencingv1alpha1.OriginAutomatic {
			return fmt.Errorf("release: fencingrequest/%s is the failover's automatic record (%s), not an admin's request: nothing changed; the controller releases the node itself once every volume recorded there is cleaned (kubectl fence timeline %s)", o.node, describe(fr), o.node)
		}
		if fr.Withdrawn() {
			withdrawn = fr
			return nil
		}
		fr.Spec.Released = true
		u, err := fencingv1alpha1.ToUnstructured(fr)
		if err != nil {
			return err
		}
		updated, written = fr, u
		if !o.write.sends() {
			return nil
		}
		res, err := dyn.Resource(fencingv1alpha1.Resource).Update(ctx, u, metav1.UpdateOptions{DryRun: o.write.serverDryRun()})
		if err != nil {
			return fmt.Errorf("release: setting spec.released on fencingrequest/%s: %w", o.node, err)
		}
		if updated, err = fencingv1alpha1.FromUnstructured(res); err != nil {
			return err
		}
		written = res
		return nil
	})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("release: fencingrequest/%s kept changing while it was released: nothing changed; run it again", o.node)
	}
	if err != nil {
		return err
	}
	if withdrawn != nil {
		fmt.Fprintf(out, "fencingrequest/%s already withdrawn (%s)\n", o.node, describe(withdrawn))
		u, err := fencingv1alpha1.ToUnstructured(withdrawn)
		if err != nil {
			return err
		}
		return o.write.printObject(u, o.Out)
	}
	pending := 0
	for _, v := range updated.Status.Volumes {
		if v.CleanedTime == nil {
			pending++
		}
	}
	if pending == 0 {
		fmt.Fprintf(out, "fencingrequest/%s released%s (spec.released=true): nothing new is fenced for it; nothing recorded in it is left to clean: the failover lifts the quarantine, and the request is Complete and kept as the record (kubectl fence status)\n", o.node, o.write.mark())
	} else {
		fmt.Fprintf(out, "fencingrequest/%s released%s (spec.released=true): nothing new is fenced for it; the node stays quarantined until the node agent has cleaned each volume recorded in it (%d not cleaned yet), then the request is Complete and kept as the record (kubectl fence status)\n",
			o.node, o.write.mark(), pending)
	}
	return o.write.printObject(written, o.Out)
}
