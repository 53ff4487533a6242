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
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/csi-fence/fence-attacher/pkg/manifestcheck"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// The complete example of deploy/ (the mock driver with the sidecar
// component, the base's CRD and RBAC, the CSIDriver) is accepted by the real
// apiserver with strict field validation, including the Deployment and
// DaemonSet the component patched (server-side dry run: here the workloads
// run as local processes); their ServiceAccounts hold the RBAC the product
// needs; and every flag the manifests pass to our binaries exists.
func TestDeployExample(t *testing.T) {
	ctx := context.Background()
	objs, err := cluster.ApplyKustomization(ctx, "deploy/kubernetes/mock-example", framework.ApplyOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = append(byKind[o.GetKind()], o)
	}
	for _, kind := range []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "CSIDriver", "Deployment", "DaemonSet"} {
		if len(byKind[kind]) == 0 {
			t.Errorf("the example has no %s", kind)
		}
	}
	for _, d := range byKind["CSIDriver"] {
		if d.GetAnnotations()["csi-fence.io/safe-detach"] != "true" {
			t.Errorf("CSIDriver %s lacks the SafeDetach annotation", d.GetName())
		}
		if ar, _, _ := unstructured.NestedBool(d.Object, "spec", "attachRequired"); !ar {
			t.Errorf("CSIDriver %s does not require attach", d.GetName())
		}
	}

	// What the sidecar does in each role, asked of the apiserver for the
	// ServiceAccount the example's workload runs as (the RBAC itself was
	// applied for real from the same base by StartProduct).
	needs := map[string][]authorizationv1.ResourceAttributes{
		"controller": {
			{Verb: "patch", Group: "storage.k8s.io", Resource: "volumeattachments", Subresource: "status"},
			{Verb: "patch", Resource: "persistentvolumes"},
			{Verb: "delete", Resource: "pods", Namespace: "some-app"},
			{Verb: "update", Group: "fencing.csi-fence.io", Resource: "fencingrequests", Subresource: "status"},
			{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "$NS"},
			{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "$NS"},
			// The Leases one per cluster, in the default --storm-guard-namespace.
			{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"},
			{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"},
			{Verb: "watch", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"},
			// The kubelets' heartbeats, watched and read live (pkg/nodehealth).
			{Verb: "watch", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"},
			{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"},
		},
		"node": {
			{Verb: "watch", Group: "fencing.csi-fence.io", Resource: "fencingrequests"},
			{Verb: "update", Group: "fencing.csi-fence.io", Resource: "fencingrequests", Subresource: "status"},
		},
	}
	workloads := append(byKind["Deployment"], byKind["DaemonSet"]...)
	sidecars := 0
	for _, w := range workloads {
		containers, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "containers")
		sa, _, _ := unstructured.NestedString(w.Object, "spec", "template", "spec", "serviceAccountName")
		ns := w.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		for _, ci := range containers {
			c := ci.(map[string]interface{})
			image, _ := c["image"].(string)
			name, _ := c["name"].(string)
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			// The sidecar component keeps the container's name
			// (csi-attacher) and replaces its image.
			if manifestcheck.IsExternalAttacher(image) {
				t.Errorf("%s/%s container %s still runs external-attacher (%s) beside csi-fence-attacher (same Lease, same finalizers)", w.GetKind(), w.GetName(), name, image)
			}
			var bin string
			switch {
			case strings.Contains(image, "/csi-fence-attacher:"):
				bin = "csi-fence-attacher"
			case strings.Contains(image, "/csi-fence-mock:"):
				bin = "csi-fence-mock"
			default:
				continue
			}
			checkFlags(t, filepath.Join(product.BinDir, bin), w.GetKind()+"/"+w.GetName()+" container "+name, args)
			if bin != "csi-fence-attacher" {
				continue
			}
			sidecars++
			role := "controller"
			if contains(args, "--role=node") {
				role = "node"
			}
			if sa == "" || sa == "default" {
				t.Errorf("%s/%s runs csi-fence-attacher as the namespace's default ServiceAccount", w.GetKind(), w.GetName())
				continue
			}
			for _, ra := range needs[role] {
				if ra.Namespace == "$NS" {
					ra.Namespace = ns
				}
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User:               "system:serviceaccount:" + ns + ":" + sa,
					Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
					ResourceAttributes: &ra,
				}}
				got, err := cluster.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !got.Status.Allowed {
					t.Errorf("%s/%s (%s role) runs as %s/%s, which may not %s %s/%s in %q: %s", w.GetKind(), w.GetName(), role,
						ns, sa, ra.Verb, ra.Resource, ra.Subresource, ra.Namespace, got.Status.Reason)
				}
			}
		}
	}
	if sidecars != 2 {
		t.Errorf("want csi-fence-attacher in the controller Deployment and the node DaemonSet, found it %d times", sidecars)
	}
}

var goFlag = regexp.MustCompile(`^\s+-{1,2}([A-Za-z0-9][A-Za-z0-9_.-]*)`)

// checkFlags fails when args pass a flag that bin does not define.
func checkFlags(t *testing.T, bin, what string, args []string) {
	t.Helper()
	unknown, err := unknownFlags(bin, args)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range unknown {
		t.Errorf("%s passes %s, which %s does not know", what, a, filepath.Base(bin))
	}
}

// unknownFlags returns the args that set a flag bin's --help does not list.
func unknownFlags(bin string, args []string) ([]string, error) {
	out, _ := exec.Command(bin, "--help").CombinedOutput() // --help exits non-zero with the flag package
	known := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if m := goFlag.FindStringSubmatch(sc.Text()); m != nil {
			known[m[1]] = true
		}
	}
	if len(known) < 3 {
		return nil, fmt.Errorf("cannot read the flags of %s from --help:\n%s", bin, out)
	}
	var unknown []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		if !known[name] {
			unknown = append(unknown, a)
		}
	}
	return unknown, nil
}

// The checks above can fail: a manifest with a misspelled field is refused,
// a flag the binary does not have is found, and a request the RBAC denies
// shows up in the audit log the suite checks at the end.
func TestDeployChecksCatchMistakes(t *testing.T) {
	ctx := context.Background()
	err := cluster.ApplyManifest(ctx, "test/e2e/testdata/misspelled-csidriver.yaml", "")
	if err == nil || !strings.Contains(err.Error(), "attachRequird") {
		t.Errorf("a CSIDriver with a misspelled field was accepted (err=%v)", err)
	}

	unknown, err := unknownFlags(filepath.Join(product.BinDir, "csi-fence-attacher"),
		[]string{"--csi-address=/csi/csi.sock", "--leader-election", "--leader-elect-namespace=x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(unknown) != 1 || unknown[0] != "--leader-elect-namespace=x" {
		t.Errorf("unknown flags = %v, want only the misspelled one", unknown)
	}

	// A ServiceAccount without any role, in a namespace of its own so that
	// its denial does not count against the product's.
	const ns = "rbac-probe"
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cluster.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, ns, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nobody.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("want Forbidden for a ServiceAccount without RBAC, got %v", err)
	}
	r, err := cluster.RBAC("system:serviceaccount:" + ns + ":")
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Denied["system:serviceaccount:"+ns+":nobody"]; len(d) != 1 || !strings.HasPrefix(d[0], "list storage.k8s.io/volumeattachments") {
		t.Errorf("the audit log does not show the denied list: %s", r)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
