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
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// chartRenders are the Helm chart's renders (Helm's own library, CRDs
// included) that deploy/helm's TestRenderedChart keeps current: the e2e
// module does not build Helm (deploy/helm is a module of its own for
// that), so the render is made there and applied here.
var chartRenders = []string{"default.yaml", "all-features.yaml"}

// chartNamespace is the release namespace of the renders
// (deploy/helm's RenderedNamespace).
const chartNamespace = "chart-dryrun"

// The Helm chart, rendered with its default values and with every
// feature, is accepted by the real apiserver: every object applied with a
// server-side dry run (kubectl apply --server-side --dry-run=server: schema,
// strict field validation, CEL rules, admission) without an error. The
// CRDs it carries are the ones the product installed for real (the same
// files: deploy/helm's tests check they agree), so the dry run of the
// objects that need them sees them served.
func TestChartServerSideDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The release namespace exists for real: a dry run does not create it.
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	for _, file := range chartRenders {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "deploy", "helm", "testdata", "rendered", file))
			if err != nil {
				t.Fatal(err)
			}
			objs, err := framework.DecodeManifests(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) < 10 {
				t.Fatalf("only %d objects in %s", len(objs), file)
			}
			kinds, accepted := map[string]int{}, 0
			for _, o := range objs {
				if err := dryRunApply(ctx, mapper, o); err != nil {
					t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
					continue
				}
				kinds[o.GetKind()]++
				accepted++
			}
			t.Logf("%s: %d of %d objects accepted by the apiserver (dry run): %v", file, accepted, len(objs), kinds)
		})
	}
	// The dry run stored nothing: no object of the release exists.
	if sas, err := cluster.Client.CoreV1().ServiceAccounts(chartNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	} else {
		for _, sa := range sas.Items {
			if sa.Name != "default" {
				t.Errorf("the dry run created ServiceAccount %s", sa.Name)
			}
		}
	}
}

// dryRunApply applies obj by server-side apply with dryRun=All and strict
// field validation, as `kubectl apply --server-side --dry-run=server` does.
func dryRunApply(ctx context.Context, mapper meta.RESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "e2e-chart-dryrun", Force: ptr.To(true), DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict}
	res := cluster.Dynamic.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = chartNamespace
		}
		_, err = res.Namespace(ns).Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	} else {
		_, err = res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	}
	return err
}
