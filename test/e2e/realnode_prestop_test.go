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
	"bufio"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/prestop"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// preStopNegativeEnv selects a negative control of TestRealNodesPreStop,
// which must then fail:
//   - "no-webhook": deploy/kubernetes/prestop is not applied: pods that opt
//     in are created as they are (as while the webhook is down: it fails
//     open), without the helper, and their hooks run without a reason;
//   - "no-node-agent": the node DaemonSet runs without the node agent: the
//     hook of the pod force-deleted while its node was cut off finds no one
//     to ask once its pod is gone, and gets Unknown.
const preStopNegativeEnv = "FENCE_E2E_REAL_PRESTOP_NEGATIVE"

// The namespace of TestRealNodesPreStop's pods: Pod Security "restricted"
// is enforced there.
const preStopNS = "prestop-e2e"

// TestRealNodesPreStop delivers the termination reason to preStop hooks that
// a real kubelet runs, through the webhook deployed as a user deploys it
// (deploy/kubernetes/prestop: its own Deployment, its pod on the second real
// node, its generated certificate written into the MutatingWebhookConfiguration
// by itself) and the mock example with its node agents. Its pods opt in with
// the label the docs give, in a namespace that enforces Pod Security
// "restricted" (issue 19 item 10: the injected init container passes it).
//
//   - A pod terminated gracefully on a live node (`kubectl fence terminate`'s
//     Terminate, with a reason of its own): the webhook injected the
//     installer (which ran, as its non-root user) and rewrote the hook; the
//     real kubelet runs the hook before it signals the container, and the
//     container's log shows the reason, read from the pod's annotation by
//     the helper with the pod's own token.
//   - A StatefulSet writer on the first node, which is then partitioned: the
//     product fences its volume and force-deletes the pod (recording its
//     reason in the node's FencingRequest first), the replacement (the same
//     name, another UID) runs on the second node. While cut off, the old
//     container runs on and no hook has run. Healed, the node's kubelet
//     takes in the deletions it missed and the pod's removal, and stops the
//     container, running its preStop hook first; the helper, its token
//     rejected with its pod, asks the node agent through the node-local
//     Service, which serves the recorded reason: the container's log shows
//     exactly that reason, for the old pod's UID. The kubelet gives the hook
//     either the pod's grace period or 1 s (the force-delete's grace period
//     of 0, floored), whichever deletion it acts on first (killTimes); the
//     writer's shutdown waits for its hook, so that in the second case the
//     hook has the container's 2 s more before the SIGKILL.
func TestRealNodesPreStop(t *testing.T) {
	begin := time.Now()
	ctx, c, nodes := startRealNodesIn(t, framework.Options{ServiceNetwork: true}, framework.RealNodeOptions{ProductImages: true})
	cut, on := nodes[0], nodes[1]
	deployOpts := framework.RealDeployOptions{ControllerNode: on.Name}
	negative := os.Getenv(preStopNegativeEnv)
	switch negative {
	case "":
	case "no-webhook":
	case "no-node-agent":
		deployOpts.NoNodeAgent = true
	default:
		t.Fatalf("%s=%q: want no-webhook or no-node-agent", preStopNegativeEnv, negative)
	}
	if negative != "" {
		t.Logf("NEGATIVE CONTROL %s; this test must fail", negative)
	}
	dep := deployMockExample(ctx, t, c, nodes, deployOpts)
	if !deployOpts.NoNodeAgent {
		if err := c.RouteLocalService(ctx, "default", "csi-fence-node-agent", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	makeRestrictedNamespace(ctx, t, c, preStopNS)
	if negative != "no-webhook" {
		if _, err := c.DeployPreStopWebhook(ctx, on.Name, preStopNS); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("Graceful", func(t *testing.T) {
		testPreStopGraceful(ctx, t, c, cut)
	})
	t.Run("ForceDeletedWhileCutOff", func(t *testing.T) {
		testPreStopCutOff(ctx, t, c, dep, cut, on)
	})
	t.Logf("the test took %.1fs", time.Since(begin).Seconds())
}

// makeRestrictedNamespace creates namespace ns enforcing Pod Security
// "restricted", binds the helper's ClusterRole to its default
// ServiceAccount (as the docs say: a RoleBinding per namespace), and checks
// that the real apiserver enforces the level: a pod that breaks it is
// refused.
func makeRestrictedNamespace(ctx context.Context, t *testing.T, c *framework.Cluster, ns string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-fence-termination-reason-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "csi-fence-termination-reason-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount controller makes "default"; pods need it.
	err = framework.WaitFor(ctx, 60*time.Second, "ServiceAccount default in "+ns, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	root := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runs-as-root"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: framework.WriterImage, ImagePullPolicy: corev1.PullNever}}}}
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, root, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Fatalf("namespace %s enforces Pod Security restricted, yet a pod running as root was not refused by PodSecurity: %v", ns, err)
	}
}

// preStopDone is the file the writer's hook creates once it logged the
// reason, and which the writer waits for on SIGTERM (-prestop-done): its
// shutdown waits for its hook, as a store's waits for the hand-off its
// hook started, until the kubelet's SIGKILL.
const preStopDone = "/tmp/prestop.done"

// writerHook is the writer's own preStop hook: it writes the reason
// variable to the container's log.
var writerHook = []string{"/writer", "-prestop", "-prestop-done=" + preStopDone}

// restrictedSpec makes a writer pod spec what Pod Security "restricted"
// admits, opted in, with the writer's own preStop hook.
func restrictedSpec(spec *corev1.PodSpec, meta *metav1.ObjectMeta, grace int64) {
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	meta.Labels[termreason.OptInKey] = termreason.OptInEnabled // the opt-in, as the docs give it
	spec.AutomountServiceAccountToken = nil                    // the helper reads its pod with the pod's token
	spec.TerminationGracePeriodSeconds = ptr.To(grace)
	spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for i := range spec.Containers {
		ct := &spec.Containers[i]
		ct.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		ct.Args = append(ct.Args, "-prestop-done="+preStopDone)
		ct.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: writerHook}}}
	}
}

// checkInjected checks what the webhook made of pod: the installer first
// among its init containers, with the helper image and what Pod Security
// restricted requires set by itself, and the writer's hook rewritten to run
// through the helper, which knows its pod's UID and its node agent's URL.
func checkInjected(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if len(pod.Spec.InitContainers) == 0 || pod.Spec.InitContainers[0].Name != prestop.InitName {
		t.Errorf("pod %s: no init container %s injected (init containers %v)", pod.Name, prestop.InitName, names(pod.Spec.InitContainers))
		return
	}
	ic := pod.Spec.InitContainers[0]
	if ic.Image != framework.HelperImage {
		t.Errorf("pod %s: the installer's image is %s, want %s", pod.Name, ic.Image, framework.HelperImage)
	}
	if sc := ic.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("pod %s: the installer's securityContext %+v is not what Pod Security restricted requires", pod.Name, ic.SecurityContext)
	}
	w := pod.Spec.Containers[0]
	want := append([]string{prestop.HelperPath, "exec", "--env=" + contract.TerminationReasonEnv, "--"}, writerHook...)
	if w.Lifecycle == nil || w.Lifecycle.PreStop == nil || w.Lifecycle.PreStop.Exec == nil || !slices.Equal(w.Lifecycle.PreStop.Exec.Command, want) {
		t.Errorf("pod %s: the writer's preStop hook is %+v, want exec %q", pod.Name, w.Lifecycle, want)
	}
	env := map[string]bool{}
	for _, e := range w.Env {
		env[e.Name] = true
	}
	for _, e := range []string{prestop.PodUIDEnv, prestop.NodeAgentURLEnv} {
		if !env[e] {
			t.Errorf("pod %s: the writer has no %s", pod.Name, e)
		}
	}
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// preStopLine is what `writer -prestop` logs.
var preStopLine = regexp.MustCompile(`^preStop: ` + contract.TerminationReasonEnv + `=("(?:[^"\\]|\\.)*") \((set|unset)\) uid=(\S*)$`)

// hookRun is one run of the writer's hook, as its container's log shows it.
type hookRun struct {
	at     time.Time
	reason string
	set    bool
	uid    string
}

// hookRuns returns the hook's lines in log.
func hookRuns(log []framework.LogLine) []hookRun {
	var out []hookRun
	for _, l := range log {
		m := preStopLine.FindStringSubmatch(l.Text)
		if m == nil {
			continue
		}
		reason, err := strconv.Unquote(m[1])
		if err != nil {
			continue
		}
		out = append(out, hookRun{at: l.Time, reason: reason, set: m[2] == "set", uid: m[3]})
	}
	return out
}

// waitHookRun waits until the followed log shows the hook's line, then for
// the writer's own last line (it exits on SIGTERM, which the kubelet sends
// after the hook), and returns the hook's run and the log.
func waitHookRun(ctx context.Context, f *framework.ContainerLogFollower, timeout time.Duration) (hookRun, []framework.LogLine, error) {
	var log []framework.LogLine
	var run hookRun
	err := framework.WaitFor(ctx, timeout, "the preStop hook's line in the container's log", func(context.Context) (bool, error) {
		var err error
		if log, err = f.Lines(); err != nil {
			return false, err
		}
		runs := hookRuns(log)
		if len(runs) == 0 {
			return false, nil
		}
		run = runs[0]
		for _, l := range log {
			if strings.HasPrefix(l.Text, "writer: terminated, exiting") {
				return true, nil
			}
		}
		return false, fmt.Errorf("the hook ran, the writer not terminated yet")
	})
	return run, log, err
}

// testPreStopGraceful: a graceful termination on a live node.
func testPreStopGraceful(ctx context.Context, t *testing.T, c *framework.Cluster, node *framework.RealNode) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "graceful", Namespace: preStopNS},
		Spec: corev1.PodSpec{
			NodeName: node.Name,
			Containers: []corev1.Container{{
				Name: "writer", Image: framework.WriterImage, ImagePullPolicy: corev1.PullNever,
				Args:         []string{"-path=/data/writes.log", "-interval=500ms"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	restrictedSpec(&pod.Spec, &pod.ObjectMeta, 10)
	created, err := c.Client.CoreV1().Pods(preStopNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the opted-in pod was not admitted in %s (Pod Security restricted): %v", preStopNS, err)
	}
	checkInjected(t, created)
	running, err := c.WaitWriterRunning(ctx, preStopNS, pod.Name, "", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkInstallerRan(t, running)
	follow := node.FollowContainerLog(ctx, preStopNS, pod.Name, running.UID, "writer")
	t.Cleanup(follow.Stop)
	if err := waitLog(ctx, c, preStopNS, pod.Name, "write 3 to /data/writes.log ok", 60*time.Second); err != nil {
		t.Fatal(err)
	}

	const reason = "Rack 7 retired (e2e)"
	deleted := time.Now()
	if err := termreason.Terminate(ctx, c.Client, preStopNS, pod.Name, reason, -1); err != nil {
		t.Fatal(err)
	}
	run, log, err := waitHookRun(ctx, follow, 60*time.Second)
	if err != nil {
		t.Fatalf("%v; the container's log:\n%s", err, logText(log))
	}
	t.Logf("the real kubelet ran the hook %.1fs after the deletion: %s=%q (set %v) uid=%s",
		run.at.Sub(deleted).Seconds(), contract.TerminationReasonEnv, run.reason, run.set, run.uid)
	if !run.set || run.reason != reason {
		t.Errorf("the hook got %s=%q (set %v), want %q; the container's log:\n%s", contract.TerminationReasonEnv, run.reason, run.set, reason, logText(log))
	}
	if run.uid != string(running.UID) {
		t.Errorf("the hook ran with uid %q, want the pod's %s", run.uid, running.UID)
	}
	err = framework.WaitFor(ctx, 60*time.Second, "pod "+pod.Name+" gone", func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(preStopNS).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if err != nil {
		t.Error(err)
	}
}

// checkInstallerRan checks that the installer ran and exited 0 (the real
// runtime ran it as its non-root user, under RuntimeDefault seccomp).
func checkInstallerRan(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name != prestop.InitName {
			continue
		}
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
			t.Errorf("pod %s: the installer did not complete: %+v", pod.Name, s.State)
		}
		return
	}
	t.Errorf("pod %s: no status of the installer %s (init containers %v)", pod.Name, prestop.InitName, pod.Status.InitContainerStatuses)
}

// testPreStopCutOff: a pod force-deleted while its node was cut off, whose
// hook runs when the node is back.
func testPreStopCutOff(ctx context.Context, t *testing.T, c *framework.Cluster, dep *framework.RealDeployment, cut, on *framework.RealNode) {
	const (
		volume = "vol-prestop-0"
		class  = "fence-prestop"
		grace  = 20
	)
	sts := framework.WriterStatefulSet(realSet, class)
	sts.Namespace = preStopNS
	restrictedSpec(&sts.Spec.Template.Spec, &sts.Spec.Template.ObjectMeta, grace)
	if err := c.StaticVolume(ctx, dep, volume, preStopNS, "data-"+realSet+"-0", class); err != nil {
		t.Fatal(err)
	}
	if err := c.SetUnschedulable(ctx, on.Name, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().StatefulSets(preStopNS).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, err := c.WaitWriterRunning(ctx, preStopNS, realSet+"-0", "", 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if first.Spec.NodeName != cut.Name {
		t.Fatalf("the writer runs on %s, want %s", first.Spec.NodeName, cut.Name)
	}
	if err := c.SetUnschedulable(ctx, on.Name, false); err != nil {
		t.Fatal(err)
	}
	checkInjected(t, first)
	checkInstallerRan(t, first)
	follow := cut.FollowContainerLog(ctx, preStopNS, first.Name, first.UID, "writer")
	t.Cleanup(follow.Stop)
	if err := waitLog(ctx, c, preStopNS, first.Name, "write 3 to /data/writes.log ok", 60*time.Second); err != nil {
		t.Fatal(err)
	}

	partitioned := time.Now()
	if err := c.Node(cut.Name).Partition(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := c.WaitWriterRunning(ctx, preStopNS, first.Name, first.UID, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writer failed over from %s to %s %.1fs after the partition", cut.Name, second.Spec.NodeName, time.Since(partitioned).Seconds())
	if second.Spec.NodeName != on.Name {
		t.Fatalf("the replacement runs on %s, want %s", second.Spec.NodeName, on.Name)
	}

	// What the failover recorded before it force-deleted the pod.
	fr, err := fencingv1alpha1.NewClient(c.Dynamic).Get(ctx, cut.Name)
	if err != nil {
		t.Fatalf("no FencingRequest for %s: %v", cut.Name, err)
	}
	recorded := ""
	for _, p := range fr.Status.ForceDeletedPods {
		if p.UID == first.UID {
			recorded = p.TerminationReason
		}
	}
	if recorded == "" || recorded == termreason.Unknown {
		t.Fatalf("the FencingRequest of %s records no reason for the force-deleted pod %s (uid %s): %+v", cut.Name, first.Name, first.UID, fr.Status.ForceDeletedPods)
	}
	t.Logf("the failover recorded %q for %s (uid %s) before its force-delete", recorded, first.Name, first.UID)

	// Cut off, the node's kubelet knows nothing of it: the old container
	// runs on and no hook ran.
	log, err := follow.Lines()
	if err != nil {
		t.Fatal(err)
	}
	if runs := hookRuns(log); len(runs) > 0 {
		t.Fatalf("the hook ran while %s was cut off: %+v", cut.Name, runs)
	}

	// The kubelet's log from here on says what it saw of the pod once
	// back, and how it stopped it.
	kubeletLog := cut.KubeletLog()
	fi, err := os.Stat(kubeletLog)
	if err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	if err := c.Node(cut.Name).Heal(ctx); err != nil {
		t.Fatal(err)
	}
	run, log, err := waitHookRun(ctx, follow, 2*time.Minute)
	seen, kerr := kubeletPodLines(kubeletLog, fi.Size(), preStopNS+"/"+first.Name, first.UID)
	if kerr != nil {
		t.Error(kerr)
	}
	t.Logf("what the kubelet of %s logged of the old pod after the heal:\n%s", cut.Name, strings.Join(seen, "\n"))
	if err != nil {
		t.Fatalf("%v; the old container's log since the partition:\n%s", err, logText(linesSince(log, partitioned)))
	}
	t.Logf("the real kubelet of %s ran the old pod's hook %.1fs after the heal: %s=%q (set %v) uid=%s",
		cut.Name, run.at.Sub(healed).Seconds(), contract.TerminationReasonEnv, run.reason, run.set, run.uid)
	if !run.set || run.reason != recorded {
		t.Errorf("the hook of the pod force-deleted while %s was cut off got %s=%q (set %v), want the recorded %q",
			cut.Name, contract.TerminationReasonEnv, run.reason, run.set, recorded)
	}
	if run.uid != string(first.UID) {
		t.Errorf("the hook ran with uid %q, want the old pod's %s", run.uid, first.UID)
	}
	if !run.at.After(healed) {
		t.Errorf("the hook ran at %s, before the heal at %s", run.at.Format(time.RFC3339Nano), healed.Format(time.RFC3339Nano))
	}

	// The time the kubelet gave the hook: the shortest grace period among
	// the deletions it acts on. Back in touch, it receives at once what it
	// missed: the eviction's graceful deletion (the pod's own grace), then
	// the force-delete's, which the apiserver writes as
	// deletionGracePeriodSeconds 0 just before it removes the pod, then the
	// removal. If it starts stopping the container before it takes in the
	// grace-0 update, the hook runs with the pod's grace period; if after,
	// with 1 s (the kubelet's floor), then the container gets the 2 s
	// minimum. Either is what a real kubelet does; which one, is a race in
	// it.
	removed, killed, g, err := killTimes(seen, first.UID, "writer")
	switch {
	case err != nil:
		t.Error(err)
	case g == 2:
		t.Logf("the kubelet of %s gave the hook 1s (it took in the force-delete's grace 0 first), the container 2s after it (%.1fs from the pod's removal to the signal); the writer waited for its hook",
			cut.Name, killed.Sub(removed).Seconds())
		if d := killed.Sub(removed); d > 3*time.Second {
			t.Errorf("the kubelet signalled the old writer %.1fs after it removed the pod, with 2s left: it gave the hook more than the 1s of a grace period of 0", d.Seconds())
		}
	default:
		hook := int(killed.Sub(removed).Seconds())
		t.Logf("the kubelet of %s gave the hook the pod's grace period: it ran %ds, the container had %ds left (terminationGracePeriodSeconds %d)", cut.Name, hook, g, grace)
		if g+hook < grace-1 || g+hook > grace+1 {
			t.Errorf("the kubelet stopped the old writer with %ds left %ds after it removed the pod: neither the pod's %ds nor the 1s of a grace period of 0", g, hook, grace)
		}
	}
}

// linesSince returns the lines stamped at or after t.
func linesSince(log []framework.LogLine, t time.Time) []framework.LogLine {
	var out []framework.LogLine
	for _, l := range log {
		if !l.Time.Before(t) {
			out = append(out, l)
		}
	}
	return out
}

// kubeletPodLines returns the lines of the kubelet's log from offset on
// that say what it saw of pod (namespace/name, uid) and how it stopped it.
func kubeletPodLines(path string, offset int64, pod string, uid types.UID) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, `"`+pod+`"`) && !strings.Contains(l, string(uid)) {
			continue
		}
		for _, k := range []string{"SyncLoop", "PreStop", "lifecycle hook", "Killing container"} {
			if strings.Contains(l, k) {
				if len(l) > 400 {
					l = l[:400] + "..."
				}
				out = append(out, l)
				break
			}
		}
	}
	return out, sc.Err()
}

// killTimes reads, from the kubelet's lines about the pod (kubeletPodLines),
// when it took in the pod's removal and when it signalled container after
// its preStop hook, with the grace period it gave it then ("Killing
// container with a grace period", --v=2).
func killTimes(lines []string, uid types.UID, container string) (removed, killed time.Time, grace int, err error) {
	at := func(l string) (time.Time, error) {
		// klog's header: Lmmdd hh:mm:ss.uuuuuu
		f := strings.Fields(l)
		if len(f) < 2 {
			return time.Time{}, fmt.Errorf("no time in %q", l)
		}
		return time.Parse("15:04:05.000000", f[1])
	}
	re := regexp.MustCompile(`gracePeriod=(\d+)`)
	for _, l := range lines {
		switch {
		case strings.Contains(l, `"SyncLoop REMOVE"`) && removed.IsZero():
			if removed, err = at(l); err != nil {
				return
			}
		case strings.Contains(l, "Killing container with a grace period") && strings.Contains(l, string(uid)) &&
			strings.Contains(l, `containerName="`+container+`"`):
			m := re.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			if killed, err = at(l); err != nil {
				return
			}
			grace, err = strconv.Atoi(m[1])
			if removed.IsZero() {
				err = fmt.Errorf("the kubelet signalled container %s before it took in the pod's removal", container)
			}
			return
		}
	}
	err = fmt.Errorf("the kubelet's log has no removal of the pod and signal of container %s (uid %s)", container, uid)
	return
}
