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
	"fmt"

	"github.com/spf13/cobra"
)

// shells are the completion scripts cobra generates.
var shells = []string{"bash", "zsh", "fish", "powershell"}

// newCompletionCommand prints the completion script of kubectl-fence run
// by that name. Every script asks the plugin itself (its hidden
// __complete command) for the verbs, flags, node and pod names, so the
// scripts need no update when a verb is added. `kubectl fence <TAB>` is
// completed by kubectl itself (>= 1.26) through kubectl_complete-fence on
// PATH: see docs/kubectl-fence.md.
func newCompletionCommand(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print a shell completion script for kubectl-fence",
		Long: `Print a shell completion script for kubectl-fence, the plugin run by its
own name. kubectl (>= 1.26) completes "kubectl fence ..." itself when an
executable kubectl_complete-fence is on PATH (a link to kubectl-fence, or the
script shipped beside it).`,
		Example: `  source <(kubectl-fence completion bash)
  kubectl-fence completion zsh > "${fpath[1]}/_kubectl-fence"
  kubectl-fence completion fish > ~/.config/fish/completions/kubectl-fence.fish
  ln -s "$(command -v kubectl-fence)" "$(dirname "$(command -v kubectl-fence)")/kubectl_complete-fence"`,
		ValidArgs: shells,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return errors.New("completion: want bash, zsh, fish or powershell")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(f.Out, true)
			case "zsh":
				return root.GenZshCompletion(f.Out)
			case "fish":
				return root.GenFishCompletion(f.Out, true)
			case "powershell":
				return root.GenPowerShellCompletionWithDesc(f.Out)
			}
			return fmt.Errorf("completion: unknown shell %q (bash, zsh, fish or powershell)", args[0])
		},
	}
}
