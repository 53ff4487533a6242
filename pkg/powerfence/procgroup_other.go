//go:build !unix

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

package powerfence

import "os/exec"

// killProcessGroup keeps os/exec's default, killing the agent alone: the
// fence agents are Linux programs, run by the sidecar's Linux image, and
// off Unix this package is only compiled into tools that never start one
// (kubectl-fence reads its types). The call still ends at its timeout:
// WaitDelay closes the pipes a surviving child would hold.
func killProcessGroup(cmd *exec.Cmd) {}
