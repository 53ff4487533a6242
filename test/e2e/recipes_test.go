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
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// Issue 36 item 5 on the real apiserver. Each driver's recipe
// (deploy/kubernetes/testdata/drivers/<driver>, docs/drivers.md) is built
// and applied server-side (the workloads with a server-side dry run: here
// no kubelet runs the drivers), its cluster-wide names prefixed so that it
// does not rebind the roles the other tests use. Then, with tokens the
// apiserver issues to the *driver's* ServiceAccounts (TokenRequest): the
// sidecar's own preflight (one SelfSubjectRulesReview, as at start) reports
// every feature the recipe enables granted, the leader election may take its
// Lease, and the node agent, with a token bound to a pod on a node, may
// write its own node's FencingRequest and is refused another node's by the
// admission policy, which names the driver's node ServiceAccount.
func TestDriverRecipesOnTheAPIServer(t *testing.T) {
	ctx := context.Background()
	nodes, err := cluster.CreateNodes(ctx, "recipe", 2, framework.DriverName)
	if err != nil {
		t.Fatal(err)
	}
	admin := fencingv1alpha1.NewClient(cluster.Dynamic)
	for _, n := range nodes {
		if _, err := admin.Create(ctx, &fencingv1alpha1.FencingRequest{
			ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: n, Origin: fencingv1alpha1.OriginAutomatic, Reason: "recipe test"},
		}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), n) })
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	tests := []struct {
		driver, namespace, controllerSA, nodeSA string
		failover                                bool
	}{
		{"ceph-rbd", "ceph-csi", "rbd-csi-provisioner", "rbd-csi-nodeplugin", true},
		{"aws-ebs", "kube-system", "ebs-csi-controller-sa", "ebs-csi-node-sa", true},
		{"azuredisk", "kube-system", "csi-azuredisk-controller-sa", "csi-azuredisk-node-sa", true},
		{"gce-pd", "gce-pd-csi-driver", "csi-gce-pd-controller-sa", "csi-gce-pd-node-sa", true},
		{"csi-driver-host-path", "default", "csi-hostpathplugin-sa", "csi-hostpath-fence-node", false},
	}
	for _, tc := range tests {
		t.Run(tc.driver, func(t *testing.T) {
			objs, err := framework.RenderKustomization("deploy/kubernetes/testdata/drivers/" + tc.driver)
			if err != nil {
				t.Fatal(err)
			}
			ensureNamespace(ctx, t, tc.namespace)
			prefix := "e2e-" + tc.driver + "-"
			policy := ""
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" {
					continue // the harness installed the same files' CRDs
				}
				if o.GetKind() == "ValidatingAdmissionPolicy" {
					policy = prefix + o.GetName()
				}
				prefixShared(o, prefix)
				applyServerSide(ctx, t, mapper, o)
			}
			for _, sa := range []string{tc.controllerSA, tc.nodeSA} {
				ensureServiceAccount(ctx, t, tc.namespace, sa)
			}

			// The controller: the sidecar's preflight with the driver's token.
			kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, tc.namespace, tc.controllerSA)
			if err != nil {
				t.Fatal(err)
			}
			client := clientOf(t, kubeconfig)
			access, checks := sidecar.Preflight(ctx, client, sidecar.DefaultStormGuardNamespace, true, sidecar.Wanted{Failover: tc.failover})
			if !access.Nodes || !access.Record || !access.Events || access.Failover != tc.failover {
				t.Errorf("preflight as %s/%s: %+v, want the fenced detach granted and the failover %v", tc.namespace, tc.controllerSA, access, tc.failover)
			}
			for _, c := range checks {
				if c.Wanted && !c.Runs {
					t.Errorf("preflight as %s/%s: feature %s wanted but not granted: %+v", tc.namespace, tc.controllerSA, c.Feature, c)
				}
			}
			// The leader election's Lease, in the driver's namespace.
			for _, verb := range []string{"get", "create", "update"} {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   "system:serviceaccount:" + tc.namespace + ":" + tc.controllerSA,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + tc.namespace, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: tc.namespace, Verb: verb, Group: "coordination.k8s.io", Resource: "leases"},
				}}
				got, err := cluster.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !got.Status.Allowed {
					t.Errorf("%s/%s may not %s its Lease in %s", tc.namespace, tc.controllerSA, verb, tc.namespace)
				}
			}

			// The real sidecar on the mock's socket, as the driver's
			// controller ServiceAccount, with the recipe's gate and its Lease
			// in the driver's namespace: its start-up preflight says every
			// enabled feature runs, it warns of nothing, and the apiserver
			// denies it nothing.
			gate := "--feature-gates=NonGracefulFailover=false"
			states := map[string]string{sidecar.FeatureFencedDetach: "on", sidecar.FeatureFailover: "off"}
			if tc.failover {
				gate = "--feature-gates=NonGracefulFailover=true"
				states[sidecar.FeatureFailover] = "on"
			}
			t.Cleanup(func() {
				if err := product.RestartAttacher(context.Background()); err != nil {
					t.Errorf("restarting csi-fence-attacher with deploy/'s RBAC for the next tests: %v", err)
				}
			})
			controllerUser := "system:serviceaccount:" + tc.namespace + ":" + tc.controllerSA
			r := runAsUser(ctx, t, controllerUser, kubeconfig, gate, "--leader-election-namespace="+tc.namespace)
			r.expectStates(states)
			r.expectNoWarning()
			r.waitUsed(ctx, "watch storage.k8s.io/volumeattachments", "watch core/nodes", "update coordination.k8s.io/leases")
			r.expectNoDenial()

			// The node agent: a token bound to a pod on nodes[0].
			bound, err := cluster.NodeBoundKubeconfig(ctx, tc.namespace, tc.nodeSA, nodes[0])
			if err != nil {
				t.Fatal(err)
			}
			dyn := dynamicOf(t, bound)
			agent := fencingv1alpha1.NewClient(dyn)
			write := func(record string) error {
				return retry.RetryOnConflict(retry.DefaultRetry, func() error {
					fr, err := agent.Get(ctx, record)
					if err != nil {
						return err
					}
					_, err = agent.UpdateStatus(ctx, fr)
					return err
				})
			}
			if err := write(nodes[0]); err != nil {
				t.Errorf("node agent %s/%s refused its own node's record: %v", tc.namespace, tc.nodeSA, err)
			}
			// A new policy and its binding take effect once the apiserver's
			// admission plugin has seen both: until then another node's
			// record is written.
			err = framework.WaitFor(ctx, 30*time.Second, "policy "+policy+" refusing another node's record", func(context.Context) (bool, error) {
				err := write(nodes[1])
				if err == nil {
					return false, nil
				}
				if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only the FencingRequest of its own node") {
					return false, fmt.Errorf("refused with %v, want the admission policy's denial", err)
				}
				return true, nil
			})
			if err != nil {
				t.Errorf("node agent %s/%s of %s: %v", tc.namespace, tc.nodeSA, nodes[0], err)
			}

			// The real node agent on a node's mock plugin, as the driver's
			// node ServiceAccount with a token bound to a pod there: it
			// watches its records, and is denied nothing.
			node := "recipe-agent-" + tc.driver
			if err := cluster.CreateNode(ctx, node, framework.DriverName); err != nil {
				t.Fatal(err)
			}
			n, err := product.StartNode(ctx, node)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { product.RemoveNode(node) })
			agentKubeconfig, err := cluster.NodeBoundKubeconfig(ctx, tc.namespace, tc.nodeSA, node)
			if err != nil {
				t.Fatal(err)
			}
			proc, err := cluster.StartProcess("recipe-node-agent-"+tc.driver, filepath.Join(product.BinDir, "csi-fence-attacher"),
				"--role=node", "--node-name="+node, "--kubelet-dir="+n.KubeletDir, "--csi-address="+n.NodePlugin.Socket(),
				"--kubeconfig="+agentKubeconfig, "--http-endpoint=127.0.0.1:0", "--v=4")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proc.Kill)
			agentRun := &sidecarRun{t: t, user: "system:serviceaccount:" + tc.namespace + ":" + tc.nodeSA}
			agentRun.waitUsed(ctx, "watch fencing.csi-fence.io/fencingrequests")
			agentRun.expectNoDenial()
		})
	}
}

// runAsUser restarts the product's csi-fence-attacher with kubeconfig (the
// token of user, a ServiceAccount of any namespace) and extra flags, and
// waits for its start-up summary of the features.
func runAsUser(ctx context.Context, t *testing.T, user, kubeconfig string, flags ...string) *sidecarRun {
	t.Helper()
	r := &sidecarRun{t: t, user: user, started: time.Now().Truncate(time.Second)}
	if err := product.RestartAttacher(ctx, append([]string{"--kubeconfig=" + kubeconfig}, flags...)...); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "the sidecar's start-up summary of its features", func(context.Context) (bool, error) {
		return r.line("Features of the controller role") != "", nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, r.logs())
	}
	t.Logf("%s: %s", user, r.line("Features of the controller role"))
	return r
}

// prefixShared renames what one driver's install shares with the others in
// a cluster (cluster-wide objects, the Roles and Service the harness's own
// install has too), and the references to them.
func prefixShared(o *unstructured.Unstructured, prefix string) {
	switch o.GetKind() {
	case "ClusterRole", "Role", "ValidatingAdmissionPolicy":
		o.SetName(prefix + o.GetName())
	case "ClusterRoleBinding", "RoleBinding":
		o.SetName(prefix + o.GetName())
		if name, _, _ := unstructured.NestedString(o.Object, "roleRef", "name"); strings.HasPrefix(name, "csi-fence-") {
			_ = unstructured.SetNestedField(o.Object, prefix+name, "roleRef", "name")
		}
	case "ValidatingAdmissionPolicyBinding":
		o.SetName(prefix + o.GetName())
		if name, _, _ := unstructured.NestedString(o.Object, "spec", "policyName"); name != "" {
			_ = unstructured.SetNestedField(o.Object, prefix+name, "spec", "policyName")
		}
	case "Service":
		if strings.HasPrefix(o.GetName(), "csi-fence-") {
			o.SetName(prefix + o.GetName())
		}
	}
}

// applyServerSide applies obj as kubectl apply --server-side does, the
// workloads as a dry run, and deletes it when the test ends.
func applyServerSide(ctx context.Context, t *testing.T, mapper meta.RESTMapper, obj *unstructured.Unstructured) {
	t.Helper()
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	var res dynamic.ResourceInterface = cluster.Dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		// kustomize's namespace: sets one on kinds it does not know to be
		// cluster-scoped (ValidatingAdmissionPolicy); kubectl drops it.
		obj.SetNamespace("")
	} else {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		res = cluster.Dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}
	opts := metav1.ApplyOptions{FieldManager: "recipe-e2e", Force: true}
	dryRun := false
	switch gvk.Kind {
	case "Deployment", "DaemonSet", "StatefulSet":
		opts.DryRun = []string{metav1.DryRunAll}
		dryRun = true
	}
	if _, err := res.Apply(ctx, obj.GetName(), obj, opts); err != nil {
		t.Fatalf("server-side apply of %s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	if !dryRun && gvk.Kind != "ServiceAccount" && gvk.Kind != "CSIDriver" {
		name := obj.GetName()
		t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
}

func ensureNamespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	_, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// ensureServiceAccount creates the driver's ServiceAccount where the
// driver's shape does not carry it (its RBAC file, not part of the shape).
func ensureServiceAccount(ctx context.Context, t *testing.T, namespace, name string) {
	t.Helper()
	_, err := cluster.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
