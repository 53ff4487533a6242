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
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fenceview"
)

// viewOptions are the flags of status and timeline.
type viewOptions struct {
	k          kubeFlags
	output     string
	stormGuard string
	timeout    time.Duration
	node       string
}

func parseView(name string, args []string, wantNode bool) (*viewOptions, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o := &viewOptions{}
	o.k.register(fs)
	fs.StringVar(&o.output, "o", "table", "output format: table, json or yaml")
	fs.StringVar(&o.output, "output", "table", "output format: table, json or yaml")
	fs.DurationVar(&o.timeout, "request-timeout", 30*time.Second, "bound of the API requests")
	if !wantNode {
		// The sidecars' --storm-guard-namespace: the same in every driver.
		fs.StringVar(&o.stormGuard, "storm-guard-namespace", "kube-system", "namespace of the storm guard's Lease (the sidecars' --storm-guard-namespace)")
	}
	pos, err := interleave(fs, args)
	if err != nil {
		return nil, err
	}
	switch o.output {
	case "table", "json", "yaml":
	default:
		return nil, fmt.Errorf("%s: unknown output format %q (table, json or yaml)", name, o.output)
	}
	switch {
	case wantNode && len(pos) != 1:
		return nil, fmt.Errorf("%s: want exactly one NODE", name)
	case wantNode:
		o.node = pos[0]
	case len(pos) > 0:
		return nil, fmt.Errorf("%s: unexpected arguments %q", name, pos)
	}
	return o, nil
}

func (o *viewOptions) clients() (kubernetes.Interface, dynamic.Interface, error) {
	rc, _, err := o.k.config()
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	return kube, dyn, err
}

func status(args []string) error {
	o, err := parseView("status", args, false)
	if err != nil {
		return err
	}
	kube, dyn, err := o.clients()
	if err != nil {
		return err
	}
	return runStatus(o, kube, dyn, os.Stdout, time.Now())
}

func runStatus(o *viewOptions, kube kubernetes.Interface, dyn dynamic.Interface, out io.Writer, now time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	st, err := fenceview.GetStatus(ctx, kube, fencingv1alpha1.NewClient(dyn), o.stormGuard)
	if err != nil {
		return err
	}
	return write(out, o.output, st, func() string { return st.Table(now) })
}

func timeline(args []string) error {
	o, err := parseView("timeline", args, true)
	if err != nil {
		return err
	}
	kube, dyn, err := o.clients()
	if err != nil {
		return err
	}
	return runTimeline(o, kube, dyn, os.Stdout)
}

func runTimeline(o *viewOptions, kube kubernetes.Interface, dyn dynamic.Interface, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	tl, err := fenceview.GetTimeline(ctx, kube, fencingv1alpha1.NewClient(dyn), o.node)
	if err != nil {
		return err
	}
	return write(out, o.output, tl, tl.Table)
}

// write prints v as the format asks: the table, or v as JSON or YAML
// (the same fields, for scripts).
func write(out io.Writer, format string, v any, table func() string) error {
	var b []byte
	var err error
	switch format {
	case "table":
		_, err = io.WriteString(out, table())
		return err
	case "json":
		b, err = json.MarshalIndent(v, "", "  ")
		b = append(b, '\n')
	case "yaml":
		b, err = yaml.Marshal(v)
	default:
		err = errors.New("unknown output format " + format)
	}
	if err != nil {
		return err
	}
	_, err = out.Write(b)
	return err
}
