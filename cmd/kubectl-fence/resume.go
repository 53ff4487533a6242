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
	"github.com/spf13/cobra"
)

func newResumeCommand(f *factory) *cobra.Command {
	o := &switchOptions{IOStreams: f.IOStreams, verb: "resume"}
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Remove the pause switch",
		Long: `Remove the storm guard's pause switch set by pause: fencing goes on as
the storm guard admits it. --as impersonates (break-glass roles).`,
		Example:           "  kubectl fence resume\n  kubectl fence resume --dry-run=server",
		RunE:              runVerb(o),
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	o.addFlags(f, cmd)
	return cmd
}
