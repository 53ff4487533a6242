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
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/fusefs"
)

// The product deployed on real nodes as a user deploys it: the shipped
// kustomization deploy/kubernetes/mock-example (the mock driver, the
// sidecar component, the base's CRDs, RBAC and admission policy, the
// CSIDriver) applied through an overlay that changes only what this machine
// makes different from a cluster (issue 20, step 2):
//
//   - images: the product's images built here (BuildImages), not ghcr.io's;
//   - node-driver-registrar, which cannot be built here (the module proxy
//     refuses it), is replaced by csi-fence-attacher --role=registrar with
//     the same volumes and flags;
//   - the kubelet's root is not /var/lib/kubelet but each node's own
//     directory under NodesDir: the node plugin sees NodesDir at the same
//     path as the host (the kubelet hands it host paths), the other
//     containers their node's own directories at the shipped paths
//     (subPathExpr with $(NODE_NAME));
//   - the mock's state, its "shared storage", is a directory of this run
//     (StateDir), not the host's /var/lib/csi-fence-mock; its node plugin
//     serves the volumes as the example ships it (--data-path=fuse: the
//     real data path, gated by the array) unless DataPath says otherwise;
//   - the node agent sees the nodes' directory at the host's path too
//     (--kubelet-dir is its node's kubelet root there): it hands the paths
//     it finds to the node plugin, which must get the kubelet's own paths,
//     the ones the kubelet staged and published at;
//   - the mock's node plugin logs its NodeUnpublishVolume and
//     NodeUnstageVolume calls with their force field (--v=2);
//   - the controller pod may be pinned to a node (ControllerNode), so that
//     a test can power the others off without taking the controller, and
//     its csi-fence-attacher may run another image built here
//     (ControllerAttacherImage: the one with the fence agents).
//
// With NamePrefix, the overlay installs the example once more as a second
// driver, as docs/deploying.md has one installed beside another: the same
// manifests, every name but the CRDs' prefixed.
//
// The overlay is written to <work dir>/deploy-real/kustomization.yaml and
// rendered with kustomize's library (RenderKustomization), as `kubectl
// apply -k` renders it; its patches fail the render when the shipped
// manifests no longer have what they patch (JSON patch test operations).

// RealDeployOptions tune DeployMockExample.
type RealDeployOptions struct {
	// ControllerNode, if set, is the node of the controller Deployment's pod
	// (spec.nodeName).
	ControllerNode string
	// AttacherArgs are appended to csi-fence-attacher's arguments in the
	// controller pod (e.g. a negative control).
	AttacherArgs []string
	// ControllerAttacherImage, if set, is the image of the controller
	// pod's csi-fence-attacher, in place of AttacherImage: e.g.
	// PowerFencingAttacherImage, with the fence agents power fencing runs.
	ControllerAttacherImage string
	// MockControllerArgs are appended to the mock driver's arguments in the
	// controller pod, which carries out the fences (e.g. --broken-fence).
	MockControllerArgs []string
	// MockNodeArgs are appended to the mock driver's arguments in the node
	// DaemonSet, whose node plugins serve the data path (e.g.
	// --detach=revokes, which the controller's instance needs as well: the
	// controller's decides what an unpublish does to the array, the node's
	// whether its FUSE data path gates reads and whether it advertises
	// FORCE_UNPUBLISH).
	MockNodeArgs []string
	// CSIDriverAnnotations are added to the example's CSIDriver, as the
	// driver's owner declares what it does (e.g.
	// contract.UnpublishRevokesAccessAnnotation).
	CSIDriverAnnotations map[string]string
	// DataPath, if set, is the node plugins' --data-path (none, bind,
	// fuse) in place of the example's.
	DataPath string
	// NoNodeAgent, a negative control, removes the node agent (the node
	// role's csi-fence-attacher) from the node DaemonSet: nothing cleans a
	// node that comes back, so its quarantine must stay.
	NoNodeAgent bool
	// NamePrefix, if set, installs the example once more as another
	// driver, beside the one deployed without it, as docs/deploying.md
	// has a second driver installed: kustomize's namePrefix on every
	// object but the CRDs (shared, the same), so that its ClusterRoles,
	// bindings, admission policy, Role and Service of the shared Leases'
	// namespace do not rebind the first driver's. The driver is then
	// NamePrefix+DriverName, as its CSIDriver is renamed (the mock's
	// --driver-name, its plugin directory and registration path follow),
	// the node agents' admission policy names its prefixed ServiceAccount,
	// and its array is a state directory of its own.
	NamePrefix string
}

// RealDeployment is the mock example deployed on real nodes.
type RealDeployment struct {
	// Driver is the CSI driver's name (DriverName, or with NamePrefix).
	Driver string
	// NamePrefix is the prefix of the deployment's object names.
	NamePrefix string
	// StateDir is the mock array's state on the host: the pods' hostPath.
	StateDir string
	// Overlay is the directory of the kustomization applied.
	Overlay string
	// Objects are the objects created.
	Objects []*unstructured.Unstructured
}

// Mock example workload names (deploy/kubernetes/mock-example).
const (
	exampleNamespace  = "default"
	exampleController = "csi-driver-controller"
	exampleNode       = "csi-driver-node"
)

// DeployMockExample applies deploy/kubernetes/mock-example through the
// real-node overlay and waits until the controller pod is ready and every
// real node has the driver registered by its kubelet (CSINode), i.e. the
// kubelet's plugin watcher took the registrar's registration. It returns a
// *MissingKernelFeatureError, deploying nothing, when the host cannot serve
// the node plugin's FUSE data path.
func (c *Cluster) DeployMockExample(ctx context.Context, nodes []*RealNode, opts RealDeployOptions) (*RealDeployment, error) {
	begin := time.Now()
	if opts.DataPath == "" || opts.DataPath == "fuse" {
		if err := fuseAvailable(); err != nil {
			return nil, err
		}
	}
	d := &RealDeployment{
		Driver:     opts.NamePrefix + DriverName,
		NamePrefix: opts.NamePrefix,
		StateDir:   filepath.Join(c.WorkDir, opts.NamePrefix+"mock-state"),
		Overlay:    filepath.Join(c.WorkDir, opts.NamePrefix+"deploy-real"),
	}
	if err := os.MkdirAll(d.StateDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d.Overlay, 0o755); err != nil {
		return nil, err
	}
	kust, err := realNodeOverlay(d.Overlay, c.NodesDir(), d.StateDir, opts)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(d.Overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(RepoRoot(), d.Overlay)
	if err != nil {
		return nil, err
	}
	if d.Objects, err = c.ApplyKustomization(ctx, rel, ApplyOptions{}); err != nil {
		return nil, err
	}
	if err := c.waitExample(ctx, d, nodes, 3*time.Minute); err != nil {
		return nil, err
	}
	c.log.Logf("mock example (driver %s) deployed on real nodes %s in %.1fs (overlay %s)", d.Driver, strings.Join(nodeNames(nodes), ", "),
		time.Since(begin).Seconds(), d.Overlay)
	return d, nil
}

// fuseAvailable returns a *MissingKernelFeatureError when this host cannot
// serve the mock's FUSE data path, which the example ships.
func fuseAvailable() error {
	if err := fusefs.Usable(); err != nil {
		return &MissingKernelFeatureError{Features: []string{"FUSE (CONFIG_FUSE_FS, /dev/fuse; try modprobe fuse): the mock example's node plugin serves its volumes with FUSE (--data-path=fuse): " + err.Error()}}
	}
	return nil
}

// realNodeOverlay returns the overlay's kustomization.yaml.
func realNodeOverlay(overlay, nodesDir, stateDir string, opts RealDeployOptions) (string, error) {
	example, err := filepath.Rel(overlay, filepath.Join(RepoRoot(), "deploy", "kubernetes", "mock-example"))
	if err != nil {
		return "", err
	}
	// The JSON patches below name containers by index, guarded by a test
	// of the name: find the indices in the example as it builds.
	base, err := RenderKustomization(filepath.Join("deploy", "kubernetes", "mock-example"))
	if err != nil {
		return "", err
	}
	mockIdx, mockName, err := exampleContainer(base, "DaemonSet", exampleNode, "csi-fence-mock")
	if err != nil {
		return "", err
	}
	sidecarIdx, sidecarName, err := exampleContainer(base, "Deployment", exampleController, "csi-fence-attacher")
	if err != nil {
		return "", err
	}
	mockCtlIdx, mockCtlName, err := exampleContainer(base, "Deployment", exampleController, "csi-fence-mock")
	if err != nil {
		return "", err
	}
	agentIdx, agentName, err := exampleContainer(base, "DaemonSet", exampleNode, "csi-fence-attacher")
	if err != nil {
		return "", err
	}
	const shippedKubeletDir = "--kubelet-dir=/var/lib/kubelet"
	agentArg, err := exampleArg(base, "DaemonSet", exampleNode, agentIdx, shippedKubeletDir)
	if err != nil {
		return "", err
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	driver := opts.NamePrefix + DriverName
	plugin := "$(NODE_NAME)/kubelet/plugins/" + driver
	nodeArgs, ctlArgs := opts.MockNodeArgs, opts.MockControllerArgs
	if opts.NamePrefix != "" {
		// The mock's name is its CSIDriver's, which the prefix renames.
		named := "--driver-name=" + driver
		nodeArgs, ctlArgs = append([]string{named}, nodeArgs...), append([]string{named}, ctlArgs...)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
`, example)
	if opts.NamePrefix != "" {
		fmt.Fprintf(&b, "namePrefix: %s\n", q(opts.NamePrefix))
	}
	b.WriteString("images:\n")
	for _, cmd := range []string{"csi-fence-attacher", "csi-fence-mock", "csi-fence-prestop-webhook"} {
		fmt.Fprintf(&b, "- {name: %s/%s, newName: %s/%s, newTag: %s}\n", ShippedImageRegistry, cmd, ProductImageRegistry, cmd, ProductImageTag)
	}
	// The node DaemonSet. First the JSON patch, on the indices of the
	// example as built (the strategic merge below may reorder the
	// containers). Containers and volumes merge by name, volume mounts by
	// mountPath.
	fmt.Fprintf(&b, `patches:
- target: {kind: DaemonSet, name: %s}
  patch: |-
    - {op: test, path: /spec/template/spec/containers/%d/name, value: %s}
    - {op: add, path: /spec/template/spec/containers/%d/args/-, value: --v=2}
    - {op: test, path: /spec/template/spec/containers/%d/name, value: %s}
    - {op: test, path: /spec/template/spec/containers/%d/args/%d, value: %s}
    - {op: replace, path: /spec/template/spec/containers/%d/args/%d, value: %s}
`, exampleNode, mockIdx, q(mockName), mockIdx, agentIdx, q(agentName), agentIdx, agentArg, q(shippedKubeletDir),
		agentIdx, agentArg, q("--kubelet-dir="+filepath.Join(nodesDir, "$(NODE_NAME)", "kubelet")))
	if opts.DataPath != "" {
		// The last --data-path given wins.
		fmt.Fprintf(&b, "    - {op: add, path: /spec/template/spec/containers/%d/args/-, value: %s}\n", mockIdx, q("--data-path="+opts.DataPath))
	}
	for _, a := range nodeArgs {
		fmt.Fprintf(&b, "    - {op: add, path: /spec/template/spec/containers/%d/args/-, value: %s}\n", mockIdx, q(a))
	}
	fmt.Fprintf(&b, `- target: {kind: DaemonSet, name: %s}
  patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: %s}
    spec:
      template:
        spec:
          containers:
          - name: csi-fence-mock
            volumeMounts:
            - {mountPath: /csi, name: socket-dir, subPathExpr: %s}
            - {mountPath: /var/lib/kubelet, $patch: delete}
            - {mountPath: %s, name: kubelet-dir, mountPropagation: Bidirectional}
          - name: node-driver-registrar
            image: %s
            args: [--role=registrar, --v=2, --csi-address=/csi/csi.sock, %s]
            env:
            - name: NODE_NAME
              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
            volumeMounts:
            - {mountPath: /csi, name: socket-dir, subPathExpr: %s}
            - {mountPath: /registration, name: registration-dir, subPathExpr: $(NODE_NAME)/kubelet/plugins_registry}
          - name: csi-fence-attacher
            volumeMounts:
            - {mountPath: /csi, name: socket-dir, subPathExpr: %s}
            - {mountPath: /var/lib/kubelet, $patch: delete}
            - {mountPath: %s, name: kubelet-dir, mountPropagation: HostToContainer}
          volumes:
          - name: socket-dir
            hostPath: {path: %s, type: Directory}
          - name: registration-dir
            hostPath: {path: %s, type: Directory}
          - name: kubelet-dir
            hostPath: {path: %s, type: Directory}
          - name: state
            hostPath: {path: %s, type: Directory}
`, exampleNode, exampleNode, q(plugin), q(nodesDir), q(AttacherImage),
		q("--kubelet-registration-path="+filepath.Join(nodesDir, "$(NODE_NAME)", "kubelet", "plugins", driver, "csi.sock")),
		q(plugin), q(plugin), q(nodesDir), q(nodesDir), q(nodesDir), q(nodesDir), q(stateDir))
	// The controller Deployment.
	fmt.Fprintf(&b, `- target: {kind: Deployment, name: %s}
  patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: %s}
    spec:
      template:
        spec:
          volumes:
          - name: state
            hostPath: {path: %s, type: Directory}
`, exampleController, exampleController, q(stateDir))
	if opts.ControllerNode != "" {
		fmt.Fprintf(&b, "          nodeName: %s\n", q(opts.ControllerNode))
	}
	if len(ctlArgs) > 0 {
		fmt.Fprintf(&b, `- target: {kind: Deployment, name: %s}
  patch: |-
    - {op: test, path: /spec/template/spec/containers/%d/name, value: %s}
`, exampleController, mockCtlIdx, q(mockCtlName))
		for _, a := range ctlArgs {
			fmt.Fprintf(&b, "    - {op: add, path: /spec/template/spec/containers/%d/args/-, value: %s}\n", mockCtlIdx, q(a))
		}
	}
	if len(opts.AttacherArgs) > 0 {
		fmt.Fprintf(&b, `- target: {kind: Deployment, name: %s}
  patch: |-
    - {op: test, path: /spec/template/spec/containers/%d/name, value: %s}
`, exampleController, sidecarIdx, q(sidecarName))
		for _, a := range opts.AttacherArgs {
			fmt.Fprintf(&b, "    - {op: add, path: /spec/template/spec/containers/%d/args/-, value: %s}\n", sidecarIdx, q(a))
		}
	}
	if opts.ControllerAttacherImage != "" {
		// Before the overlay's images: transformer (kustomize runs the
		// patches first), which leaves a name it does not list alone.
		fmt.Fprintf(&b, `- target: {kind: Deployment, name: %s}
  patch: |-
    - {op: test, path: /spec/template/spec/containers/%d/name, value: %s}
    - {op: replace, path: /spec/template/spec/containers/%d/image, value: %s}
`, exampleController, sidecarIdx, q(sidecarName), sidecarIdx, q(opts.ControllerAttacherImage))
	}
	if len(opts.CSIDriverAnnotations) > 0 {
		// A strategic merge: the shipped annotations stay.
		fmt.Fprintf(&b, `- target: {kind: CSIDriver, name: %s}
  patch: |-
    apiVersion: storage.k8s.io/v1
    kind: CSIDriver
    metadata:
      name: %s
      annotations:
`, DriverName, DriverName)
		for _, k := range slices.Sorted(maps.Keys(opts.CSIDriverAnnotations)) {
			fmt.Fprintf(&b, "        %s: %s\n", q(k), q(opts.CSIDriverAnnotations[k]))
		}
	}
	if opts.NamePrefix != "" {
		// The prefix renames the node agents' ServiceAccount, which
		// kustomize follows into the bindings' subjects but not into the
		// admission policy's expression, a string that names it: without
		// this, the policy would guard the first driver's agents twice and
		// this driver's not at all.
		policy, expr, err := examplePolicy(base)
		if err != nil {
			return "", err
		}
		sa, err := exampleServiceAccount(base, "DaemonSet", exampleNode)
		if err != nil {
			return "", err
		}
		quoted := "'" + sa + "'"
		if strings.Count(expr, quoted) != 1 {
			return "", fmt.Errorf("deploy/kubernetes/mock-example: the admission policy %s does not name the node agents' ServiceAccount %s once: %s", policy, quoted, expr)
		}
		fmt.Fprintf(&b, `- target: {kind: ValidatingAdmissionPolicy, name: %s}
  patch: |-
    - {op: test, path: /spec/matchConditions/0/expression, value: %s}
    - {op: replace, path: /spec/matchConditions/0/expression, value: %s}
`, policy, q(expr), q(strings.Replace(expr, quoted, "'"+opts.NamePrefix+sa+"'", 1)))
	}
	if opts.NoNodeAgent {
		// Last: the patches above name the container.
		fmt.Fprintf(&b, `- target: {kind: DaemonSet, name: %s}
  patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: %s}
    spec:
      template:
        spec:
          containers:
          - {name: %s, $patch: delete}
`, exampleNode, exampleNode, q(agentName))
	}
	return b.String(), nil
}

// waitExample waits until the controller Deployment has a ready pod and
// each node's kubelet lists the driver in its CSINode, giving up early, with
// the pod's state, when a container of the example keeps failing.
func (c *Cluster) waitExample(ctx context.Context, d *RealDeployment, nodes []*RealNode, timeout time.Duration) error {
	return waitFor(ctx, timeout, 500*time.Millisecond, "the mock example ("+d.Driver+") running on the real nodes", func(ctx context.Context) (bool, error) {
		pods, err := d.pods(ctx, c, "csi-fence-mock-controller", exampleController)
		if err != nil {
			return false, err
		}
		ready := false
		for _, p := range pods {
			if err := crashing(p); err != nil {
				return false, err
			}
			ready = ready || podReady(p)
		}
		if !ready {
			return false, fmt.Errorf("no ready controller pod among %d", len(pods))
		}
		nodePods, err := d.pods(ctx, c, "csi-fence-mock-node", exampleNode)
		if err != nil {
			return false, err
		}
		for _, p := range nodePods {
			if err := crashing(p); err != nil {
				return false, err
			}
		}
		for _, n := range nodes {
			cn, err := c.Client.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, fmt.Errorf("CSINode %s: %w", n.Name, err)
			}
			if !csiNodeHas(cn, d.Driver) {
				return false, fmt.Errorf("the kubelet of %s has not registered %s yet", n.Name, d.Driver)
			}
		}
		return true, nil
	})
}

// pods returns the pods of the deployment's workload named workload (the
// example's name, before the prefix) whose label app is app: each
// deployment of the example (NamePrefix) labels its pods alike, their
// names tell them apart.
func (d *RealDeployment) pods(ctx context.Context, c *Cluster, app, workload string) ([]*corev1.Pod, error) {
	list, err := c.Client.CoreV1().Pods(exampleNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"app": app}.String()})
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Name, d.NamePrefix+workload+"-") {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

func csiNodeHas(cn *storagev1.CSINode, driver string) bool {
	for _, d := range cn.Spec.Drivers {
		if d.Name == driver {
			return true
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// crashing reports a container of p that failed more than twice, with why:
// waiting for it longer would only hide the cause.
func crashing(p *corev1.Pod) error {
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if cs.RestartCount < 3 {
			continue
		}
		why := ""
		if t := cs.LastTerminationState.Terminated; t != nil {
			why = fmt.Sprintf("exit %d %s: %s", t.ExitCode, t.Reason, t.Message)
		}
		if w := cs.State.Waiting; w != nil {
			why += fmt.Sprintf("; waiting %s: %s", w.Reason, w.Message)
		}
		return fmt.Errorf("container %s of pod %s on %s restarted %d times (%s); read its log with kubectl logs or in the node's pod-logs",
			cs.Name, p.Name, p.Spec.NodeName, cs.RestartCount, why)
	}
	return nil
}

// Array opens the mock array of the deployment (its state on the host).
func (d *RealDeployment) Array() (*array.Array, error) {
	return array.Open(d.StateDir)
}

// DataDir is where the node plugins keep volume id's files (--data-path
// bind or fuse).
func (d *RealDeployment) DataDir(id string) string {
	return filepath.Join(d.StateDir, "data", id)
}

// StaticVolume makes a volume of the mock's array and a PersistentVolume of
// it, pre-bound to the claim namespace/claim, of storageClass.
func (c *Cluster) StaticVolume(ctx context.Context, d *RealDeployment, id, namespace, claim, storageClass string) error {
	return c.staticVolume(ctx, d, id, namespace, claim, storageClass, corev1.PersistentVolumeFilesystem)
}

// StaticBlockVolume is StaticVolume for a claim of volumeMode Block (the
// mock example's node plugin publishes it as a loop device).
func (c *Cluster) StaticBlockVolume(ctx context.Context, d *RealDeployment, id, namespace, claim, storageClass string) error {
	return c.staticVolume(ctx, d, id, namespace, claim, storageClass, corev1.PersistentVolumeBlock)
}

func (c *Cluster) staticVolume(ctx context.Context, d *RealDeployment, id, namespace, claim, storageClass string, mode corev1.PersistentVolumeMode) error {
	arr, err := d.Array()
	if err != nil {
		return err
	}
	const size = 4 << 20 // a few MiB: nothing is allocated (a directory)
	if err := arr.AddVolume(id, size); err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			VolumeMode:                    &mode,
			StorageClassName:              storageClass,
			ClaimRef:                      &corev1.ObjectReference{Namespace: namespace, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: d.Driver, VolumeHandle: id,
			}},
		},
	}
	_, err = c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	return err
}

// exampleArg returns the index of arg among the arguments of container i
// of the example's kind/name.
func exampleArg(objs []*unstructured.Unstructured, kind, name string, i int, arg string) (int, error) {
	for _, o := range objs {
		if o.GetKind() != kind || o.GetName() != name {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if i >= len(cs) {
			break
		}
		m, _ := cs[i].(map[string]any)
		args, _ := m["args"].([]any)
		for j, a := range args {
			if a == arg {
				return j, nil
			}
		}
		return 0, fmt.Errorf("deploy/kubernetes/mock-example: container %d of %s %s has no argument %s", i, kind, name, arg)
	}
	return 0, fmt.Errorf("deploy/kubernetes/mock-example has no %s %s with a container %d", kind, name, i)
}

// examplePolicy returns the name of the example's ValidatingAdmissionPolicy
// and the expression of its first match condition.
func examplePolicy(objs []*unstructured.Unstructured) (string, string, error) {
	for _, o := range objs {
		if o.GetKind() != "ValidatingAdmissionPolicy" {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
		if len(conds) == 0 {
			break
		}
		m, _ := conds[0].(map[string]any)
		expr, _ := m["expression"].(string)
		return o.GetName(), expr, nil
	}
	return "", "", fmt.Errorf("deploy/kubernetes/mock-example has no ValidatingAdmissionPolicy with a match condition")
}

// exampleServiceAccount returns the ServiceAccount of the pods of the
// example's kind/name.
func exampleServiceAccount(objs []*unstructured.Unstructured, kind, name string) (string, error) {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if sa, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName"); sa != "" {
				return sa, nil
			}
			break
		}
	}
	return "", fmt.Errorf("deploy/kubernetes/mock-example: %s %s names no ServiceAccount", kind, name)
}

// exampleContainer returns the index and name of the first container of
// the example's kind/name whose image's last path element is image.
func exampleContainer(objs []*unstructured.Unstructured, kind, name, image string) (int, string, error) {
	for _, o := range objs {
		if o.GetKind() != kind || o.GetName() != name {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for i, c := range cs {
			m, _ := c.(map[string]any)
			img, _ := m["image"].(string)
			img, _, _ = strings.Cut(path.Base(img), ":")
			if img == image {
				n, _ := m["name"].(string)
				return i, n, nil
			}
		}
		return 0, "", fmt.Errorf("deploy/kubernetes/mock-example: %s %s has no container of image .../%s", kind, name, image)
	}
	return 0, "", fmt.Errorf("deploy/kubernetes/mock-example has no %s %s", kind, name)
}
