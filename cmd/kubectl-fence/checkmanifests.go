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
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/csi-fence/fence-attacher/pkg/manifestcheck"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
)

// checkManifestsOptions are check-manifests' flags. It reads files, not
// the cluster: no kubeconfig flags; -n is the namespace objects without
// one would be applied to, as kubectl apply's.
type checkManifestsOptions struct {
	genericiooptions.IOStreams
	files          []string
	namespace      string
	controllerOnly bool
	quiet          bool
}

// newCheckManifestsCommand checks built manifests (kustomize build's or
// helm template's output) before they are applied: kustomize cannot fail
// a build in which the sidecar component matched nothing, and nothing
// fails an install whose roles are bound to ServiceAccounts no pod runs
// as, so this does, and says what to fix. Every -f is read, together: the
// driver's release and csi-fence's, rendered apart.
func newCheckManifestsCommand(f *factory) *cobra.Command {
	o := &checkManifestsOptions{IOStreams: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "check-manifests [-f FILE]...",
		Short: "Check built manifests (kustomize, helm template; several -f together) for an install that will fence",
		Long: `Check built manifests (kubectl kustomize's or helm template's output)
before they are applied: csi-fence-attacher replaces external-attacher, its
node agent is there, and its roles are bound to the ServiceAccounts its pods
run as. Every -f is read, and all of them are checked together: the driver's
release and csi-fence's, rendered apart.`,
		Example: `  kubectl kustomize my-driver/ | kubectl fence check-manifests
  kubectl fence check-manifests -f driver.yaml -f csi-fence.yaml -n storage`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("check-manifests: unexpected arguments %q (the manifests come from -f or stdin)", args)
			}
			return nil
		},
		RunE:              runVerb(o),
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	cmd.Flags().StringArrayVarP(&o.files, "filename", "f", nil, "File of the built manifests (YAML documents or a List); - reads stdin (the default); repeat it to check several together, e.g. two Helm releases' renders")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "default", "The namespace objects without one are applied to (as kubectl's -n)")
	cmd.Flags().BoolVar(&o.controllerOnly, "controller-only", false, "Do not require the node agent (it is deployed by other manifests)")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "Print errors only")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}

func (o *checkManifestsOptions) Complete(*cobra.Command, []string) error {
	if len(o.files) == 0 {
		o.files = []string{"-"}
	}
	return nil
}

func (o *checkManifestsOptions) Validate() error {
	stdin := 0
	for _, name := range o.files {
		if name == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return errors.New("check-manifests: -f - is given more than once (stdin is read once)")
	}
	return nil
}

func (o *checkManifestsOptions) Run(context.Context) error {
	var objs []*unstructured.Unstructured
	var releases []manifestcheck.Release
	for _, name := range o.files {
		read, err := o.read(name)
		if err != nil {
			return fmt.Errorf("check-manifests: reading the manifests of %s: %w", name, err)
		}
		objs = append(objs, read...)
		releases = append(releases, manifestcheck.Release{Name: name, Objects: read})
	}
	r, err := manifestcheck.Check(objs, manifestcheck.Options{Flags: sidecar.NewFlagSet, ControllerOnly: o.controllerOnly, Namespace: o.namespace})
	if err != nil {
		return err
	}
	r.Errors = append(r.Errors, manifestcheck.CheckReleases(releases, o.namespace)...)
	if !o.quiet {
		for _, n := range r.Notes {
			fmt.Fprintln(o.Out, "found:", n)
		}
	}
	if err := r.Err(); err != nil {
		return errors.New("check-manifests:\n" + err.Error())
	}
	if !o.quiet {
		fmt.Fprintf(o.Out, "ok: csi-fence-attacher is in place and bound to the pods' ServiceAccounts (%d containers in %d workloads checked)\n", len(r.Sidecars), len(r.Workloads))
	}
	return nil
}

// read reads the objects of one -f.
func (o *checkManifestsOptions) read(name string) ([]*unstructured.Unstructured, error) {
	if name == "-" {
		return manifestcheck.Read(o.In)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return manifestcheck.Read(f)
}
