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

package prestop

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// How the helper is made available in a mutated pod: an init container
// copies it from its image into an emptyDir that every container with a
// rewritten hook mounts read-only, as injectors of sidecars and debuggers do;
// the containers' own images stay untouched and need no shell.
const (
	VolumeName  = "csi-fence-prestop"
	InitName    = "csi-fence-prestop-install"
	MountDir    = "/csi-fence-prestop"
	HelperPath  = MountDir + "/csi-fence-prestop"
	ImageBinary = "/entrypoint" // where release-tools/Dockerfile puts the binary
)

// RewrittenAnnotation records on a mutated pod which containers' hooks
// were rewritten, for people; the webhook knows a mutated pod by its init
// container.
const RewrittenAnnotation = termreason.OptInKey + "-rewritten"

// MutateOptions configure the mutation.
type MutateOptions struct {
	// Image of the helper (the init container's). Required.
	Image string
	// Timeout of the helper's API reads; 0: the helper's default.
	Timeout string
	// NodeAgentURL is where the helper asks its node's agent for the
	// reason when its pod is gone from the API (termreason.ServedPath on
	// a Service with internalTrafficPolicy Local); empty: it does not ask.
	NodeAgentURL string
}

// Patch is one RFC 6902 operation.
type Patch struct {
	Op    string      `json:"op"`
	Path  string      `json:"path"`
	Value interface{} `json:"value,omitempty"`
}

// Mutate returns the JSON patch that makes an opted-in pod's preStop hooks
// receive its termination reason, or an error (for the admission denial)
// when the pod's delivery settings break the seed's rules. A pod that did
// not opt in, has no hook to rewrite, or was mutated already (a
// reinvocation) gets no patch.
func Mutate(pod *v1.Pod, opts MutateOptions) ([]Patch, error) {
	if !termreason.OptedIn(pod) {
		return nil, nil
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == InitName {
			return nil, nil // ours already: never wrap a wrapped hook
		}
	}
	if pod.Spec.OS != nil && pod.Spec.OS.Name != v1.Linux {
		// The installer's Linux security settings are invalid on another
		// OS, and the helper would not run there anyway.
		return nil, fmt.Errorf("the termination reason helper is a Linux binary; a pod with spec.os.name %q cannot opt in", pod.Spec.OS.Name)
	}
	d, err := termreason.ValidateDelivery(pod)
	if err != nil {
		return nil, err
	}
	if opts.Image == "" {
		return nil, fmt.Errorf("no helper image configured")
	}
	inits := append([]v1.Container(nil), pod.Spec.InitContainers...)
	containers := append([]v1.Container(nil), pod.Spec.Containers...)
	var rewritten []string
	rewrite := func(list []v1.Container, sidecarsOnly bool) error {
		for i := range list {
			c := &list[i]
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways) {
				continue
			}
			ok, err := rewriteContainer(c, d, opts)
			if err != nil {
				return err
			}
			if ok {
				rewritten = append(rewritten, c.Name)
			}
		}
		return nil
	}
	if err := rewrite(inits, true); err != nil {
		return nil, err
	}
	if err := rewrite(containers, false); err != nil {
		return nil, err
	}
	if len(rewritten) == 0 {
		return nil, nil
	}
	// First, so that sidecars started after it have the helper too.
	inits = append([]v1.Container{installer(opts.Image)}, inits...)
	volumes := append(append([]v1.Volume(nil), pod.Spec.Volumes...), v1.Volume{
		Name: VolumeName, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	ann := map[string]string{}
	for k, v := range pod.Annotations {
		ann[k] = v
	}
	ann[RewrittenAnnotation] = fmt.Sprint(rewritten)
	// "add" replaces a member that exists (RFC 6902 4.1), so that one
	// operation per field serves pods with and without it.
	return []Patch{
		{Op: "add", Path: "/metadata/annotations", Value: ann},
		{Op: "add", Path: "/spec/volumes", Value: volumes},
		{Op: "add", Path: "/spec/initContainers", Value: inits},
		{Op: "add", Path: "/spec/containers", Value: containers},
	}, nil
}

// installer is the init container that copies the helper into the
// emptyDir. It runs in pods whose owners chose their own security and
// quotas, so it asks for the least: what Pod Security "restricted" admits
// whatever the pod-level settings (it sets each checked field itself, so
// that it inherits nothing that could make it fail: a pod running as root,
// or with another seccomp profile), and small requests and limits, which
// ResourceQuotas on cpu or memory limits require of every container. The
// copy is made executable by every user (cmd/csi-fence-prestop), since the
// app containers run as whoever their pod says.
func installer(image string) v1.Container {
	return v1.Container{
		Name:         InitName,
		Image:        image,
		Command:      []string{ImageBinary, "install", HelperPath},
		VolumeMounts: []v1.VolumeMount{{Name: VolumeName, MountPath: MountDir}},
		SecurityContext: &v1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &v1.Capabilities{Drop: []v1.Capability{"ALL"}},
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](InstallUser),
			RunAsGroup:               ptr.To[int64](InstallUser),
			ReadOnlyRootFilesystem:   ptr.To(true),
			SeccompProfile:           &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
		},
		// Measured: the copy of the ~40 MB static binary peaks at ~21 MB
		// resident and takes a few tens of ms of CPU; the memory limit
		// leaves room for the page cache the copy dirties, charged to the
		// container.
		Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("10m"), v1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi")},
		},
	}
}

// rewriteContainer rewrites the container's preStop hook to run through the
// helper; it reports false for a container without a command or HTTP GET
// hook (a sleep or TCP hook carries no reason).
func rewriteContainer(c *v1.Container, d termreason.Delivery, opts MutateOptions) (bool, error) {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return false, nil
	}
	h := c.Lifecycle.PreStop
	args := []string{HelperPath}
	switch {
	case h.Exec != nil:
		args = append(args, "exec", "--env="+d.Env)
		if opts.Timeout != "" {
			args = append(args, "--timeout="+opts.Timeout)
		}
		args = append(append(args, "--"), h.Exec.Command...)
	case h.HTTPGet != nil:
		g := h.HTTPGet
		port, err := resolvePort(g.Port, c)
		if err != nil {
			return false, err
		}
		scheme := string(g.Scheme)
		if scheme == "" {
			scheme = string(v1.URISchemeHTTP)
		}
		args = append(args, "http-get", "--header="+d.Header, "--scheme="+scheme, "--port="+strconv.Itoa(port), "--path="+g.Path)
		if g.Host != "" {
			args = append(args, "--host="+g.Host)
		}
		for _, hh := range g.HTTPHeaders {
			args = append(args, "--http-header="+hh.Name+":"+hh.Value)
		}
		if opts.Timeout != "" {
			args = append(args, "--timeout="+opts.Timeout)
		}
	default:
		return false, nil
	}
	lc := c.Lifecycle.DeepCopy()
	lc.PreStop = &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: args}}
	c.Lifecycle = lc
	c.VolumeMounts = append(append([]v1.VolumeMount(nil), c.VolumeMounts...), v1.VolumeMount{Name: VolumeName, MountPath: MountDir, ReadOnly: true})
	c.Env = append(append([]v1.EnvVar(nil), c.Env...),
		v1.EnvVar{Name: PodNameEnv, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		v1.EnvVar{Name: PodNamespaceEnv, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		v1.EnvVar{Name: PodUIDEnv, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}}})
	if opts.NodeAgentURL != "" {
		c.Env = append(c.Env, v1.EnvVar{Name: NodeAgentURLEnv, Value: opts.NodeAgentURL})
	}
	return true, nil
}

// resolvePort resolves a hook's port as the kubelet does: a number, or the
// name of one of the container's ports.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("container %s: preStop HTTP GET port %d is out of range", c.Name, p.IntVal)
		}
		return int(p.IntVal), nil
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s: preStop HTTP GET port %q is not the name of one of its ports", c.Name, p.StrVal)
}

// InstallUser is the numeric user the installer runs as: distroless's
// nonroot, the image's own USER. Numeric, so that the kubelet can verify
// runAsNonRoot without reading the image.
const InstallUser = 65532
