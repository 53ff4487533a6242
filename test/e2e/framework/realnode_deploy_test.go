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
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// The real-node overlay renders from the shipped example; every image is
// one BuildImages builds; the node plugin sees the nodes' directory at the
// host's path with Bidirectional propagation and serves the real data path
// (FUSE, /dev/fuse mounted) as the example ships it; the
// registrar stands in node-driver-registrar's place, pointing the kubelet at
// the node's own plugin socket; the node agent sees its node's kubelet root
// at the host's path, the one the kubelet hands the node plugin; the
// registrar sees its node's own directories at the shipped paths.
func TestRealNodeOverlay(t *testing.T) {
	overlay := filepath.Join(t.TempDir(), "deploy-real")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	const nodes, state = "/tmp/fence-e2e-x/nodes", "/tmp/fence-e2e-x/mock-state"
	kust, err := realNodeOverlay(overlay, nodes, state, RealDeployOptions{ControllerNode: "real-1", AttacherArgs: []string{"--disable-fencing"}, MockControllerArgs: []string{"--broken-fence"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(RepoRoot(), overlay)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := RenderKustomization(rel)
	if err != nil {
		t.Fatalf("%v\n%s", err, kust)
	}
	built := []string{PauseImage, WriterImage, AttacherImage, MockImage, WebhookImage}
	var ds *appsv1.DaemonSet
	var dep *appsv1.Deployment
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet":
			ds = &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds); err != nil {
				t.Fatal(err)
			}
		case "Deployment":
			dep = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ds == nil || dep == nil {
		t.Fatal("the overlay lost the example's DaemonSet or Deployment")
	}
	for _, c := range append(ds.Spec.Template.Spec.Containers, dep.Spec.Template.Spec.Containers...) {
		if !slices.Contains(built, c.Image) {
			t.Errorf("container %s runs %s, not an image built here", c.Name, c.Image)
		}
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for name, want := range map[string]string{"kubelet-dir": nodes, "socket-dir": nodes, "registration-dir": nodes, "state": state} {
		if hostPaths[name] != want {
			t.Errorf("DaemonSet volume %s: hostPath %q, want %q", name, hostPaths[name], want)
		}
	}
	byName := map[string]string{}
	for _, c := range ds.Spec.Template.Spec.Containers {
		var mounts []string
		for _, m := range c.VolumeMounts {
			p := ""
			if m.MountPropagation != nil {
				p = string(*m.MountPropagation)
			}
			mounts = append(mounts, m.Name+"@"+m.MountPath+":"+m.SubPathExpr+":"+p)
		}
		byName[c.Name] = strings.Join(c.Args, " ") + " | " + c.Image + " | " + strings.Join(mounts, " ")
	}
	for name, wants := range map[string][]string{
		"csi-fence-mock": {"--data-path=fuse", "--block-devices", "--v=2", "dev@/dev::", "dev-fuse@/dev/fuse::", "kubelet-dir@" + nodes + "::Bidirectional", "socket-dir@/csi:$(NODE_NAME)/kubelet/plugins/fence.csi-fence.io:"},
		"node-driver-registrar": {"--role=registrar", AttacherImage,
			"--kubelet-registration-path=" + nodes + "/$(NODE_NAME)/kubelet/plugins/fence.csi-fence.io/csi.sock",
			"registration-dir@/registration:$(NODE_NAME)/kubelet/plugins_registry:"},
		"csi-fence-attacher": {"--role=node", "--kubelet-dir=" + nodes + "/$(NODE_NAME)/kubelet", "kubelet-dir@" + nodes + "::HostToContainer"},
	} {
		for _, w := range wants {
			if !strings.Contains(byName[name], w) {
				t.Errorf("DaemonSet container %s lacks %q: %s", name, w, byName[name])
			}
		}
	}
	for _, c := range []string{"csi-fence-mock", "csi-fence-attacher"} {
		if strings.Contains(byName[c], "@/var/lib/kubelet:") || strings.Contains(byName[c], "--kubelet-dir=/var/lib/kubelet") {
			t.Errorf("%s still sees /var/lib/kubelet, which is not the nodes' kubelet root: %s", c, byName[c])
		}
	}
	if dep.Spec.Template.Spec.NodeName != "real-1" {
		t.Errorf("controller pod on %q, want real-1", dep.Spec.Template.Spec.NodeName)
	}
	// The sidecar keeps external-attacher's container name (csi-attacher).
	var sawAttacher, sawMock bool
	for _, c := range dep.Spec.Template.Spec.Containers {
		switch c.Image {
		case AttacherImage:
			sawAttacher = true
			if !slices.Contains(c.Args, "--disable-fencing") {
				t.Errorf("the controller's attacher lacks the extra argument: %v", c.Args)
			}
		case MockImage:
			sawMock = true
			if !slices.Contains(c.Args, "--broken-fence") {
				t.Errorf("the controller's mock driver lacks the extra argument: %v", c.Args)
			}
		}
	}
	if !sawAttacher || !sawMock {
		t.Errorf("the controller pod runs no attacher (%v) or no mock (%v): %+v", sawAttacher, sawMock, dep.Spec.Template.Spec.Containers)
	}
	if hostPaths["dev-fuse"] != "/dev/fuse" {
		t.Errorf("the node plugin has no /dev/fuse: %v", hostPaths)
	}
}

// renderNodeDaemonSet renders the real-node overlay with opts and returns
// its node DaemonSet.
func renderNodeDaemonSet(t *testing.T, opts RealDeployOptions) *appsv1.DaemonSet {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	renderOverlayObject(t, opts, "DaemonSet", ds)
	return ds
}

// ControllerAttacherImage changes the image of the controller's attacher
// only: the node DaemonSet's agent and registrar keep AttacherImage.
func TestRealNodeOverlayControllerAttacherImage(t *testing.T) {
	opts := RealDeployOptions{ControllerAttacherImage: PowerFencingAttacherImage, AttacherArgs: []string{"--v=5"}}
	dep := &appsv1.Deployment{}
	renderOverlayObject(t, opts, "Deployment", dep)
	var images []string
	for _, c := range dep.Spec.Template.Spec.Containers {
		images = append(images, c.Name+"="+c.Image)
		if c.Image == PowerFencingAttacherImage && !slices.Contains(c.Args, "--v=5") {
			t.Errorf("the attacher with the agents is not the one that got the attacher's arguments: %v", c.Args)
		}
	}
	if want := []string{"csi-fence-mock=" + MockImage, "csi-attacher=" + PowerFencingAttacherImage}; !slices.Equal(images, want) {
		t.Errorf("controller containers %v, want %v", images, want)
	}
	ds := renderNodeDaemonSet(t, opts)
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Image == PowerFencingAttacherImage {
			t.Errorf("node container %s runs the controller's image %s", c.Name, c.Image)
		}
	}
}

// renderOverlayObject renders the real-node overlay with opts and decodes
// its object of kind into out.
func renderOverlayObject(t *testing.T, opts RealDeployOptions, kind string, out any) {
	t.Helper()
	for _, o := range renderOverlay(t, opts) {
		if o.GetKind() != kind {
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no %s in the overlay", kind)
}

// renderOverlay renders the real-node overlay with opts.
func renderOverlay(t *testing.T, opts RealDeployOptions) []*unstructured.Unstructured {
	t.Helper()
	overlay := filepath.Join(t.TempDir(), "deploy-real")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	kust, err := realNodeOverlay(overlay, "/tmp/fence-e2e-x/nodes", "/tmp/fence-e2e-x/mock-state", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(RepoRoot(), overlay)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := RenderKustomization(rel)
	if err != nil {
		t.Fatalf("%v\n%s", err, kust)
	}
	return objs
}

// DataPath replaces the example's --data-path of the node plugin: the last
// one given is the one the mock parses.
func TestRealNodeOverlayDataPath(t *testing.T) {
	ds := renderNodeDaemonSet(t, RealDeployOptions{DataPath: "bind"})
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "csi-fence-mock" {
			continue
		}
		var last string
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--data-path=") {
				last = a
			}
		}
		if last != "--data-path=bind" {
			t.Errorf("the node plugin's last --data-path is %q, want --data-path=bind: %v", last, c.Args)
		}
		return
	}
	t.Fatal("no csi-fence-mock container in the node DaemonSet")
}

// The negative control without the node agent keeps the node plugin and the
// registrar and drops only the agent.
func TestRealNodeOverlayNoNodeAgent(t *testing.T) {
	ds := renderNodeDaemonSet(t, RealDeployOptions{NoNodeAgent: true})
	var names []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	if want := []string{"csi-fence-mock", "node-driver-registrar"}; !slices.Equal(names, want) {
		t.Fatalf("node DaemonSet containers %v, want %v", names, want)
	}
}

// The mock's arguments for the node plugins reach the node DaemonSet's mock
// only, after the example's own; the CSIDriver gets the annotations given
// and keeps its shipped ones.
func TestRealNodeOverlayMockNodeArgsAndCSIDriver(t *testing.T) {
	opts := RealDeployOptions{
		MockNodeArgs:         []string{"--detach=revokes"},
		CSIDriverAnnotations: map[string]string{"csi-fence.io/unpublish-revokes-access": "true"},
	}
	ds := renderNodeDaemonSet(t, opts)
	for _, c := range ds.Spec.Template.Spec.Containers {
		has := slices.Contains(c.Args, "--detach=revokes")
		if want := c.Name == "csi-fence-mock"; has != want {
			t.Errorf("node container %s has --detach=revokes: %v, want %v: %v", c.Name, has, want, c.Args)
		}
		if has && c.Args[len(c.Args)-1] != "--detach=revokes" {
			t.Errorf("--detach=revokes is not the node plugin's last argument: %v", c.Args)
		}
	}
	dep := &appsv1.Deployment{}
	renderOverlayObject(t, opts, "Deployment", dep)
	for _, c := range dep.Spec.Template.Spec.Containers {
		if slices.Contains(c.Args, "--detach=revokes") {
			t.Errorf("controller container %s got the node plugins' arguments: %v", c.Name, c.Args)
		}
	}
	d := &storagev1.CSIDriver{}
	renderOverlayObject(t, opts, "CSIDriver", d)
	want := map[string]string{"csi-fence.io/safe-detach": "true", "csi-fence.io/unpublish-revokes-access": "true"}
	if !maps.Equal(d.Annotations, want) {
		t.Errorf("CSIDriver %s annotations %v, want %v", d.Name, d.Annotations, want)
	}
}

// A second driver's install (NamePrefix) shares nothing with the first
// but the CRDs, which are the same: every other object's name is
// prefixed, so that applying it rebinds none of the first's roles. Its
// driver is named after its CSIDriver in the mock's arguments and the
// kubelet's plugin paths, its pods run as its own ServiceAccounts, bound to
// its roles, and the admission policy keeps its own node agents (and only
// them) to their node's record.
func TestRealNodeOverlayNamePrefix(t *testing.T) {
	const prefix = "trial2-"
	driver := prefix + DriverName
	first, second := renderOverlay(t, RealDeployOptions{}), renderOverlay(t, RealDeployOptions{NamePrefix: prefix})
	key := func(o *unstructured.Unstructured) string {
		return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	firsts := map[string]*unstructured.Unstructured{}
	for _, o := range first {
		firsts[key(o)] = o
	}
	serviceAccounts := map[string]bool{}
	for _, o := range second {
		if o.GetKind() == "ServiceAccount" {
			serviceAccounts[o.GetName()] = true
		}
	}
	for _, o := range second {
		if o.GetKind() == "CustomResourceDefinition" {
			if f := firsts[key(o)]; f == nil || !reflect.DeepEqual(f.Object, o.Object) {
				t.Errorf("%s differs from the first install's", key(o))
			}
			continue
		}
		if firsts[key(o)] != nil {
			t.Errorf("%s is the first install's too: applying the second would change it", key(o))
		}
		if !strings.HasPrefix(o.GetName(), prefix) {
			t.Errorf("%s: name not prefixed", key(o))
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			if m, _ := s.(map[string]any); m["kind"] == "ServiceAccount" && !serviceAccounts[m["name"].(string)] {
				t.Errorf("%s binds ServiceAccount %v, not one of the install's %v", key(o), m["name"], serviceAccounts)
			}
		}
	}
	d := &storagev1.CSIDriver{}
	renderOverlayObject(t, RealDeployOptions{NamePrefix: prefix}, "CSIDriver", d)
	if d.Name != driver {
		t.Errorf("CSIDriver %s, want %s", d.Name, driver)
	}
	ds := &appsv1.DaemonSet{}
	renderOverlayObject(t, RealDeployOptions{NamePrefix: prefix}, "DaemonSet", ds)
	dep := &appsv1.Deployment{}
	renderOverlayObject(t, RealDeployOptions{NamePrefix: prefix}, "Deployment", dep)
	for _, p := range []struct {
		kind string
		spec corev1.PodSpec
	}{{"DaemonSet", ds.Spec.Template.Spec}, {"Deployment", dep.Spec.Template.Spec}} {
		if !serviceAccounts[p.spec.ServiceAccountName] {
			t.Errorf("%s runs as %s, not one of the install's ServiceAccounts %v", p.kind, p.spec.ServiceAccountName, serviceAccounts)
		}
		for _, c := range p.spec.Containers {
			if c.Image == MockImage && !slices.Contains(c.Args, "--driver-name="+driver) {
				t.Errorf("%s's mock %s is not named %s: %v", p.kind, c.Name, driver, c.Args)
			}
		}
	}
	var paths []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		paths = append(paths, c.Args...)
		for _, m := range c.VolumeMounts {
			if m.Name == "socket-dir" {
				paths = append(paths, m.SubPathExpr)
			}
		}
	}
	for _, want := range []string{"$(NODE_NAME)/kubelet/plugins/" + driver, "--kubelet-registration-path=/tmp/fence-e2e-x/nodes/$(NODE_NAME)/kubelet/plugins/" + driver + "/csi.sock"} {
		if !slices.Contains(paths, want) {
			t.Errorf("node DaemonSet lacks %q: %v", want, paths)
		}
	}
	for _, p := range paths {
		if strings.Contains(p, "/"+DriverName) {
			t.Errorf("node DaemonSet still has the first driver's plugin path: %s", p)
		}
	}
	for _, o := range second {
		if o.GetKind() != "ValidatingAdmissionPolicy" {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
		expr, _ := conds[0].(map[string]any)["expression"].(string)
		if !strings.Contains(expr, "'"+ds.Spec.Template.Spec.ServiceAccountName+"'") {
			t.Errorf("policy %s does not name the node agents' ServiceAccount %s: %s", o.GetName(), ds.Spec.Template.Spec.ServiceAccountName, expr)
		}
	}
}
