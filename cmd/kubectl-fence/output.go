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
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"
)

// viewFormats are -o of status and timeline: their views are not API
// objects (a table, or the same fields as JSON or YAML for scripts), so
// cli-runtime's object printers do not apply.
var viewFormats = []string{"table", "json", "yaml"}

// viewOptions are what the view verbs (status, timeline, explain) share:
// the kubeconfig flags, -o, and the Validate that checks it.
type viewOptions struct {
	genericiooptions.IOStreams
	kube   *kubeOptions
	verb   string
	output string
}

func (o *viewOptions) Validate() error { return validateViewOutput(o.verb, o.output) }

// addViewOutputFlag adds -o/--output to a view verb.
func addViewOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "Output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(viewFormats, cobra.ShellCompDirectiveNoFileComp))
}

func validateViewOutput(verb, output string) error {
	for _, f := range viewFormats {
		if output == f {
			return nil
		}
	}
	return fmt.Errorf("%s: unknown output format %q (table, json or yaml)", verb, output)
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
