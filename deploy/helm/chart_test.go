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

package helm

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/action"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	kubefake "helm.sh/helm/v4/pkg/kube/fake"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/csi-fence/fence-attacher/pkg/manifestcheck"
)

const chartDir = "csi-fence"

// kubeVersion is the control plane the project is tested on (README's
// compatibility table); Helm's client-only default (1.20) is below the
// chart's kubeVersion.
var kubeVersion = &chartcommon.KubeVersion{Version: "v1.36.4", Major: "1", Minor: "36"}

func loadChart(t *testing.T, dir string) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatalf("loading chart %s: %v", dir, err)
	}
	return ch
}

// render is `helm template --include-crds --namespace ns` through Helm's
// library: the objects of a client-only dry-run install.
func render(ch *chart.Chart, namespace string, vals map[string]any) ([]*unstructured.Unstructured, string, error) {
	cfg := &action.Configuration{
		Releases:   storage.Init(driver.NewMemory()),
		KubeClient: &kubefake.PrintingKubeClient{Out: io.Discard},
	}
	inst := action.NewInstall(cfg)
	inst.DryRunStrategy = action.DryRunClient
	inst.ReleaseName = "csi-fence"
	inst.Namespace = namespace
	inst.Replace = true
	inst.IncludeCRDs = true
	inst.KubeVersion = kubeVersion
	r, err := inst.Run(ch, vals)
	if err != nil {
		return nil, "", err
	}
	rel, ok := r.(*releasev1.Release)
	if !ok {
		return nil, "", fmt.Errorf("release of type %T", r)
	}
	objs, err := manifestcheck.Read(strings.NewReader(rel.Manifest))
	if err != nil {
		return nil, rel.Manifest, fmt.Errorf("reading the rendered manifest: %w\n%s", err, rel.Manifest)
	}
	return objs, rel.Manifest, nil
}

func mustRender(t *testing.T, ch *chart.Chart, namespace string, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, _, err := render(ch, namespace, vals)
	if err != nil {
		t.Fatalf("rendering %s: %v", ch.Name(), err)
	}
	return objs
}

// kustomizeBuild builds, as `kubectl kustomize` would, a kustomization of
// deploy/kubernetes with the sidecar component (the CRDs, the fenced
// detach's RBAC, the node agents' RBAC, policy and Service) and the given
// components and resources. It is written under testdata: kustomize
// refuses absolute paths.
func kustomizeBuild(t *testing.T, components, resources []string) []*unstructured.Unstructured {
	t.Helper()
	dir, err := os.MkdirTemp("testdata", "overlay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var k strings.Builder
	k.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncomponents:\n- ../../../kubernetes/sidecar\n")
	for _, c := range components {
		fmt.Fprintf(&k, "- ../../../kubernetes/%s\n", c)
	}
	// The chart's defaults: the driver's identities are the ServiceAccounts
	// it creates, in the release's namespace (mock-example's).
	k.WriteString("- ../../../kubernetes/mock-example/serviceaccounts\nresources:\n- fence-driver.yaml\n")
	for _, r := range resources {
		fmt.Fprintf(&k, "- ../../../kubernetes/%s\n", r)
	}
	identity, err := os.ReadFile("../kubernetes/mock-example/fence-driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fence-driver.yaml"), identity, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return kustomizeDir(t, dir)
}

// chartLabels are the labels the chart adds to every object, as Helm charts
// do, which the kustomize manifests do not carry.
var chartLabels = []string{"app.kubernetes.io/part-of", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart"}

// byKey indexes objects by kind, namespace and name, with the chart's
// labels removed.
func byKey(objs []*unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		o = o.DeepCopy()
		if l := o.GetLabels(); l != nil {
			for _, k := range chartLabels {
				delete(l, k)
			}
			if len(l) == 0 {
				unstructured.RemoveNestedField(o.Object, "metadata", "labels")
			} else {
				o.SetLabels(l)
			}
		}
		out[key(o)] = o.Object
	}
	return out
}

func key(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// diffObjects says how two sets of objects differ: objects only in one,
// and the field differences of those in both.
func diffObjects(chartObjs, kustomizeObjs []*unstructured.Unstructured) []string {
	c, k := byKey(chartObjs), byKey(kustomizeObjs)
	var out []string
	for _, n := range keys(c) {
		if _, ok := k[n]; !ok {
			out = append(out, "only in the chart: "+n)
		}
	}
	for _, n := range keys(k) {
		co, ok := c[n]
		if !ok {
			out = append(out, "only in the kustomize build: "+n)
			continue
		}
		if d := cmp.Diff(k[n], co); d != "" {
			out = append(out, fmt.Sprintf("%s differs (-kustomize +chart):\n%s", n, d))
		}
	}
	return out
}

// values builds a values map from dotted paths, as helm's --set does.
func values(kv ...any) map[string]any {
	out := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		path := strings.Split(kv[i].(string), ".")
		m := out
		for _, p := range path[:len(path)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[path[len(path)-1]] = kv[i+1]
	}
	return out
}

// canary are the image tags of the kustomize manifests.
func canary(kv ...any) map[string]any {
	return values(append([]any{
		"image.attacher.tag", "canary",
		"image.prestopWebhook.tag", "canary",
		"image.prestopHelper.tag", "canary",
	}, kv...)...)
}
