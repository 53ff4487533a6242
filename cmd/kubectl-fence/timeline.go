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

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fenceview"
)

// timelineOptions are timeline's flags and NODE (cluster-scoped: no -n).
type timelineOptions struct {
	viewOptions
	node string
}

func newTimelineCommand(f *factory) *cobra.Command {
	o := &timelineOptions{viewOptions: viewOptions{IOStreams: f.IOStreams, verb: "timeline"}}
	cmd := &cobra.Command{
		Use:     "timeline NODE",
		Short:   "The steps of a node's failover, from its record, conditions, taints and Events",
		Example: "  kubectl fence timeline node-a\n  kubectl fence timeline node-a -o yaml",
		RunE:    runVerb(o),
	}
	addViewOutputFlag(cmd, &o.output)
	o.kube = addKubeFlags(f, cmd, false)
	cmd.ValidArgsFunction = o.kube.completeNodeNames
	return cmd
}

func (o *timelineOptions) Complete(_ *cobra.Command, args []string) error {
	node, err := oneNode("timeline", args)
	o.node = node
	return err
}

func (o *timelineOptions) Run(ctx context.Context) error {
	return o.kube.run(ctx, o.run)
}

func (o *timelineOptions) run(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	tl, err := fenceview.GetTimeline(ctx, kube, fencingv1alpha1.NewClient(dyn), o.node)
	if err != nil {
		return err
	}
	return write(o.Out, o.output, tl, tl.Table)
}
