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
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/cli"
	"helm.sh/helm/v4/pkg/postrenderer"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/csi-fence/fence-attacher/pkg/manifestcheck"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
)

// The route for a driver chart that cannot be changed, as Helm 4 runs it:
// the driver's release post-rendered by the plugin csi-fence-postrender
// (loaded and invoked by Helm's own plugin code, its script run by kubectl
// kustomize) with a component that adds only the containers, beside the
// csi-fence chart's release bound to the driver's ServiceAccounts. The two
// renders together pass check-manifests, and share no object.
func TestPostRendererPlugin(t *testing.T) {
	if _, err := exec.LookPath("kustomize"); err != nil {
		if _, err := exec.LookPath("kubectl"); err != nil {
			t.Skip("neither kustomize nor kubectl on PATH: the post-renderer runs one of them")
		}
	}
	plugins, err := filepath.Abs(".") // holds csi-fence-postrender/plugin.yaml
	if err != nil {
		t.Fatal(err)
	}
	component, err := filepath.Abs("testdata/postrender/aws-ebs")
	if err != nil {
		t.Fatal(err)
	}
	settings := cli.New()
	settings.PluginsDirectory = plugins
	pr, err := postrenderer.NewPostRendererPlugin(settings, "csi-fence-postrender", component)
	if err != nil {
		t.Fatal(err)
	}
	// The EBS release as its chart renders it (the shape deploy/kubernetes
	// tests its kustomize overlay on).
	var release bytes.Buffer
	for _, o := range kustomizeDir(t, "../kubernetes/testdata/drivers/aws-ebs/upstream") {
		y, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		release.WriteString("---\n")
		release.Write(y)
		release.WriteString("\n")
	}
	out, err := pr.Run(&release)
	if err != nil {
		t.Fatalf("post-renderer: %v", err)
	}
	driver, err := manifestcheck.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	fence := mustRender(t, loadChart(t, chartDir), "kube-system", values(
		"features.failover", true,
		"controller.serviceAccount", map[string]any{"create": false, "name": "ebs-csi-controller-sa"},
		"nodeAgent.serviceAccount", map[string]any{"create": false, "name": "ebs-csi-node-sa"}))

	r, err := manifestcheck.Check(append(driver[:len(driver):len(driver)], fence...), manifestcheck.Options{Flags: sidecar.NewFlagSet})
	if err != nil {
		t.Fatal(err)
	}
	errs := append(r.Errors, manifestcheck.CheckReleases([]manifestcheck.Release{{Name: "ebs", Objects: driver}, {Name: "ebs-fence", Objects: fence}}, "kube-system")...)
	if len(errs) > 0 {
		t.Fatalf("check-manifests on both releases:\n%s", strings.Join(errs, "\n"))
	}
	if len(r.Sidecars) != 2 {
		t.Errorf("found %v, want the controller and the node agent", r.Notes)
	}
}

// kustomizeDir builds a kustomization directory as kubectl kustomize would.
func kustomizeDir(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	y, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifestcheck.Read(bytes.NewReader(y))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
