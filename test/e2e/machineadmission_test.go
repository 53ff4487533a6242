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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// RBAC cannot select Machines by label: the machine-fencing component lets
// the controller sidecar's ServiceAccount delete and update every Machine.
// Its admission policy takes a control plane's Machines back: the sidecar
// may neither delete nor update one, nor label one of its own control
// plane's, while a worker's Machine stays its to delete and an admin's
// rights are untouched. On the real apiserver, with Cluster API's CRDs.
func TestSidecarCannotTouchControlPlaneMachines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	buildClusterAPI(t)
	capi, err := cluster.StartClusterAPI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(capi.Stop)
	for _, m := range []string{"deploy/kubernetes/machine-fencing/rbac-machine.yaml", "deploy/kubernetes/machine-fencing/admission-machine.yaml"} {
		if err := cluster.ApplyManifest(ctx, m, ""); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cluster.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, "csi-fence-attacher-no-control-plane-machines", metav1.DeleteOptions{})
		_ = cluster.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, "csi-fence-attacher-no-control-plane-machines", metav1.DeleteOptions{})
	})
	const ns = "mcp"
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	machines := schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
	admin := cluster.Dynamic.Resource(machines).Namespace(ns)
	create := func(name string, controlPlane bool) {
		t.Helper()
		labels := map[string]interface{}{}
		if controlPlane {
			labels["cluster.x-k8s.io/control-plane"] = ""
		}
		m := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
			"metadata": map[string]interface{}{"name": name, "namespace": ns, "labels": labels},
			"spec": map[string]interface{}{"clusterName": "mcp", "bootstrap": map[string]interface{}{"dataSecretName": "mcp-bootstrap"},
				"infrastructureRef": map[string]interface{}{"apiGroup": framework.InfraGroup, "kind": framework.InfraMachineKind, "name": name}}}}
		if _, err := admin.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			if m, err := admin.Get(ctx, name, metav1.GetOptions{}); err == nil {
				m.SetFinalizers(nil)
				_, _ = admin.Update(ctx, m, metav1.UpdateOptions{})
			}
			_ = admin.Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	create("cp", true)
	create("worker", false)
	create("worker2", false)

	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, "default", "csi-fence-attacher")
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamicOf(t, kubeconfig)
	sidecar := dyn.Resource(machines).Namespace(ns)
	var change func(name, key string, label bool) error
	// The policy is in force once the apiserver has loaded it: a dry run
	// goes through admission and deletes nothing.
	if err := framework.WaitFor(ctx, 60*time.Second, "the admission policy refusing the sidecar a control plane's Machine", func(ctx context.Context) (bool, error) {
		err := sidecar.Delete(ctx, "cp", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Fatal(err)
	}
	// Cluster API's manager writes the Machines too: a conflict is retried.
	annotate := func(name, key string, label bool) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error { return change(name, key, label) })
	}
	change = func(name, key string, label bool) error {
		m, err := sidecar.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if label {
			l := m.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			l[key] = ""
			m.SetLabels(l)
		} else {
			a := m.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			a[key] = ""
			m.SetAnnotations(a)
		}
		_, err = sidecar.Update(ctx, m, metav1.UpdateOptions{})
		return err
	}
	for _, tc := range []struct {
		name    string
		do      func() error
		refused bool
	}{
		{name: "delete a control plane's Machine", do: func() error { return sidecar.Delete(ctx, "cp", metav1.DeleteOptions{}) }, refused: true},
		{name: "ask MachineHealthCheck to remediate a control plane's Machine", do: func() error {
			return annotate("cp", "cluster.x-k8s.io/remediate-machine", false)
		}, refused: true},
		{name: "label a worker's Machine control plane", do: func() error { return annotate("worker2", "cluster.x-k8s.io/control-plane", true) }, refused: true},
		{name: "ask MachineHealthCheck to remediate a worker's Machine", do: func() error {
			return annotate("worker", "cluster.x-k8s.io/remediate-machine", false)
		}},
		{name: "delete a worker's Machine", do: func() error { return sidecar.Delete(ctx, "worker", metav1.DeleteOptions{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			switch {
			case tc.refused && err == nil:
				t.Errorf("allowed to the sidecar")
			case tc.refused && !strings.Contains(err.Error(), "it is a control plane's"):
				t.Errorf("refused for another reason: %v", err)
			case !tc.refused && err != nil:
				t.Errorf("refused to the sidecar: %v", err)
			}
		})
	}
	if m, err := admin.Get(ctx, "cp", metav1.GetOptions{}); err != nil || m.GetDeletionTimestamp() != nil {
		t.Errorf("the control plane's Machine is gone or being deleted: %v", err)
	}
	// An admin is not the sidecar: the policy does not apply.
	if err := admin.Delete(ctx, "cp", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("an admin may not delete a control plane's Machine: %v", err)
	}
}
