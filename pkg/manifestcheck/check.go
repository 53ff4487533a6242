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

// Package manifestcheck checks a driver's manifests after csi-fence-attacher
// was put into them (deploy/kubernetes/sidecar, Helm, or by hand) and
// answers "will this fence?": kustomize cannot fail a build whose patches or
// image rewrites matched nothing, and nothing fails an install whose roles
// are bound to ServiceAccounts no pod runs as, so this is where such a build
// fails, each finding naming its fix. Beside the containers it checks the
// RBAC granted to the pods' ServiceAccounts against what the sidecar's
// preflight needs for each feature the arguments enable (the rule sets of
// pkg/sidecar/access.go), the namespaces, the failover's gate against its
// RBAC, host ports on the host network, CSIDrivers without attachments and
// Windows node DaemonSets. It backs `kubectl fence check-manifests` and the
// tests of deploy/kubernetes and deploy/helm.
package manifestcheck

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ExternalAttacherImages are the last path elements of the images
// external-attacher is published as (registry.k8s.io/sig-storage/csi-attacher,
// public.ecr.aws/eks-distro/kubernetes-csi/external-attacher, mirrors...).
var ExternalAttacherImages = []string{"csi-attacher", "external-attacher"}

// FenceImage is the last path element of csi-fence-attacher's image.
const FenceImage = "csi-fence-attacher"

// defaultCSIAddress is external-attacher's (and our) --csi-address default.
const defaultCSIAddress = "/run/csi/socket"

// Workload is a pod template found in the manifests.
type Workload struct {
	Kind, Namespace, Name string
	Spec                  corev1.PodSpec
}

func (w Workload) String() string {
	if w.Namespace == "" {
		return w.Kind + " " + w.Name
	}
	return w.Kind + " " + w.Namespace + "/" + w.Name
}

// Sidecar is one csi-fence-attacher container found.
type Sidecar struct {
	Workload  Workload
	Container corev1.Container
	// Node: --role=node (the node agent), else the controller role.
	Node bool
	// Socket is the driver's socket, --csi-address with the container's
	// $(VAR)s expanded and unix:// removed.
	Socket string
}

// Result is what Check found; Errors is empty when the manifests are
// ready to apply.
type Result struct {
	Workloads []Workload
	Sidecars  []Sidecar
	Errors    []string
	// Notes are what was found, for the user to read (one line each).
	Notes []string
}

// Err joins Errors, nil when there is none.
func (r Result) Err() error {
	if len(r.Errors) == 0 {
		return nil
	}
	return errors.New(strings.Join(r.Errors, "\n"))
}

// Options tune Check.
type Options struct {
	// Flags returns csi-fence-attacher's flag set (sidecar.NewFlagSet);
	// nil skips the check of each sidecar's arguments.
	Flags func() (*flag.FlagSet, error)
	// ControllerOnly does not require the node agent (a cluster where it
	// is deployed by another manifest).
	ControllerOnly bool
	// Namespace is where objects without one are applied (kubectl's
	// namespace); "" is "default".
	Namespace string
}

// Read decodes multi-document YAML or JSON (kustomize build's output, a
// List) into objects.
func Read(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.IsList() {
			list, err := u.ToList()
			if err != nil {
				return nil, err
			}
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
			continue
		}
		objs = append(objs, u)
	}
}

// Workloads returns the pod templates of the Deployments, StatefulSets,
// DaemonSets, ReplicaSets and Pods among objs.
func Workloads(objs []*unstructured.Unstructured) ([]Workload, error) {
	var out []Workload
	for _, o := range objs {
		// Every workload kind holds its pod template at the same place.
		path := []string{"spec", "template", "spec"}
		switch o.GetKind() {
		case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
		case "Pod":
			path = []string{"spec"}
		default:
			continue
		}
		spec := &corev1.PodSpec{}
		m, _, err := unstructured.NestedMap(o.Object, path...)
		if err == nil {
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(m, spec)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		out = append(out, Workload{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), Spec: *spec})
	}
	return out, nil
}

// imageName is an image reference's last path element, without tag or
// digest: "registry.k8s.io/sig-storage/csi-attacher:v4.8.0" -> "csi-attacher".
func imageName(image string) string {
	image, _, _ = strings.Cut(image, "@")
	base := path.Base(image)
	base, _, _ = strings.Cut(base, ":")
	return base
}

// IsExternalAttacher says whether an image is one of external-attacher's.
func IsExternalAttacher(image string) bool {
	n := imageName(image)
	for _, e := range ExternalAttacherImages {
		if n == e {
			return true
		}
	}
	return false
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand resolves $(VAR) as the kubelet does, from the container's literal
// env values; references to others (fieldRef...) stay as they are.
func expand(s string, c corev1.Container) string {
	return envRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		for _, e := range c.Env {
			if e.Name == name && e.ValueFrom == nil {
				return e.Value
			}
		}
		return ref
	})
}

// argValue returns the value of --name=value or --name value in args.
func argValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// socketPath is the file path of a --csi-address.
func socketPath(addr string) string {
	addr = strings.TrimPrefix(addr, "unix://")
	return strings.TrimPrefix(addr, "unix:")
}

// mountFor returns the mount of c under which file lies (the longest).
func mountFor(c corev1.Container, file string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	found := false
	for _, m := range c.VolumeMounts {
		dir := strings.TrimSuffix(m.MountPath, "/")
		if (strings.HasPrefix(file, dir+"/") || file == dir) && len(dir) >= len(strings.TrimSuffix(best.MountPath, "/")) {
			best, found = m, true
		}
	}
	return best, found
}

// Check looks for csi-fence-attacher in the workloads of objs and says what
// is wrong: an external-attacher left running (the sidecar component did
// not recognise its image), no controller sidecar at all (nothing matched),
// no node agent, a socket the sidecar cannot reach, or an argument it does
// not accept.
func Check(objs []*unstructured.Unstructured, opts Options) (Result, error) {
	ws, err := Workloads(objs)
	if err != nil {
		return Result{}, err
	}
	r := Result{Workloads: ws}
	var names []string
	for _, w := range ws {
		names = append(names, w.String())
		for _, c := range append(append([]corev1.Container{}, w.Spec.InitContainers...), w.Spec.Containers...) {
			switch {
			case IsExternalAttacher(c.Image):
				r.Errors = append(r.Errors, fmt.Sprintf("%s: container %q still runs external-attacher (image %s): csi-fence-attacher must replace it (same Lease, same finalizers), "+
					"but the sidecar component's images: list does not name %q; add to your kustomization: images: [{name: %s, newName: ghcr.io/csi-fence/csi-fence-attacher, newTag: <version>}]",
					w, c.Name, c.Image, imageRepo(c.Image), imageRepo(c.Image)))
			case imageName(c.Image) == FenceImage:
				s := Sidecar{Workload: w, Container: c}
				if role, ok := argValue(c.Args, "role"); ok && role == "node" {
					s.Node = true
				}
				addr, ok := argValue(c.Args, "csi-address")
				if !ok {
					addr = defaultCSIAddress
				}
				s.Socket = socketPath(expand(addr, c))
				r.Sidecars = append(r.Sidecars, s)
			}
		}
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "default"
	}
	noAttach := noAttachDrivers(objs)
	if len(noAttach) > 0 {
		r.Errors = append(r.Errors, noAttachMessage(noAttach))
	}
	rb, err := readRBAC(objs, ns)
	if err != nil {
		return Result{}, err
	}
	if rb.empty() && len(r.Sidecars) > 0 {
		r.Errors = append(r.Errors, "no RoleBinding or ClusterRoleBinding in the input: nothing says csi-fence-attacher may fence. "+
			"Fix: check the manifests that bind its roles together with the driver's (kubectl fence check-manifests -f driver.yaml -f csi-fence.yaml, e.g. two Helm releases' renders)")
	} else {
		for _, s := range r.Sidecars {
			if s.Node {
				r.Errors = append(r.Errors, checkNodeAgentRBAC(s, rb, ns)...)
			} else {
				r.Errors = append(r.Errors, checkControllerRBAC(s, rb, ns)...)
			}
		}
	}
	r.Errors = append(r.Errors, checkNodeAgentService(objs, r.Sidecars, ns)...)
	r.Errors = append(r.Errors, checkHostPorts(ws)...)
	r.Notes = append(r.Notes, windowsNotes(ws)...)
	// Each sidecar is checked once every workload is known: a socket may be
	// shared with another pod through the host.
	for _, s := range r.Sidecars {
		r.Errors = append(r.Errors, checkSidecar(s, ws, opts)...)
	}
	var controllers, nodes int
	for _, s := range r.Sidecars {
		role := "controller"
		if s.Node {
			nodes++
			role = "node agent"
		} else {
			controllers++
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s: container %q runs csi-fence-attacher (%s, %s) on socket %s, args %s", s.Workload, s.Container.Name, role, s.Container.Image, s.Socket, strings.Join(s.Container.Args, " ")))
	}
	sort.Strings(names)
	if controllers == 0 && len(noAttach) == 0 {
		looked := "no Deployment, StatefulSet, DaemonSet, ReplicaSet or Pod in the input"
		if len(names) > 0 {
			looked = "in " + strings.Join(names, ", ")
		}
		r.Errors = append(r.Errors, fmt.Sprintf("found no csi-fence-attacher controller container: looked for a container whose image is .../%s without --role=node, "+
			"and for an external-attacher container (image .../%s) it should have replaced, %s. Does the kustomization include the driver's controller manifest and deploy/kubernetes/sidecar in its components:?",
			FenceImage, strings.Join(ExternalAttacherImages, " or .../"), looked))
	}
	r.Errors = append(r.Errors, checkNodeAgentIdentity(objs, r.Sidecars, ns)...)
	r.Errors = append(r.Errors, checkNodeAgentTolerations(r.Sidecars)...)
	if nodes == 0 && !opts.ControllerOnly && len(noAttach) == 0 {
		r.Errors = append(r.Errors, fmt.Sprintf("found no csi-fence-attacher node agent (image .../%s with --role=node) in %s: without it a node that comes back keeps its fenced volumes quarantined for ever. "+
			"Patch your node plugin's DaemonSet as deploy/kubernetes/sidecar/node-patch.yaml and node-agent.yaml do (its name, its socket volume; docs/drivers.md), or pass --controller-only if it is deployed elsewhere",
			FenceImage, strings.Join(names, ", ")))
	}
	return r, nil
}

// imageRepo is an image reference without tag or digest.
func imageRepo(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// checkSidecar checks one csi-fence-attacher container in its pod.
func checkSidecar(s Sidecar, ws []Workload, opts Options) []string {
	var errs []string
	where := fmt.Sprintf("%s: container %q", s.Workload, s.Container.Name)
	if strings.Contains(s.Socket, "$(") {
		errs = append(errs, fmt.Sprintf("%s: --csi-address %s refers to a variable the container does not set", where, s.Socket))
	} else if m, ok := mountFor(s.Container, s.Socket); !ok {
		errs = append(errs, fmt.Sprintf("%s: the driver's socket %s is under none of its volume mounts", where, s.Socket))
	} else {
		shared := false
		for _, c := range s.Workload.Spec.Containers {
			if c.Name == s.Container.Name {
				continue
			}
			for _, om := range c.VolumeMounts {
				if om.Name == m.Name {
					shared = true
				}
			}
		}
		if !shared {
			if file := hostFile(s.Workload, s.Container, s.Socket); file != "" {
				shared = sharedOnHost(ws, file)
			}
		}
		if !shared {
			errs = append(errs, fmt.Sprintf("%s: its socket volume %q (for %s) is mounted by no other container, in this pod or, for a hostPath volume, in another pod through the same host directory: the driver cannot be listening there. "+
				"Fix: mount the volume the driver's socket is in (in this pod, the one its node-driver-registrar mounts)", where, m.Name, s.Socket))
		}
	}
	for _, m := range s.Container.VolumeMounts {
		found := false
		for _, v := range s.Workload.Spec.Volumes {
			found = found || v.Name == m.Name
		}
		if !found {
			errs = append(errs, fmt.Sprintf("%s: mounts volume %q, which the pod does not have", where, m.Name))
		}
	}
	if s.Node && s.Workload.Spec.NodeSelector[corev1.LabelOSStable] == "windows" {
		errs = append(errs, fmt.Sprintf("%s: the node agent is in a DaemonSet for Windows nodes, and has no Windows build. Fix: patch the Linux node DaemonSet instead", where))
	}
	if s.Node {
		if _, ok := mountFor(s.Container, "/var/lib/kubelet/pods"); !ok {
			errs = append(errs, fmt.Sprintf("%s: the node agent does not mount the kubelet directory (/var/lib/kubelet): it cannot clean fenced volumes", where))
		}
	}
	if opts.Flags != nil {
		fs, err := opts.Flags()
		if err != nil {
			return append(errs, err.Error())
		}
		var out bytes.Buffer
		fs.SetOutput(&out)
		args := make([]string, len(s.Container.Args))
		for i, a := range s.Container.Args {
			args[i] = expand(a, s.Container)
		}
		if err := fs.Parse(args); err != nil {
			errs = append(errs, fmt.Sprintf("%s: csi-fence-attacher does not accept its arguments: %v", where, err))
		} else if fs.NArg() > 0 {
			errs = append(errs, fmt.Sprintf("%s: csi-fence-attacher takes no positional arguments, got %q", where, fs.Args()))
		}
	}
	return errs
}

// NodeAgentPolicy is the ValidatingAdmissionPolicy (deploy/kubernetes/base)
// that holds each node agent to the FencingRequest of its own node.
const NodeAgentPolicy = "csi-fence-node-agent-own-record"

// checkNodeAgentIdentity checks that the admission policy restricting node
// agents to their own node's record names the ServiceAccount each node
// agent runs as. The policy can only tell node agents by their user name,
// and a node agent runs as its pod's ServiceAccount: in a driver's own
// DaemonSet that is the driver's, which the shipped policy does not name,
// and a kustomize namePrefix renames ours. Unmatched, the policy restricts
// nothing and every node's agent may rewrite every node's record (mark
// another node's fenced volumes cleaned, and so lift its quarantine: S2),
// with nothing said. The policy's match is a CEL expression: a node agent
// passes when the expression names its ServiceAccount as a quoted string
// (':name' or the whole user name), which is what the shipped policy and
// the README's patch do.
func checkNodeAgentIdentity(objs []*unstructured.Unstructured, sidecars []Sidecar, defaultNamespace string) []string {
	var policy *unstructured.Unstructured
	for _, o := range objs {
		// A kustomize namePrefix or nameSuffix renames it.
		if o.GetKind() == "ValidatingAdmissionPolicy" && strings.Contains(o.GetName(), NodeAgentPolicy) {
			policy = o
		}
	}
	policyName := NodeAgentPolicy
	if policy != nil {
		policyName = policy.GetName()
	}
	var expr strings.Builder
	if policy != nil {
		conds, _, _ := unstructured.NestedSlice(policy.Object, "spec", "matchConditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok {
				e, _ := m["expression"].(string)
				expr.WriteString(e)
			}
		}
	}
	// The sidecar component writes the user as 'system:serviceaccount:' +
	// 'ns' + ':' + 'sa', so that kustomize can set its parts: read it whole.
	norm := strings.ReplaceAll(expr.String(), "' + '", "")
	expr.Reset()
	expr.WriteString(norm)
	identity := func(w Workload) (sa, user string) {
		a := podServiceAccount(w, defaultNamespace)
		return a.Name, "system:serviceaccount:" + a.Namespace + ":" + a.Name
	}
	controllers := map[string]Workload{} // by user name
	for _, s := range sidecars {
		if !s.Node {
			_, user := identity(s.Workload)
			controllers[user] = s.Workload
		}
	}
	var errs []string
	for _, s := range sidecars {
		if !s.Node {
			continue
		}
		sa, user := identity(s.Workload)
		e := expr.String()
		switch {
		case controllers[user].Name != "":
			// The controller writes every node's record: a policy naming
			// this user would stop it, one not naming it stops nothing.
			errs = append(errs, fmt.Sprintf("%s: node agent %q runs as ServiceAccount %q, as the csi-fence-attacher controller in %s does: the ValidatingAdmissionPolicy %s cannot hold the node agent to its own node's FencingRequest without stopping the controller too. "+
				"Run the node agent in a pod with a ServiceAccount of its own (a driver that runs its controller and node plugin in one pod can be made safe this way only on a single node)",
				s.Workload, s.Container.Name, sa, controllers[user], policyName))
		case policy == nil:
			errs = append(errs, fmt.Sprintf("%s: no ValidatingAdmissionPolicy %s in the build: nothing holds node agent %q to its own node's FencingRequest (include deploy/kubernetes/base, or the sidecar component)",
				s.Workload, NodeAgentPolicy, s.Container.Name))
		case !strings.Contains(e, "':"+sa+"'") && !strings.Contains(e, "'"+user+"'"):
			errs = append(errs, fmt.Sprintf("%s: node agent %q runs as ServiceAccount %q, which the ValidatingAdmissionPolicy %s does not name: it would let this node's agent rewrite every node's FencingRequest (and lift another node's quarantine). "+
				"Patch the policy's matchConditions to name it (README, \"Next to a real driver\"), e.g. request.userInfo.username.endsWith(':%s')",
				s.Workload, s.Container.Name, sa, policyName, sa))
		}
	}
	return errs
}

// NodeAgentTaints are the taints a node under fencing may carry, which the
// node agent's pod must tolerate: the agent is what cleans a fenced node up
// when it returns, and its node is released only after. The quarantine taint
// (NoSchedule) keeps a deleted or not yet created agent pod off the node;
// the out-of-service taint (NoExecute, KEP-2268, added by an admin or a
// node-level fence) evicts it, and the garbage collector then deletes it: a
// node that comes back would stay quarantined for ever (S6).
var NodeAgentTaints = []corev1.Taint{
	{Key: "csi-fence.io/quarantine", Effect: corev1.TaintEffectNoSchedule},
	{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute},
}

// checkNodeAgentTolerations says which node agent's pod does not tolerate
// NodeAgentTaints. A strategic merge patch cannot add tolerations to a
// driver's DaemonSet (the list is replaced whole, which would drop the
// driver's own), so the user adds them; this is where a build without them
// fails.
func checkNodeAgentTolerations(sidecars []Sidecar) []string {
	var errs []string
	for _, s := range sidecars {
		if !s.Node {
			continue
		}
		var missing []string
		for _, t := range NodeAgentTaints {
			tolerated := false
			for _, tol := range s.Workload.Spec.Tolerations {
				if tolerates(tol, t) {
					tolerated = true
					break
				}
			}
			if !tolerated {
				missing = append(missing, fmt.Sprintf("{key: %s, operator: Exists}", t.Key))
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Sprintf("%s: node agent %q runs in a pod that does not tolerate the taints of a node under fencing: evicted or kept off the node, nothing cleans the node up when it comes back and it stays quarantined. "+
				"Add to the pod's tolerations: %s", s.Workload, s.Container.Name, strings.Join(missing, ", ")))
		}
	}
	return errs
}

// tolerates reports whether tol tolerates t, as the scheduler and the taint
// manager match them (an empty key with Exists tolerates every taint, an
// empty effect every effect).
func tolerates(tol corev1.Toleration, t corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key == "" {
		return tol.Operator == corev1.TolerationOpExists
	}
	if tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return tol.Value == t.Value
	}
	return false
}
