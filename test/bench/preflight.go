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

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// FailoverPaths are the paths --mode=failover measures.
var FailoverPaths = []string{"automatic", "out-of-service", "power"}

// needs is what a run needs from the machine besides Go, which builds the
// product on every control plane.
type needs struct {
	// controlPlane: etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and KWOK (hack/e2e-binaries.sh builds them once).
	controlPlane bool
	// fenceAgents: fence_ipmilan, ipmitool and ipmi_sim, the power path's
	// (hack/install-fence-agents.sh installs them).
	fenceAgents bool
	// realNodes: root, the host's kernel features, runc and the CNI
	// plugins (hack/install-node-deps.sh), the kubelet and containerd
	// (hack/node-binaries.sh builds them once).
	realNodes bool
}

// realRequirements checks a run on real nodes: the failover mode, its
// paths of RealNodePaths.
func realRequirements(mode string, paths []string) error {
	if mode != "failover" {
		return fmt.Errorf("--nodes=real measures --mode=failover, not %q", mode)
	}
	for _, p := range paths {
		if !slices.Contains(RealNodePaths, p) {
			return fmt.Errorf("path %q in --paths is not measured on real nodes: want %s", p, strings.Join(RealNodePaths, ", "))
		}
	}
	return nil
}

// requirements checks the mode and its arguments and says what the run
// needs; it looks at nothing on the machine.
func requirements(mode string, paths []string, trials, volumes int) (needs, error) {
	switch mode {
	case "failover":
		if trials < 1 {
			return needs{}, fmt.Errorf("--trials=%d: want at least 1", trials)
		}
		if len(paths) == 0 || slices.Contains(paths, "") {
			return needs{}, fmt.Errorf("--paths=%s: want paths separated by commas, of %s", strings.Join(paths, ","), strings.Join(FailoverPaths, ", "))
		}
		for _, p := range paths {
			if !slices.Contains(FailoverPaths, p) {
				return needs{}, fmt.Errorf("unknown path %q in --paths: want %s", p, strings.Join(FailoverPaths, ", "))
			}
		}
		return needs{controlPlane: true, fenceAgents: slices.Contains(paths, "power")}, nil
	case "burst":
		if volumes < 1 {
			return needs{}, fmt.Errorf("--volumes=%d: want at least 1", volumes)
		}
		return needs{controlPlane: true}, nil
	case "attach", "scale":
		return needs{controlPlane: true}, nil
	}
	return needs{}, fmt.Errorf("unknown --mode %q: want failover, burst, attach or scale", mode)
}

// preflight provides what the run needs before it measures anything, with
// the project's own scripts as `make test` does: it checks the fence agents
// first (seconds; installed by their script where it can, else an error
// naming the command to run), then gets the control-plane binaries (built
// once, ~11 minutes cold, seconds warm). It returns the options that start
// every control plane of the run on those binaries.
func (b *bench) preflight(ctx context.Context, n needs) (framework.Options, error) {
	begin := time.Now()
	var opts framework.Options
	if _, err := exec.LookPath("go"); err != nil {
		return opts, fmt.Errorf("go is needed to build the product on each control plane: %w", err)
	}
	var done []string
	if n.fenceAgents {
		if err := framework.EnsureFenceAgents(ctx, b); err != nil {
			return opts, err
		}
		done = append(done, "fence_ipmilan, ipmitool and ipmi_sim there")
	}
	if n.realNodes {
		if os.Geteuid() != 0 {
			return opts, fmt.Errorf("--nodes=real runs kubelets and containerd: run it as root")
		}
		if err := framework.CheckRealNodeHost(); err != nil {
			return opts, fmt.Errorf("this host cannot run real nodes (hack/install-node-deps.sh installs what they need): %w", err)
		}
		dir, err := framework.NodeBinaries(ctx)
		if err != nil {
			return opts, err
		}
		done = append(done, "the kubelet and containerd in "+dir)
	}
	if n.controlPlane {
		dir, err := framework.Binaries(ctx, b)
		if err != nil {
			return opts, err
		}
		opts.BinDir = dir
		done = append(done, "control-plane binaries in "+dir)
	}
	b.Logf("preflight: %s (%.1fs)", strings.Join(done, "; "), time.Since(begin).Seconds())
	return opts, nil
}
