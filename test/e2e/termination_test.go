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
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/prestop"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
	"github.com/csi-fence/fence-attacher/test/kubeletsim"
)

// termEnv is what the termination reason tests share: the webhook, two
// nodes with a simulated kubelet running preStop hooks each, and a local
// HTTP server that records the headers HTTP GET hooks bring.
type termEnv struct {
	ps      *framework.PreStop
	nodes   []string
	runners map[string]*kubeletsim.PreStopRunner
	hooks   *headerRecorder
}

var (
	termOnce sync.Once
	termErr  error
	term     termEnv
)

const termGroup = "term"

func termSetup(t *testing.T) *termEnv {
	t.Helper()
	termOnce.Do(func() {
		ctx := context.Background()
		if term.ps, termErr = cluster.StartPreStop(ctx); termErr != nil {
			return
		}
		// tr-0 runs the workloads, tr-1 is the node the taint test taints,
		// tr-2's kubelet is the one whose API is unreachable.
		for i := 0; i < 3; i++ {
			name := fmt.Sprintf("tr-%d", i)
			if termErr = cluster.CreateNode(ctx, name); termErr != nil {
				return
			}
			patch := []byte(`{"metadata":{"labels":{"fence-e2e/group":"` + termGroup + `-` + name + `"}}}`)
			if _, termErr = cluster.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); termErr != nil {
				return
			}
			if termErr = cluster.WaitNodeReady(ctx, name, true, 30*time.Second); termErr != nil {
				return
			}
			if termErr = cluster.WaitTaint(ctx, name, corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule, false, 30*time.Second); termErr != nil {
				return
			}
			term.nodes = append(term.nodes, name)
		}
		term.runners = map[string]*kubeletsim.PreStopRunner{}
		for _, n := range term.nodes[:2] {
			if term.runners[n], termErr = term.ps.RunPreStopHooks(ctx, n, nil); termErr != nil {
				return
			}
		}
		term.hooks, termErr = newHeaderRecorder()
	})
	if termErr != nil {
		t.Fatal(termErr)
	}
	return &term
}

// headerRecorder is the HTTP side of HTTP GET hooks: GET /stop/NAME records
// the request's headers under NAME.
type headerRecorder struct {
	port int
	mu   sync.Mutex
	got  map[string]http.Header
}

func newHeaderRecorder() (*headerRecorder, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &headerRecorder{port: l.Addr().(*net.TCPAddr).Port, got: map[string]http.Header{}}
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.mu.Lock()
			h.got[strings.TrimPrefix(r.URL.Path, "/stop/")] = r.Header.Clone()
			h.mu.Unlock()
		}))
	}()
	return h, nil
}

func (h *headerRecorder) header(name string) (http.Header, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.got[name]
	return v, ok
}

// termNamespace makes a namespace whose default ServiceAccount may read
// what the helper reads (deploy/'s ClusterRole, bound by a RoleBinding as
// the README says).
func termNamespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "termination-reason-reader", Namespace: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "csi-fence-termination-reason-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: name}}}
	if _, err := cluster.Client.RbacV1().RoleBindings(name).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 30*time.Second, "default ServiceAccount of "+name, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	return name
}

// Hook kinds of the workloads.
const (
	execHook = "exec"
	httpHook = "http"
)

// optedInTemplate is a pod template that asks for the reason in its hook on
// node: a command hook that prints the variable, or an HTTP GET hook to the
// recorder.
func (e *termEnv) optedInTemplate(ns, node, hook string, annotations map[string]string) corev1.PodTemplateSpec {
	lc := &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{}}
	switch hook {
	case execHook:
		env := annotations[termreason.EnvAnnotation]
		if env == "" {
			env = "KUBE_POD_TERM_REASON"
		}
		lc.PreStop.Exec = &corev1.ExecAction{Command: []string{"/bin/sh", "-c", `printf 'reason=%s' "$` + env + `"`}}
	case httpHook:
		// The recorder files the headers under the namespace, one per test.
		lc.PreStop.HTTPGet = &corev1.HTTPGetAction{Host: "127.0.0.1", Port: intstr.FromInt(e.hooks.port), Path: "/stop/" + ns}
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{termreason.OptInKey: termreason.OptInEnabled}, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"fence-e2e/group": termGroup + "-" + node},
			TerminationGracePeriodSeconds: ptr.To[int64](20),
			Containers:                    []corev1.Container{{Name: "app", Image: "busybox", Lifecycle: lc}},
		},
	}
}

// waitHeld waits until the pod runs and the simulated kubelet holds it (its
// hook will run on deletion), and returns it.
func waitHeld(ctx context.Context, t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	if err := framework.WaitFor(ctx, 60*time.Second, "pod "+ns+"/"+name+" running with its hook held", func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		held := false
		for _, f := range p.Finalizers {
			held = held || f == kubeletsim.PreStopFinalizer
		}
		return held && p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		t.Fatal(err)
	}
	return pod
}

// hookReason waits for the pod's hook to run and returns the reason it got.
func (e *termEnv) hookReason(ctx context.Context, t *testing.T, pod *corev1.Pod, hook string) (string, kubeletsim.HookRun) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	run, err := e.runners[pod.Spec.NodeName].WaitRun(ctx, pod.Namespace, pod.Name, "app")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("preStop hook of %s: %q, took %v, err %v, output %q", pod.Name, run.Command, run.Took, run.Err, run.Output)
	if len(run.Command) == 0 || run.Command[0] != e.ps.Helper {
		t.Fatalf("the hook did not run through the helper (not rewritten by the webhook?): %q", run.Command)
	}
	if run.Err != nil {
		t.Fatalf("the hook failed: %v: %s", run.Err, run.Output)
	}
	switch hook {
	case execHook:
		reason, ok := strings.CutPrefix(run.Output, "reason=")
		if !ok {
			// The helper logs to stderr before it execs the hook.
			i := strings.LastIndex(run.Output, "reason=")
			if i < 0 {
				t.Fatalf("the hook printed no reason: %q", run.Output)
			}
			reason = run.Output[i+len("reason="):]
		}
		return reason, run
	default:
		h, ok := e.hooks.header(pod.Namespace)
		if !ok {
			t.Fatalf("the HTTP hook never reached the server")
		}
		return h.Get(prestop.DefaultHeader), run
	}
}

// The reason of each kind of termination reaches the pod's preStop hook,
// each produced by the real component that causes it, through the webhook
// the real apiserver calls and the helper the simulated kubelet runs.
func TestTerminationReasons(t *testing.T) {
	e := termSetup(t)
	ctx := context.Background()
	apps := cluster.Client.AppsV1()
	for _, tc := range []struct {
		name string
		hook string
		ann  map[string]string
		// setup creates the workload in ns on node and returns the pod
		// whose hook is checked once terminate has run.
		setup     func(ctx context.Context, t *testing.T, ns, node string, tmpl corev1.PodTemplateSpec) string
		terminate func(ctx context.Context, t *testing.T, ns, pod string)
		node      int
		want      string
	}{
		{
			name: "StatefulSet scaled down: Decommissioned", hook: execHook, want: termreason.Decommissioned,
			setup: func(ctx context.Context, t *testing.T, ns, node string, tmpl corev1.PodTemplateSpec) string {
				createStatefulSet(ctx, t, ns, 2, tmpl)
				waitHeld(ctx, t, ns, "db-0")
				return "db-1"
			},
			terminate: func(ctx context.Context, t *testing.T, ns, _ string) { scaleStatefulSet(ctx, t, ns, 1) },
		},
		{
			name: "StatefulSet rolling update: Update", hook: execHook, want: termreason.Update,
			setup: func(ctx context.Context, t *testing.T, ns, node string, tmpl corev1.PodTemplateSpec) string {
				createStatefulSet(ctx, t, ns, 1, tmpl)
				return "db-0"
			},
			terminate: func(ctx context.Context, t *testing.T, ns, _ string) {
				patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"e2e/version":"2"}}}}}`)
				if _, err := apps.StatefulSets(ns).Patch(ctx, "db", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "Deployment rolling update: Update", hook: execHook, want: termreason.Update,
			setup: func(ctx context.Context, t *testing.T, ns, node string, tmpl corev1.PodTemplateSpec) string {
				tmpl.Labels["app"] = "web"
				d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: tmpl}}
				if _, err := apps.Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				return onlyPod(ctx, t, ns, "app=web")
			},
			terminate: func(ctx context.Context, t *testing.T, ns, _ string) {
				patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"e2e/version":"2"}}}}}`)
				if _, err := apps.Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "DaemonSet rolling update: Update", hook: execHook, want: termreason.Update,
			setup: func(ctx context.Context, t *testing.T, ns, node string, tmpl corev1.PodTemplateSpec) string {
				tmpl.Labels["app"] = "agent"
				ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Spec: appsv1.DaemonSetSpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: tmpl}}
				if _, err := apps.DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				return onlyPod(ctx, t, ns, "app=agent")
			},
			terminate: func(ctx context.Context, t *testing.T, ns, _ string) {
				patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"e2e/version":"2"}}}}}`)
				if _, err := apps.DaemonSets(ns).Patch(ctx, "agent", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "eviction API: Eviction, in the header of an HTTP GET hook", hook: httpHook, want: termreason.Eviction,
			setup: createBarePod,
			terminate: func(ctx context.Context, t *testing.T, ns, pod string) {
				ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}}
				if err := cluster.Client.CoreV1().Pods(ns).EvictV1(ctx, ev); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "NoExecute taint not tolerated: IntolerableTaint, in a renamed variable", hook: execHook, node: 1,
			ann: map[string]string{termreason.EnvAnnotation: "WHY_AM_I_STOPPED"}, want: termreason.IntolerableTaint,
			setup: createBarePod,
			terminate: func(ctx context.Context, t *testing.T, ns, pod string) {
				node := e.nodes[1]
				taint := corev1.Taint{Key: "e2e.csi-fence.io/evict", Value: ns, Effect: corev1.TaintEffectNoExecute}
				if err := cluster.AddTaint(ctx, node, taint); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = cluster.RemoveTaint(context.Background(), node, taint.Key) })
			},
		},
		{
			name: "kubectl fence terminate: the free-form reason", hook: execHook, want: "Rack 7 retired (ticket OPS-42)",
			setup: createBarePod,
			terminate: func(ctx context.Context, t *testing.T, ns, pod string) {
				out, err := exec.CommandContext(ctx, e.ps.Plugin, "terminate", "pod/"+pod, "-n", ns, "--reason=Rack 7 retired (ticket OPS-42)",
					"--kubeconfig="+cluster.Kubeconfig).CombinedOutput()
				if err != nil {
					t.Fatalf("kubectl-fence: %v: %s", err, out)
				}
				t.Logf("kubectl-fence: %s", out)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := termNamespace(ctx, t, fmt.Sprintf("term-%d-%d", len(tc.name), time.Now().UnixNano()%100000))
			node := e.nodes[tc.node]
			name := tc.setup(ctx, t, ns, node, e.optedInTemplate(ns, node, tc.hook, tc.ann))
			pod := waitHeld(ctx, t, ns, name)
			if pod.Spec.InitContainers[0].Name != prestop.InitName {
				t.Fatalf("the webhook did not mutate the pod: %+v", pod.Spec.InitContainers)
			}
			tc.terminate(ctx, t, ns, name)
			got, _ := e.hookReason(ctx, t, pod, tc.hook)
			if got != tc.want {
				t.Fatalf("the preStop hook got reason %q, want %q", got, tc.want)
			}
		})
	}
}

// onlyPod waits for the one pod of ns that selector selects, and returns
// its name.
func onlyPod(ctx context.Context, t *testing.T, ns, selector string) string {
	t.Helper()
	var name string
	if err := framework.WaitFor(ctx, 60*time.Second, "the pod "+selector, func(ctx context.Context) (bool, error) {
		pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		name = pods.Items[0].Name
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return name
}

func createStatefulSet(ctx context.Context, t *testing.T, ns string, replicas int32, tmpl corev1.PodTemplateSpec) {
	t.Helper()
	tmpl.Labels["app"] = "db"
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: tmpl}}
	if _, err := cluster.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func scaleStatefulSet(ctx context.Context, t *testing.T, ns string, replicas int32) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	if _, err := cluster.Client.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createBarePod(ctx context.Context, t *testing.T, ns, node string, tmpl corev1.PodTemplateSpec) string {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Name, pod.Namespace = "app", ns
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return "app"
}

// The helper's bound: with an API that accepts connections and never
// answers (the worst case: nothing fails fast), the original hook still runs,
// well within the pod's grace period, and the reason is Unknown.
func TestTerminationReasonAPIUnreachable(t *testing.T) {
	e := termSetup(t)
	ctx := context.Background()
	ns := termNamespace(ctx, t, fmt.Sprintf("term-unreachable-%d", time.Now().UnixNano()%100000))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never read, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	kubeconfig := filepath.Join(t.TempDir(), "unreachable.kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://" + l.Addr().String(), InsecureSkipTLSVerify: true}
	cfg.AuthInfos["dead"] = &clientcmdapi.AuthInfo{Token: "x"}
	cfg.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: "dead"}
	cfg.CurrentContext = "dead"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	node := e.nodes[2]
	runner, err := e.ps.RunPreStopHooks(ctx, node, func(context.Context, *corev1.Pod) ([]string, error) {
		return []string{"KUBECONFIG=" + kubeconfig}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Stop()
	e.runners[node] = runner
	defer delete(e.runners, node)
	const grace = 10
	tmpl := e.optedInTemplate(ns, node, execHook, nil)
	tmpl.Spec.TerminationGracePeriodSeconds = ptr.To[int64](grace)
	name := createBarePod(ctx, t, ns, node, tmpl)
	pod := waitHeld(ctx, t, ns, name)
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, run := e.hookReason(ctx, t, pod, execHook)
	if got != termreason.Unknown {
		t.Errorf("reason %q with the API unreachable, want %q", got, termreason.Unknown)
	}
	// The helper's bound is prestop.DefaultTimeout; the original hook is
	// a printf: the whole hook must end well before the grace period (a
	// margin for starting processes on a loaded machine), and must have
	// waited for the API at least its bound (else it never tried).
	if limit := prestop.DefaultTimeout + 5*time.Second; run.Took > limit || run.Took < prestop.DefaultTimeout {
		t.Errorf("the hook took %v with the API unreachable, want between %v and %v (grace period %ds)", run.Took, prestop.DefaultTimeout, limit, grace)
	}
	mu.Lock()
	n := len(held)
	mu.Unlock()
	if n == 0 {
		t.Errorf("the helper never tried the unreachable API: the test proves nothing")
	}
}

// This system's own failover: the pod GC force-deletes the pod of a node
// that is cut off, after the fence, recording its reason in the node's
// FencingRequest first. The pod is gone from the API at once (nothing holds
// a force-deleted pod) and its replacement runs elsewhere. When the node
// comes back, its kubelet stops the pod's containers, which still ran: the
// hook's helper cannot read its pod (gone, and the ServiceAccount token
// bound to it rejected) and asks the node's agent, which serves the reason
// from the record. The pod's DisruptionTarget alone, had the pod been
// readable, would give the same; with the pod gone, nothing else would.
func TestTerminationReasonFailover(t *testing.T) {
	e := termSetup(t)
	ctx := context.Background()
	// The scenario's pods run in the default namespace with its default
	// ServiceAccount, whose denials the suite's RBAC check reports: grant
	// the helper's reads as the README says.
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "termination-reason-reader-tf", Namespace: "default"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "csi-fence-termination-reason-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: "default"}}}
	if _, err := cluster.Client.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cluster.Client.RbacV1().RoleBindings("default").Delete(context.Background(), rb.Name, metav1.DeleteOptions{})
	}()
	env, err := scenario.SetupWith(ctx, cluster, product, tLogger{t}, scenario.Options{Prefix: "tf", Nodes: 3, Replicas: 1,
		Template: func(tmpl *corev1.PodTemplateSpec) {
			tmpl.Labels[termreason.OptInKey] = termreason.OptInEnabled
			tmpl.Spec.TerminationGracePeriodSeconds = ptr.To[int64](20)
			tmpl.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
				Command: []string{"/bin/sh", "-c", `printf 'reason=%s' "$KUBE_POD_TERM_REASON"`}}}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Each node's pods reach the agent of their node, wherever it listens
	// now (the Service's stand-in).
	e.ps.NodeAgentURL = func(node string) string {
		return "http://" + product.Nodes[node].Plugins[0].AgentHTTP + termreason.ServedPath
	}
	defer func() { e.ps.NodeAgentURL = nil }()
	runners := map[string]*kubeletsim.PreStopRunner{}
	for _, n := range env.Nodes {
		if runners[n], err = e.ps.RunPreStopHooks(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, r := range runners {
			r.Stop()
		}
	}()
	victim, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pod := waitHeld(ctx, t, env.NS, env.PodName(0))
	// The webhook told the helper where its node's agent is.
	if !slices.ContainsFunc(pod.Spec.Containers[0].Env, func(v corev1.EnvVar) bool {
		return v.Name == prestop.NodeAgentURLEnv && v.Value == framework.NodeAgentServiceURL
	}) {
		t.Fatalf("the webhook gave the container no %s=%s: %+v", prestop.NodeAgentURLEnv, framework.NodeAgentServiceURL, pod.Spec.Containers[0].Env)
	}
	// Cut off: the heartbeat, the kubelet and the node agent stop; the
	// containers and the plugin go on.
	if err := cluster.Node(victim).Partition(ctx); err != nil {
		t.Fatal(err)
	}
	product.Nodes[victim].Partition()
	runners[victim].Stop()
	var recorded string
	if err := framework.WaitFor(ctx, 120*time.Second, "the pod force-deleted by the failover and gone from the API", func(ctx context.Context) (bool, error) {
		if recorded == "" {
			if fr, err := fencingv1alpha1.NewClient(cluster.Dynamic).Get(ctx, victim); err == nil {
				if p, ok := fencerecord.ForceDeletedPodReason(fr, pod.UID); ok {
					recorded = p.TerminationReason
				}
			}
		}
		p, err := cluster.Client.CoreV1().Pods(env.NS).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID), nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("force-deleted by the failover; reason recorded in FencingRequest %s: %q", victim, recorded)
	if recorded != termreason.IntolerableTaint {
		t.Fatalf("the failover recorded %q for the pod, want %q (the taint manager marked it)", recorded, termreason.IntolerableTaint)
	}
	// Nothing holds the force-deleted pod: its replacement runs while the
	// node is still cut off.
	if _, err := env.WaitAttached(ctx, 0, victim, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	if runs := runners[victim].Runs(); len(runs) != 0 {
		t.Fatalf("hooks ran on the node while it was cut off: %+v", runs)
	}
	if err := env.PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := e.ps.ResumePreStopHooks(victim, runners[victim]); err != nil {
		t.Fatal(err)
	}
	hookCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	run, err := runners[victim].WaitRun(hookCtx, pod.Namespace, pod.Name, "db")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("preStop hook of %s: %q, took %v, err %v, output %q", pod.Name, run.Command, run.Took, run.Err, run.Output)
	i := strings.LastIndex(run.Output, "reason=")
	if run.Err != nil || i < 0 || run.Command[0] != e.ps.Helper || run.UID != pod.UID {
		t.Fatalf("the hook did not run through the helper: %+v", run)
	}
	if got := run.Output[i+len("reason="):]; got != recorded {
		t.Fatalf("the hook got %q; the failover recorded %q", got, recorded)
	}
	if !strings.Contains(run.Output, "node agent") {
		t.Fatalf("the reason did not come from the node's agent: %q", run.Output)
	}
	// The replacement runs and the node is released, as after any failover.
	if _, err := env.WaitAttached(ctx, 0, "", 120*time.Second); err != nil {
		t.Fatal(err)
	}
	expectReleased(ctx, t, victim, fencedVolume{product.Driver, env.Volumes[0]})
	// Nothing left for later tests: the StatefulSet's pods go through their
	// hooks while the runners still run.
	if err := cluster.Client.AppsV1().StatefulSets(env.NS).Delete(ctx, env.App, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "the scenario's pods gone", func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Pods(env.NS).Get(ctx, env.PodName(0), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal(err)
	}
	expectNoViolations(t)
}

// The seed's delivery rules, enforced by the webhook the real apiserver
// calls: a pod that breaks one is denied at creation with the rule in the
// message, and one that follows them is admitted.
func TestTerminationReasonDeliveryRules(t *testing.T) {
	e := termSetup(t)
	ctx := context.Background()
	ns := termNamespace(ctx, t, fmt.Sprintf("term-rules-%d", time.Now().UnixNano()%100000))
	for _, tc := range []struct {
		name    string
		hook    string
		ann     map[string]string
		wantErr string
	}{
		{name: "a variable for an HTTP GET hook", hook: httpHook, ann: map[string]string{termreason.EnvAnnotation: "WHY"}, wantErr: "a variable only reaches command hooks"},
		{name: "a header for a command hook", hook: execHook, ann: map[string]string{termreason.HeaderAnnotation: "X-Why"}, wantErr: "a header only reaches HTTP GET hooks"},
		{name: "both", hook: execHook, ann: map[string]string{termreason.EnvAnnotation: "WHY", termreason.HeaderAnnotation: "X-Why"}, wantErr: "not both"},
		{name: "an invalid variable name", hook: execHook, ann: map[string]string{termreason.EnvAnnotation: "WHY-NOT"}, wantErr: "not a valid environment variable name"},
		{name: "an invalid header name", hook: httpHook, ann: map[string]string{termreason.HeaderAnnotation: "X Why"}, wantErr: "not a valid HTTP header name"},
		{name: "a valid renamed header", hook: httpHook, ann: map[string]string{termreason.HeaderAnnotation: "X-Why"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := e.optedInTemplate(ns, e.nodes[0], tc.hook, tc.ann)
			pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
			pod.Namespace, pod.Name = ns, "rules"
			got, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				if got.Spec.InitContainers[0].Name != prestop.InitName || !slices.Contains(got.Spec.Containers[0].Lifecycle.PreStop.Exec.Command, "--header=X-Why") {
					t.Fatalf("not mutated with the renamed header: %+v", got.Spec.Containers[0].Lifecycle.PreStop)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "csi-fence-prestop") {
				t.Fatalf("error %v, want the webhook's denial with %q", err, tc.wantErr)
			}
			t.Logf("denied as expected: %v", err)
		})
	}
}

// An opted-in pod that Pod Security "restricted" admits is still admitted
// once the webhook added its installer: the real apiserver's PodSecurity
// admission (on by default) checks the mutated pod in a namespace that
// enforces restricted, and the pod runs and gets its reason as anywhere.
func TestTerminationReasonPodSecurityRestricted(t *testing.T) {
	e := termSetup(t)
	ctx := context.Background()
	ns := termNamespace(ctx, t, fmt.Sprintf("term-restricted-%d", time.Now().UnixNano()%100000))
	patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted","pod-security.kubernetes.io/enforce-version":"latest"}}}`)
	if _, err := cluster.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	tmpl := e.optedInTemplate(ns, e.nodes[0], execHook, nil)
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Namespace, pod.Name = ns, "app"
	pods := cluster.Client.CoreV1().Pods(ns)

	// The namespace enforces: the app as it is (no security context) is
	// denied by PodSecurity, else the test below would prove nothing.
	if _, err := pods.Create(ctx, pod.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("a pod that is not restricted was not denied by PodSecurity: %v", err)
	}

	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a restricted opted-in pod was denied once mutated: %v", err)
	}
	if len(created.Spec.InitContainers) == 0 || created.Spec.InitContainers[0].Name != prestop.InitName {
		t.Fatalf("the webhook did not mutate the pod: %+v", created.Spec.InitContainers)
	}
	install := created.Spec.InitContainers[0]
	t.Logf("admitted; the installer runs as user %d, limits cpu %s memory %s",
		*install.SecurityContext.RunAsUser, install.Resources.Limits.Cpu(), install.Resources.Limits.Memory())
	held := waitHeld(ctx, t, ns, pod.Name)
	const reason = "Restricted namespace drained"
	if err := termreason.Terminate(ctx, cluster.Client, ns, pod.Name, reason, -1); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.hookReason(ctx, t, held, execHook); got != reason {
		t.Fatalf("the preStop hook got reason %q, want %q", got, reason)
	}
}

// The webhook fails open: while it is down, the apiserver admits an
// opted-in pod unmodified (its hooks run without a reason) instead of
// refusing pods; restarted with a new CA, it writes that CA into its
// configuration and the apiserver mutates through it again.
func TestTerminationReasonWebhookFailsOpen(t *testing.T) {
	e := termSetup(t)
	ctx := context.Background()
	e.ps.StopWebhook()
	defer func() {
		if err := e.ps.RestartWebhook(ctx); err != nil {
			t.Fatalf("the webhook did not come back: %v", err)
		}
	}()
	mutated, err := e.ps.MutatesPods(ctx)
	if err != nil {
		t.Fatalf("an opted-in pod was refused while the webhook is down: %v", err)
	}
	if mutated {
		t.Fatalf("an opted-in pod was mutated with the webhook stopped: the test proves nothing")
	}
}

// The webhook's manifests as users apply them (`kubectl apply -k
// deploy/kubernetes/prestop`) pass the real apiserver's strict validation
// (server-side dry run: here the webhook runs as a process, not a pod).
func TestTerminationReasonDeployManifests(t *testing.T) {
	objs, err := cluster.ApplyKustomization(context.Background(), "deploy/kubernetes/prestop", framework.ApplyOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	for _, k := range []string{"Deployment", "Service", "MutatingWebhookConfiguration", "ClusterRole", "ServiceAccount"} {
		if !kinds[k] {
			t.Errorf("deploy/kubernetes/prestop has no %s", k)
		}
	}
}
