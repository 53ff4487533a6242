//go:build e2e

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

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// productServiceAccounts prefixes the users of the product's processes: the
// ServiceAccounts of deploy/kubernetes/base, in the namespace the harness
// applies them to.
const productServiceAccounts = "system:serviceaccount:default:"

// checkRBAC runs after every test: the product ran with the RBAC of deploy/,
// so any request the apiserver denied it is a missing rule (the product may
// have only logged it and retried). It prints what each ServiceAccount used,
// which is what the rules should grant, and returns 1 on any denial.
func checkRBAC() int {
	r, err := cluster.RBAC(productServiceAccounts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the audit log:", err)
		return 1
	}
	fmt.Printf("e2e: RBAC used by the product (apiserver audit log):\n%s", r)
	for u, denied := range r.Denied {
		for _, d := range denied {
			if slices.Contains(expectedDenials[u], d) {
				continue
			}
			fmt.Fprintf(os.Stderr, "FAIL: RBAC of deploy/ denied %s: %v\n", u, d)
			return 1
		}
	}
	return 0
}

// expectedDenials are the requests denied to a product process that runs
// with an RBAC other than deploy/'s on purpose: with external-attacher's
// stock RBAC (TestStockExternalAttacherRBAC), csi-lib-utils' leader election
// posts its "became leader" Event, which that RBAC does not grant, exactly
// as it does for external-attacher itself.
var expectedDenials = map[string][]string{
	productServiceAccounts + "csi-attacher": {"create core/events default/"},
}

// csi-fence-attacher swapped into a cluster that granted it nothing but
// external-attacher's own RBAC: it attaches and detaches as external-attacher
// does (no informer it may not list holds it up), says once which verbs
// fencing lacks, and makes no request the apiserver denies (checkRBAC).
func TestStockExternalAttacherRBAC(t *testing.T) {
	ctx := context.Background()
	if err := cluster.ApplyManifest(ctx, "pkg/sidecar/testdata/external-attacher-rbac.yaml", ""); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, "default", "csi-attacher")
	if err != nil {
		t.Fatal(err)
	}
	if err := product.RestartAttacher(ctx, "--kubeconfig="+kubeconfig); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := product.RestartAttacher(ctx); err != nil {
			t.Errorf("restarting csi-fence-attacher with deploy/'s RBAC for the next tests: %v", err)
		}
	}()
	env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "stock", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	node, err := env.WaitAttached(ctx, 0, "", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.AppsV1().StatefulSets(env.NS).Delete(ctx, env.App, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "VolumeAttachment deleted", func(ctx context.Context) (bool, error) {
		va, err := env.VA(ctx, env.Volumes[0], node)
		return va == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	// Only what this run says counts: the log file is every product
	// attacher's, restarted by other tests with other RBAC too.
	logs, err := product.Attacher.Output()
	if err != nil {
		t.Fatal(err)
	}
	said := 0
	for _, line := range strings.Split(string(logs), "\n") {
		if strings.Contains(line, "Fencing is limited by what this ServiceAccount may do") {
			said++
			for _, verb := range []string{"list nodes", "create fencingrequests.fencing.csi-fence.io", "create events", "automatic failover is off"} {
				if !strings.Contains(line, verb) {
					t.Errorf("the message does not name %q: %s", verb, line)
				}
			}
		}
	}
	if said != 1 {
		t.Errorf("the sidecar said %d times what fencing lacks, want once", said)
	}
	expectNoViolations(t)
}
