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

	"github.com/csi-fence/fence-attacher/pkg/fenceview"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// explainOptions are explain's flags and target. It reads pods, so it takes
// -n (and -A); the logic and the output are pkg/fenceview.Explain's, which
// asks pkg/protection, the failover's own decisions.
type explainOptions struct {
	viewOptions
	stormGuard string
	all        bool
	grace      time.Duration
	target     fenceview.Target
}

func newExplainCommand(f *factory) *cobra.Command {
	o := &explainOptions{viewOptions: viewOptions{IOStreams: f.IOStreams, verb: "explain"}}
	cmd := &cobra.Command{
		Use:   "explain [pod/NAME|sts/NAME|deploy/NAME|ns/NAME]",
		Short: "Would these pods fail over if their node died now: through which backend, after how long, and if not, why",
		Example: "  kubectl fence explain -A\n  kubectl fence explain sts/db -n prod\n" +
			"  kubectl fence explain pod/db-0 -n prod -o yaml",
		RunE:              runVerb(o),
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	addViewOutputFlag(cmd, &o.output)
	addStormGuardFlag(cmd, &o.stormGuard)
	cmd.Flags().BoolVarP(&o.all, "all-namespaces", "A", false, "Every pod of the cluster")
	cmd.Flags().DurationVar(&o.grace, "node-monitor-grace-period", protection.DefaultNodeMonitorGracePeriod,
		"kube-controller-manager's --node-monitor-grace-period, the first term of the time to failover")
	o.kube = addKubeFlags(f, cmd, true)
	return cmd
}

func (o *explainOptions) Complete(_ *cobra.Command, args []string) error {
	ns, err := o.kube.namespace()
	if err != nil {
		return err
	}
	o.target, err = fenceview.ParseTarget(args, ns, o.all)
	return err
}

func (o *explainOptions) Run(ctx context.Context) error {
	return o.kube.run(ctx, o.run)
}

func (o *explainOptions) run(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	x, err := fenceview.Explain(ctx, kube, dyn, o.target, fenceview.ExplainOptions{
		StormGuardNamespace: o.stormGuard, NodeMonitorGracePeriod: o.grace})
	if err != nil {
		return err
	}
	return x.Write(o.Out, o.output)
}
