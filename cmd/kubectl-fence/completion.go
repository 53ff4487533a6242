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
)

// bashCompletion completes kubectl-fence's verbs, their flags, and the
// node names of the verbs that take one (from kubectl get nodes). It is
// static: the verbs are listed here (TestCompletionListsEveryVerb checks
// them against the dispatch table).
const bashCompletion = `# bash completion for kubectl-fence (kubectl fence completion bash)
_kubectl_fence() {
    local cur="${COMP_WORDS[COMP_CWORD]}" verb="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in -*) ;; *) verb="${COMP_WORDS[i]}"; break ;; esac
    done
    local conn="--kubeconfig --context --namespace -n --request-timeout"
    local words
    case "$verb" in
    "") words="check-manifests completion fence pause release resume status terminate timeline version" ;;
    terminate) words="--reason --grace-period --force $conn" ;;
    check-manifests) words="-f -n --controller-only -q" ;;
    status) words="-o --output --storm-guard-namespace $conn" ;;
    timeline) words="-o --output $conn" ;;
    fence) words="--reason $conn" ;;
    release) words="$conn" ;;
    pause) words="--reason --storm-guard-namespace $conn" ;;
    resume) words="--storm-guard-namespace $conn" ;;
    completion) words="bash zsh" ;;
    esac
    case "$verb" in
    fence|release|timeline)
        if [[ "$cur" != -* ]]; then
            words="$words $(kubectl get nodes -o 'jsonpath={.items[*].metadata.name}' 2>/dev/null)"
        fi ;;
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -F _kubectl_fence kubectl-fence
`

// zshCompletion runs the bash one through zsh's bashcompinit.
const zshCompletion = "# zsh completion for kubectl-fence (kubectl fence completion zsh)\nautoload -U +X bashcompinit && bashcompinit\n" + bashCompletion

func completion(args []string) error {
	if len(args) != 1 {
		return errors.New("completion: want bash or zsh")
	}
	switch args[0] {
	case "bash":
		fmt.Print(bashCompletion)
	case "zsh":
		fmt.Print(zshCompletion)
	default:
		return fmt.Errorf("completion: unknown shell %q (bash or zsh)", args[0])
	}
	return nil
}
