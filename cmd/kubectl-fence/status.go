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
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fenceview"
)

// statusOptions are status' flags. It reads cluster-scoped objects (Nodes,
// FencingRequests) and the storm guard's Lease, whose namespace is the
// sidecars' --storm-guard-namespace, not the user's: no -n.
type statusOptions struct {
	viewOptions
	stormGuard string
	now        func() time.Time
}

func newStatusCommand(f *factory) *cobra.Command {
	o := &statusOptions{viewOptions: viewOptions{IOStreams: f.IOStreams, verb: "status"}, now: f.now}
	cmd := &cobra.Command{
		Use:               "status",
		Short:             "Nodes fenced or quarantined, their records, volumes and the storm guard",
		Example:           "  kubectl fence status\n  kubectl fence status -o json --storm-guard-namespace=csi-fence-system",
		RunE:              runVerb(o),
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	addViewOutputFlag(cmd, &o.output)
	addStormGuardFlag(cmd, &o.stormGuard)
	o.kube = addKubeFlags(f, cmd, false)
	return cmd
}

// addStormGuardFlag adds --storm-guard-namespace: the sidecars' flag, the
// same in every driver.
func addStormGuardFlag(cmd *cobra.Command, ns *string) {
	cmd.Flags().StringVar(ns, "storm-guard-namespace", "kube-system", "Namespace of the storm guard's Lease (the sidecars' --storm-guard-namespace)")
}

func (o *statusOptions) Complete(_ *cobra.Command, args []string) error {
	return noArgs("status", args)
}

func (o *statusOptions) Run(ctx context.Context) error {
	return o.kube.run(ctx, o.run)
}

func (o *statusOptions) run(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	st, err := fenceview.GetStatus(ctx, kube, fencingv1alpha1.NewClient(dyn), o.stormGuard)
	if err != nil {
		return err
	}
	st.AddProtection(ctx, kube, dyn, fenceview.ExplainOptions{StormGuardNamespace: o.stormGuard})
	now := o.now()
	return write(o.Out, o.output, st, func() string { return st.Table(now) })
}
