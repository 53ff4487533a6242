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
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

const image = "example.com/csi-fence-prestop:v1"

// apply applies Mutate's patch (whole-field "add" operations) to a copy.
func apply(t *testing.T, pod *v1.Pod, patch []Patch) *v1.Pod {
	t.Helper()
	out := pod.DeepCopy()
	for _, p := range patch {
		if p.Op != "add" {
			t.Fatalf("unexpected op %+v", p)
		}
		b, _ := json.Marshal(p.Value)
		var target interface{}
		switch p.Path {
		// Each field is replaced whole, as the apiserver's JSON patch
		// does (decoding into the old slice would merge into its elements).
		case "/metadata/annotations":
			out.Annotations, target = nil, &out.Annotations
		case "/spec/volumes":
			out.Spec.Volumes, target = nil, &out.Spec.Volumes
		case "/spec/initContainers":
			out.Spec.InitContainers, target = nil, &out.Spec.InitContainers
		case "/spec/containers":
			out.Spec.Containers, target = nil, &out.Spec.Containers
		default:
			t.Fatalf("unexpected path %s", p.Path)
		}
		if err := json.Unmarshal(b, target); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func optedIn(cs ...v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{termreason.OptInKey: termreason.OptInEnabled}},
		Spec: v1.PodSpec{Containers: cs}}
}

func hook(h v1.LifecycleHandler) *v1.Lifecycle { return &v1.Lifecycle{PreStop: &h} }

func TestMutate(t *testing.T) {
	const agentURL = "http://csi-fence-node-agent.default.svc:8081" + termreason.ServedPath
	execC := v1.Container{Name: "db", Lifecycle: hook(v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"/bin/sh", "-c", "nodetool drain"}}})}
	httpC := v1.Container{Name: "web", Ports: []v1.ContainerPort{{Name: "admin", ContainerPort: 9000}},
		Lifecycle: hook(v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/quit", Port: intstr.FromString("admin"), Host: "localhost",
			HTTPHeaders: []v1.HTTPHeader{{Name: "X-Token", Value: "t"}}}})}
	sleepC := v1.Container{Name: "s", Lifecycle: hook(v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}})}
	plain := v1.Container{Name: "plain"}
	sidecar := v1.Container{Name: "side", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), Lifecycle: hook(v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"flush"}}})}
	for _, tc := range []struct {
		name    string
		pod     func() *v1.Pod
		wantErr string
		// want maps a container name to its rewritten preStop command;
		// nil: no patch at all.
		want map[string][]string
	}{
		{name: "not opted in: untouched", pod: func() *v1.Pod { p := optedIn(execC); p.Labels = nil; return p }},
		{name: "opted in by annotation", pod: func() *v1.Pod {
			p := optedIn(execC)
			p.Labels, p.Annotations = nil, map[string]string{termreason.OptInKey: termreason.OptInEnabled}
			return p
		}, want: map[string][]string{"db": {HelperPath, "exec", "--env=KUBE_POD_TERM_REASON", "--", "/bin/sh", "-c", "nodetool drain"}}},
		{name: "no hook to rewrite: untouched", pod: func() *v1.Pod { return optedIn(plain, sleepC) }},
		{name: "command hook with a renamed variable", pod: func() *v1.Pod {
			p := optedIn(execC, plain)
			p.Annotations = map[string]string{termreason.EnvAnnotation: "WHY"}
			return p
		}, want: map[string][]string{"db": {HelperPath, "exec", "--env=WHY", "--", "/bin/sh", "-c", "nodetool drain"}}},
		{name: "HTTP GET hook with a named port and headers", pod: func() *v1.Pod { return optedIn(httpC) },
			want: map[string][]string{"web": {HelperPath, "http-get", "--header=KUBE-POD-TERM-REASON", "--scheme=HTTP", "--port=9000", "--path=/quit", "--host=localhost", "--http-header=X-Token:t"}}},
		{name: "both kinds, sleep hook left alone, sidecar rewritten", pod: func() *v1.Pod {
			p := optedIn(execC, httpC, sleepC)
			p.Spec.InitContainers = []v1.Container{{Name: "setup"}, sidecar}
			return p
		}, want: map[string][]string{
			"db":   {HelperPath, "exec", "--env=KUBE_POD_TERM_REASON", "--", "/bin/sh", "-c", "nodetool drain"},
			"web":  {HelperPath, "http-get", "--header=KUBE-POD-TERM-REASON", "--scheme=HTTP", "--port=9000", "--path=/quit", "--host=localhost", "--http-header=X-Token:t"},
			"side": {HelperPath, "exec", "--env=KUBE_POD_TERM_REASON", "--", "flush"},
		}},
		{name: "unknown named port: denied", pod: func() *v1.Pod {
			c := httpC.DeepCopy()
			c.Ports = nil
			return optedIn(*c)
		}, wantErr: `port "admin" is not the name`},
		{name: "variable with an HTTP hook: denied", pod: func() *v1.Pod {
			p := optedIn(httpC)
			p.Annotations = map[string]string{termreason.EnvAnnotation: "WHY"}
			return p
		}, wantErr: "only reaches command hooks"},
		{name: "already mutated (reinvocation): untouched", pod: func() *v1.Pod {
			p := optedIn(execC)
			p.Spec.InitContainers = []v1.Container{{Name: InitName}}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod()
			orig := pod.DeepCopy()
			patch, err := Mutate(pod, MutateOptions{Image: image, NodeAgentURL: agentURL})
			if !reflect.DeepEqual(pod, orig) {
				t.Fatalf("Mutate changed its input")
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if patch != nil {
					t.Fatalf("want no patch, got %+v", patch)
				}
				return
			}
			out := apply(t, pod, patch)
			if out.Spec.InitContainers[0].Name != InitName || out.Spec.InitContainers[0].Image != image ||
				!reflect.DeepEqual(out.Spec.InitContainers[0].Command, []string{ImageBinary, "install", HelperPath}) {
				t.Errorf("first init container is not the installer: %+v", out.Spec.InitContainers[0])
			}
			if v := out.Spec.Volumes[len(out.Spec.Volumes)-1]; v.Name != VolumeName || v.EmptyDir == nil {
				t.Errorf("no helper volume: %+v", out.Spec.Volumes)
			}
			all := append(append([]v1.Container(nil), out.Spec.InitContainers...), out.Spec.Containers...)
			for _, c := range all {
				want, rewritten := tc.want[c.Name]
				mounted, hasEnv := false, 0
				for _, m := range c.VolumeMounts {
					mounted = mounted || (m.Name == VolumeName && m.MountPath == MountDir && m.ReadOnly)
				}
				for _, e := range c.Env {
					switch {
					case e.Name == PodNameEnv && e.ValueFrom.FieldRef.FieldPath == "metadata.name",
						e.Name == PodNamespaceEnv && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace",
						e.Name == PodUIDEnv && e.ValueFrom.FieldRef.FieldPath == "metadata.uid",
						e.Name == NodeAgentURLEnv && e.Value == agentURL:
						hasEnv++
					}
				}
				if !rewritten {
					if c.Name != InitName && (mounted || hasEnv > 0) {
						t.Errorf("container %s has no hook to rewrite but was changed: %+v", c.Name, c)
					}
					continue
				}
				if got := c.Lifecycle.PreStop; got.Exec == nil || got.HTTPGet != nil || !reflect.DeepEqual(got.Exec.Command, want) {
					t.Errorf("container %s preStop %+v, want command %q", c.Name, got, want)
				}
				if !mounted || hasEnv != 4 {
					t.Errorf("container %s: helper mounted %v, helper env (pod name, namespace, UID, node agent) %d of 4", c.Name, mounted, hasEnv)
				}
			}
			if again, err := Mutate(out, MutateOptions{Image: image}); err != nil || again != nil {
				t.Errorf("a second pass changed the mutated pod again: %+v, %v", again, err)
			}
		})
	}
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler(MutateOptions{Image: image}))
	defer srv.Close()
	execC := v1.Container{Name: "db", Lifecycle: hook(v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"stop"}}})}
	bad := optedIn(execC)
	bad.Annotations = map[string]string{termreason.EnvAnnotation: "NOT-VALID"}
	for _, tc := range []struct {
		name      string
		pod       *v1.Pod
		allowed   bool
		patched   bool
		wantInMsg string
	}{
		{name: "opted in: patched", pod: optedIn(execC), allowed: true, patched: true},
		{name: "not opted in: allowed as is", pod: &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{execC}}}, allowed: true},
		{name: "invalid settings: denied with the rule", pod: bad, wantInMsg: "not a valid environment variable name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, _ := json.Marshal(tc.pod)
			review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{UID: "u1", Namespace: "ns", Object: runtime.RawExtension{Raw: raw}}}
			b, _ := json.Marshal(review)
			rsp, err := http.Post(srv.URL, "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer rsp.Body.Close()
			var out admissionv1.AdmissionReview
			if err := json.NewDecoder(rsp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			r := out.Response
			if r == nil || r.UID != "u1" || r.Allowed != tc.allowed || (len(r.Patch) > 0) != tc.patched {
				t.Fatalf("response %+v", r)
			}
			if tc.wantInMsg != "" && (r.Result == nil || !strings.Contains(r.Result.Message, tc.wantInMsg)) {
				t.Fatalf("denial %+v lacks %q", r.Result, tc.wantInMsg)
			}
		})
	}
}

// restrictedViolations checks c as Pod Security "restricted" (the latest
// version) checks a container of pod, with the pod's settings inherited
// where the container has none.
func restrictedViolations(pod *v1.Pod, c v1.Container) []string {
	var v []string
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &v1.PodSecurityContext{}
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &v1.SecurityContext{}
	}
	if sc.Privileged != nil && *sc.Privileged {
		v = append(v, "privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		v = append(v, "allowPrivilegeEscalation != false")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		v = append(v, "capabilities do not drop ALL")
	} else if slices.ContainsFunc(sc.Capabilities.Add, func(c v1.Capability) bool { return c != "NET_BIND_SERVICE" }) {
		v = append(v, "capabilities added")
	}
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = psc.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		v = append(v, "runAsNonRoot != true")
	}
	user := sc.RunAsUser
	if user == nil {
		user = psc.RunAsUser
	}
	if user != nil && *user == 0 {
		v = append(v, "runAsUser=0")
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || (seccomp.Type != v1.SeccompProfileTypeRuntimeDefault && seccomp.Type != v1.SeccompProfileTypeLocalhost) {
		v = append(v, "seccompProfile not RuntimeDefault or Localhost")
	}
	return v
}

// restrictedApp is a container that "restricted" admits on its own.
func restrictedApp() v1.Container {
	return v1.Container{Name: "db", Lifecycle: hook(v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"stop"}}}),
		SecurityContext: &v1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
			Capabilities:   &v1.Capabilities{Drop: []v1.Capability{"ALL"}},
			SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}}}
}

// The installer passes Pod Security "restricted" and quotas that require
// limits, whatever the pod sets for itself: a restricted pod stays
// admissible once mutated, and the installer runs as a non-root user of
// its own (the copy it makes is executable by every user, see
// cmd/csi-fence-prestop).
func TestMutateInstallerIsRestricted(t *testing.T) {
	for _, tc := range []struct {
		name string
		psc  *v1.PodSecurityContext
	}{
		{name: "no pod security context"},
		{name: "the pod's own user, group and seccomp profile", psc: &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000),
			FSGroup: ptr.To[int64](2000), RunAsNonRoot: ptr.To(true), SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}},
		{name: "a pod running as root (not restricted itself)", psc: &v1.PodSecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := optedIn(restrictedApp())
			pod.Spec.SecurityContext = tc.psc
			patch, err := Mutate(pod, MutateOptions{Image: image})
			if err != nil {
				t.Fatal(err)
			}
			out := apply(t, pod, patch)
			install := out.Spec.InitContainers[0]
			if install.Name != InitName {
				t.Fatalf("first init container %q", install.Name)
			}
			if v := restrictedViolations(out, install); len(v) > 0 {
				t.Errorf("the installer breaks restricted: %v (%+v)", v, install.SecurityContext)
			}
			sc := install.SecurityContext
			if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != InstallUser || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("the installer does not run as user %d, non-root, on a read-only root: %+v", InstallUser, sc)
			}
			if tc.psc == nil || tc.psc.RunAsNonRoot == nil || *tc.psc.RunAsNonRoot {
				for _, c := range out.Spec.Containers {
					if v := restrictedViolations(out, c); len(v) > 0 {
						t.Errorf("container %s of a restricted pod breaks restricted once mutated: %v", c.Name, v)
					}
				}
			}
			for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
				req, lim := install.Resources.Requests[r], install.Resources.Limits[r]
				if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
					t.Errorf("installer %s request %s, limit %s: want both, request <= limit", r, req.String(), lim.String())
				}
			}
		})
	}
}

// The helper is a Linux binary, and the installer's Linux security
// settings are invalid on a Windows pod: such a pod is denied with the
// reason, not mutated into one the apiserver rejects with another.
func TestMutateRefusesWindowsPods(t *testing.T) {
	pod := optedIn(v1.Container{Name: "db", Lifecycle: hook(v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"stop"}}})})
	pod.Spec.OS = &v1.PodOS{Name: v1.Windows}
	if _, err := Mutate(pod, MutateOptions{Image: image}); err == nil || !strings.Contains(err.Error(), "Linux") {
		t.Fatalf("error %v, want a denial that names Linux", err)
	}
}
