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

package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ClusterAPI is Cluster API's core manager (the Cluster, Machine,
// MachineSet, MachineDeployment and MachineHealthCheck controllers, built
// from the module pinned in hack/tools/capi) running against the local
// control plane with its CRDs, beside the tests' own infrastructure
// provider (StartInfraProvider). The control plane is its management
// cluster and its workload cluster at once: the kubeconfig Secret of a
// Cluster (CreateWorkloadCluster) points back at the same apiserver, so
// the Machine controller finds the KWOK nodes by their providerIDs, sets
// its Machines' status.nodeRef and annotates the nodes, as it does in a
// real cluster.
//
// Its webhooks are served (the manager does not start without them) but
// not registered with the apiserver: objects are created fully specified.
type ClusterAPI struct {
	Manager *Process
	// Dir holds capi-manager and crds/ (hack/capi-binaries.sh).
	Dir string
	c   *Cluster
}

// CAPIBinaries returns the directory of Cluster API's core manager and
// CRDs: $FENCE_E2E_CAPI_BIN, else what hack/capi-binaries.sh prints (it
// builds them once, about 9 minutes cold, into the e2e cache).
func CAPIBinaries(ctx context.Context) (string, error) {
	if d := os.Getenv("FENCE_E2E_CAPI_BIN"); d != "" {
		return d, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(RepoRoot(), "hack", "capi-binaries.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building Cluster API's core manager (hack/capi-binaries.sh): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// StartClusterAPI installs Cluster API's CRDs and the test provider's, and
// starts Cluster API's core manager with the admin kubeconfig; it returns
// once the manager is ready. Stop it with Stop (the cluster's Stop does as
// well); the CRDs stay.
func (c *Cluster) StartClusterAPI(ctx context.Context) (*ClusterAPI, error) {
	begin := time.Now()
	dir, err := CAPIBinaries(ctx)
	if err != nil {
		return nil, err
	}
	crdFiles, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil || len(crdFiles) == 0 {
		return nil, fmt.Errorf("no Cluster API CRDs in %s/crds (run hack/capi-binaries.sh): %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range crdFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		o, err := decodeManifests(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		objs = append(objs, o...)
	}
	objs = append(objs, infraCRDs()...)
	if err := c.createObjects(ctx, objs, ApplyOptions{}); err != nil {
		return nil, fmt.Errorf("installing the Cluster API CRDs: %w", err)
	}
	if err := c.waitServed(ctx, "cluster.x-k8s.io/v1beta2", "clusters", "machines", "machinesets", "machinehealthchecks"); err != nil {
		return nil, err
	}
	if err := c.waitServed(ctx, InfraGroupVersion, InfraClusterResource.Resource, InfraMachineResource.Resource, InfraMachineTemplateResource.Resource); err != nil {
		return nil, err
	}
	// Its webhook server must start for the manager to be ready.
	if err := c.pki.issue("capi-webhook", "capi-webhook", nil, true); err != nil {
		return nil, err
	}
	a := &ClusterAPI{Dir: dir, c: c}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(3)
		if err != nil {
			return nil, err
		}
		health := "127.0.0.1:" + strconv.Itoa(ports[0])
		a.Manager, err = c.StartProcess("capi-manager", filepath.Join(dir, "capi-manager"),
			"--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--v=2",
			"--health-addr="+health, "--webhook-port="+strconv.Itoa(ports[1]),
			"--diagnostics-address=127.0.0.1:"+strconv.Itoa(ports[2]), "--insecure-diagnostics",
			"--webhook-cert-dir="+c.pki.dir, "--webhook-cert-name=capi-webhook.crt", "--webhook-key-name=capi-webhook.key")
		if err != nil {
			return nil, err
		}
		err = waitHTTPOf(ctx, a.Manager, "http://"+health+"/readyz", nil, 90*time.Second)
		if err == nil {
			break
		}
		a.Manager.Stop(5 * time.Second)
		var exited *ExitedError
		if attempt < startAttempts && errors.As(err, &exited) && exited.PortConflict {
			continue
		}
		return nil, fmt.Errorf("capi-manager did not come up (see %s): %w", a.Manager.LogPath, err)
	}
	c.log.Logf("Cluster API core manager up with its CRDs and the test provider's (%.1fs)", time.Since(begin).Seconds())
	return a, nil
}

// Stop stops the manager (SIGTERM).
func (a *ClusterAPI) Stop() {
	a.Manager.Stop(10 * time.Second)
}

// waitServed waits until discovery lists every resource of groupVersion.
func (c *Cluster) waitServed(ctx context.Context, groupVersion string, resources ...string) error {
	return WaitFor(ctx, 30*time.Second, groupVersion+" "+strings.Join(resources, ", ")+" served", func(ctx context.Context) (bool, error) {
		list, err := c.Client.Discovery().ServerResourcesForGroupVersion(groupVersion)
		if err != nil {
			return false, nil
		}
		var served []string
		for _, r := range list.APIResources {
			served = append(served, r.Name)
		}
		for _, r := range resources {
			if !slices.Contains(served, r) {
				return false, nil
			}
		}
		return true, nil
	})
}
