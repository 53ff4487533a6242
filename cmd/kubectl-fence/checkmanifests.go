package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/csi-fence/fence-attacher/pkg/manifestcheck"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
)

// checkManifests checks built manifests (kustomize build's or helm
// template's output) before they are applied: kustomize cannot fail a
// build in which the sidecar component matched nothing, so this does, and
// says what it looked for.
//
//	kubectl kustomize my-driver/ | kubectl fence check-manifests
//	kubectl fence check-manifests -f rendered.yaml
func checkManifests(args []string) error {
	return runCheckManifests(args, os.Stdin, os.Stdout)
}

func runCheckManifests(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("check-manifests", flag.ContinueOnError)
	file := fs.String("f", "-", "file of the built manifests (YAML documents or a List); - reads stdin")
	controllerOnly := fs.Bool("controller-only", false, "do not require the node agent (it is deployed by other manifests)")
	quiet := fs.Bool("q", false, "print errors only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("check-manifests: unexpected arguments %q (the manifests come from -f or stdin)", fs.Args())
	}
	in := stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	objs, err := manifestcheck.Read(in)
	if err != nil {
		return fmt.Errorf("check-manifests: reading the manifests: %w", err)
	}
	r, err := manifestcheck.Check(objs, manifestcheck.Options{Flags: sidecar.NewFlagSet, ControllerOnly: *controllerOnly})
	if err != nil {
		return err
	}
	if !*quiet {
		for _, n := range r.Notes {
			fmt.Fprintln(stdout, "found:", n)
		}
	}
	if err := r.Err(); err != nil {
		return errors.New("check-manifests:\n" + err.Error())
	}
	if !*quiet {
		fmt.Fprintf(stdout, "ok: csi-fence-attacher is in place (%d containers in %d workloads checked)\n", len(r.Sidecars), len(r.Workloads))
	}
	return nil
}
