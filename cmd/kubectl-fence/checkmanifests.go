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
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/csi-fence/fence-attacher/pkg/manifestcheck"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
)

// checkManifests checks built manifests (kustomize build's or helm
// template's output) before they are applied: kustomize cannot fail a
// build in which the sidecar component matched nothing, and nothing fails
// an install whose roles are bound to ServiceAccounts no pod runs as, so
// this does, and says what to fix. Several -f are read together: the
// driver's release and csi-fence's, rendered apart.
//
//	kubectl kustomize my-driver/ | kubectl fence check-manifests
//	kubectl fence check-manifests -f driver.yaml -f csi-fence.yaml
func checkManifests(args []string) error {
	return runCheckManifests(args, os.Stdin, os.Stdout)
}

// files is a repeatable -f.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func runCheckManifests(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("check-manifests", flag.ContinueOnError)
	var in files
	fs.Var(&in, "f", "file of the built manifests (YAML documents or a List); - reads stdin (the default); repeat it to check several together, e.g. two Helm releases' renders")
	controllerOnly := fs.Bool("controller-only", false, "do not require the node agent (it is deployed by other manifests)")
	namespace := fs.String("n", "default", "the namespace objects without one are applied to (as kubectl's -n)")
	quiet := fs.Bool("q", false, "print errors only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("check-manifests: unexpected arguments %q (the manifests come from -f or stdin)", fs.Args())
	}
	if len(in) == 0 {
		in = files{"-"}
	}
	var objs []*unstructured.Unstructured
	var releases []manifestcheck.Release
	for _, name := range in {
		r := stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		o, err := manifestcheck.Read(r)
		if err != nil {
			return fmt.Errorf("check-manifests: reading the manifests of %s: %w", name, err)
		}
		objs = append(objs, o...)
		releases = append(releases, manifestcheck.Release{Name: name, Objects: o})
	}
	r, err := manifestcheck.Check(objs, manifestcheck.Options{Flags: sidecar.NewFlagSet, ControllerOnly: *controllerOnly, Namespace: *namespace})
	if err != nil {
		return err
	}
	r.Errors = append(r.Errors, manifestcheck.CheckReleases(releases, *namespace)...)
	if !*quiet {
		for _, n := range r.Notes {
			fmt.Fprintln(stdout, "found:", n)
		}
	}
	if err := r.Err(); err != nil {
		return errors.New("check-manifests:\n" + err.Error())
	}
	if !*quiet {
		fmt.Fprintf(stdout, "ok: csi-fence-attacher is in place and bound to the pods' ServiceAccounts (%d containers in %d workloads checked)\n", len(r.Sidecars), len(r.Workloads))
	}
	return nil
}
