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
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fenceview"
	"github.com/csi-fence/fence-attacher/pkg/protection"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// buildKubectlFence builds the plugin for a test.
func buildKubectlFence(ctx context.Context, t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := framework.BuildCommands(ctx, dir, "./cmd/kubectl-fence"); err != nil {
		t.Fatalf("building kubectl-fence: %v", err)
	}
	return filepath.Join(dir, "kubectl-fence")
}

// explainOf runs `kubectl fence explain ARGS -o json` with the control
// plane's node-monitor grace period (10s) and returns its answer.
func explainOf(t *testing.T, bin string, args ...string) *fenceview.Explanation {
	t.Helper()
	var x fenceview.Explanation
	out := kubectlFence(t, bin, false, append(append([]string{"explain"}, args...), "-o", "json", "--node-monitor-grace-period=10s")...)
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatalf("explain -o json: %v\n%s", err, out)
	}
	return &x
}

// kubectl fence explain on the real apiserver, with the product running
// (its registration says its configuration: the gate on, backends
// storage,power,out-of-service, --timeout=5s): each reason the failover has
// not to move a pod, and each backend that moves one, one pod per row, its
// driver and its node's backend as the table says. The gate off and no
// sidecar at all are the unit tests' (pkg/fenceview): this cluster's
// product is on.
func TestExplainOnRealAPIServer(t *testing.T) {
	ctx := context.Background()
	bin := buildKubectlFence(ctx, t)
	const ns = "xr"
	c := cluster.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Drivers with no sidecar of the product: not SafeDetach; SafeDetach
	// without any fence; SafeDetach fencing on the out-of-service taint.
	// None attaches (attachRequired false): no VolumeAttachment but those
	// the test writes.
	const nosafe, mute, oos = "nosafe.xr.csi", "mute.xr.csi", "oos.xr.csi"
	for name, ann := range map[string]map[string]string{
		nosafe: nil,
		mute:   {contract.SafeDetachAnnotation: contract.SafeDetachTrue},
		oos:    {contract.SafeDetachAnnotation: contract.SafeDetachTrue, contract.FencesOnOutOfServiceAnnotation: "true"},
	} {
		d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}
		if _, err := c.StorageV1().CSIDrivers().Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.StorageV1().CSIDrivers().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	// Nodes: one plain, one with a power switch (a FenceAgentConfig lists
	// it), one with an out-of-service fence, one without, one cordoned, one
	// of the control plane.
	nodes := map[string]map[string]string{
		"xr-plain": nil, "xr-power": nil, "xr-oos": nil, "xr-oos-bare": nil, "xr-cordoned": nil,
		"xr-cp": {"node-role.kubernetes.io/control-plane": ""},
	}
	for n, labels := range nodes {
		if err := cluster.CreateLabelledNode(ctx, n, labels, framework.DriverName); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	// The product's volumes are attached on xr-plain only, which runs the
	// mock's node instance (the array knows it); elsewhere the rows use
	// drivers that attach nothing, or no volume.
	if _, err := product.StartNode(ctx, "xr-plain"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { product.RemoveNode("xr-plain") })
	for n := range nodes {
		if err := cluster.WaitNodeReady(ctx, n, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := cordon(ctx, "xr-cordoned", true); err != nil {
		t.Fatal(err)
	}
	cfg := &fencingv1alpha1.FenceAgentConfig{ObjectMeta: metav1.ObjectMeta{Name: "xr-rack"}, Spec: fencingv1alpha1.FenceAgentConfigSpec{
		Agent: "fence_xr", Nodes: []fencingv1alpha1.FenceAgentNode{{Name: "xr-power"}},
		Timeouts: &fencingv1alpha1.FenceAgentTimeouts{CallTimeoutSeconds: 20, ConfirmTimeoutSeconds: 40}}}
	u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(cfg)
	if err != nil {
		t.Fatal(err)
	}
	configs := cluster.Dynamic.Resource(fencingv1alpha1.FenceAgentConfigResource)
	if _, err := configs.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = configs.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })

	// A claim bound to a volume of driver, with access mode.
	claim := func(name, driver string, mode corev1.PersistentVolumeAccessMode) string {
		handle := "xr-" + name
		pv := scenario.StaticPV(product.Driver, handle, &corev1.ObjectReference{Namespace: ns, Name: name})
		pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{mode}
		pv.Spec.CSI.Driver = driver
		if driver == framework.DriverName {
			if err := product.Driver.Array.AddVolume(handle, 1<<30); err != nil {
				t.Fatal(err)
			}
		}
		if driver != "" {
			if _, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode}, VolumeName: handle, StorageClassName: ptr.To(pv.Spec.StorageClassName),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if driver == "" {
			pvc.Spec.VolumeName, pvc.Spec.StorageClassName = "", ptr.To("xr-none")
		}
		if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return name
	}
	pvcVol := func(claim string) corev1.Volume {
		return corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
	}
	emptyDir := corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	nfs := corev1.Volume{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/share"}}}
	evictAfter2s := []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](2)}}
	forever := []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}

	rows := []struct {
		pod, node, driver string
		vols              []corev1.Volume
		tolerations       []corev1.Toleration
		labels            map[string]string
		// want: the backend when protected, else the reason; after is
		// the time to failover when protected: grace 10s + 2s + the fence.
		protected   bool
		backend     string
		reason      protection.Reason
		afterSecond float64
	}{
		{pod: "storage", node: "xr-plain", driver: "product", vols: []corev1.Volume{pvcVol(claim("storage", framework.DriverName, corev1.ReadWriteOnce)), emptyDir},
			protected: true, backend: "storage", afterSecond: 10 + 2 + 5},
		{pod: "power", node: "xr-power", driver: mute, vols: []corev1.Volume{pvcVol(claim("power", mute, corev1.ReadWriteOnce))},
			protected: true, backend: "power", afterSecond: 10 + 2 + 20 + 40},
		{pod: "oos", node: "xr-oos", driver: oos, vols: []corev1.Volume{pvcVol(claim("oos", oos, corev1.ReadWriteOnce))},
			protected: true, backend: "out-of-service", afterSecond: 10 + 2},
		{pod: "oos-bare", node: "xr-oos-bare", driver: oos, vols: []corev1.Volume{pvcVol(claim("oos-bare", oos, corev1.ReadWriteOnce))},
			reason: protection.ReasonNoNodeBackend},
		{pod: "mute", node: "xr-plain", driver: mute, vols: []corev1.Volume{pvcVol(claim("mute", mute, corev1.ReadWriteOnce))},
			reason: protection.ReasonCannotFence},
		{pod: "nosafe", node: "xr-power", driver: nosafe, vols: []corev1.Volume{pvcVol(claim("nosafe", nosafe, corev1.ReadWriteOnce))},
			reason: protection.ReasonNotSafeDetach},
		{pod: "rwx", node: "xr-power", driver: mute, vols: []corev1.Volume{pvcVol(claim("rwx", mute, corev1.ReadWriteMany))},
			reason: protection.ReasonRWX},
		{pod: "inline", node: "xr-plain", driver: "(inline NFS)", vols: []corev1.Volume{emptyDir, nfs},
			reason: protection.ReasonInlineVolume},
		{pod: "unbound", node: "xr-plain", driver: "-", vols: []corev1.Volume{pvcVol(claim("unbound", "", corev1.ReadWriteOnce))},
			reason: protection.ReasonClaimUnresolved},
		{pod: "novolume", node: "xr-plain", driver: "-", vols: []corev1.Volume{emptyDir},
			reason: protection.ReasonNoVolume},
		{pod: "forever", node: "xr-plain", driver: "product", vols: []corev1.Volume{pvcVol(claim("forever", framework.DriverName, corev1.ReadWriteOnce))}, tolerations: forever,
			reason: protection.ReasonToleratesUnreachable},
		{pod: "optout", node: "xr-plain", driver: "product", vols: []corev1.Volume{pvcVol(claim("optout", framework.DriverName, corev1.ReadWriteOnce))},
			labels: map[string]string{contract.FailoverLabel: contract.FailoverDisabled}, reason: protection.ReasonOptedOut},
		{pod: "cordoned", node: "xr-cordoned", driver: mute, vols: []corev1.Volume{pvcVol(claim("cordoned", mute, corev1.ReadWriteOnce))},
			reason: protection.ReasonMaintenance},
		{pod: "cp", node: "xr-cp", driver: mute, vols: []corev1.Volume{pvcVol(claim("cp", mute, corev1.ReadWriteOnce))},
			reason: protection.ReasonControlPlane},
	}
	for _, r := range rows {
		tol := r.tolerations
		if tol == nil {
			tol = evictAfter2s
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: r.pod, Namespace: ns, Labels: r.labels}, Spec: corev1.PodSpec{
			NodeName: r.node, Volumes: r.vols, Tolerations: tol,
			Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The out-of-service node's volume is attached there: the taint's
	// detach fences it.
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "xr-oos"}, Spec: storagev1.VolumeAttachmentSpec{
		Attacher: oos, NodeName: "xr-oos", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("xr-oos")}}}
	if _, err := c.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The pods go, then their volumes are detached from the nodes,
		// before the nodes go (Cleanups run last first).
		ctx := context.Background()
		_ = c.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{})
		_ = c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		var left []string
		if err := framework.WaitFor(ctx, 90*time.Second, "the test's volumes detached", func(ctx context.Context) (bool, error) {
			vas, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			left = nil
			for _, va := range vas.Items {
				if _, ours := nodes[va.Spec.NodeName]; ours {
					left = append(left, va.Name+" on "+va.Spec.NodeName)
				}
			}
			return len(left) == 0, nil
		}); err != nil {
			t.Errorf("%v: %v", err, left)
		}
	})

	x := explainOf(t, bin, "-n", ns)
	if x.Config.Driver == "" || !x.Config.NonGracefulFailover || x.Config.NodeMonitorGraceSecs != 10 {
		t.Errorf("explain read the configuration %+v", x.Config)
	}
	got := map[string]fenceview.PodAnswer{}
	for _, p := range x.Pods {
		got[p.Name] = p
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-10s %-12s %-14s %-9s %-15s %s\n", "POD", "NODE", "DRIVER", "PROTECTED", "BACKEND", "REASON (want / got)")
	for _, r := range rows {
		a, ok := got[r.pod]
		fmt.Fprintf(&table, "%-10s %-12s %-14s %-9v %-15s %s / %s\n", r.pod, r.node, r.driver, a.Protected, a.Backend, r.reason, a.Reason)
		switch {
		case !ok:
			t.Errorf("explain says nothing of pod %s", r.pod)
		case a.Protected != r.protected || a.Backend != r.backend || a.Reason != r.reason:
			t.Errorf("pod %s on %s (%s): protected %v, backend %q, reason %q (%s); want %v, %q, %q", r.pod, r.node, r.driver, a.Protected, a.Backend, a.Reason, a.Why, r.protected, r.backend, r.reason)
		case r.protected && a.AfterSeconds != r.afterSecond:
			t.Errorf("pod %s: after %vs (%+v), want %vs", r.pod, a.AfterSeconds, a.After, r.afterSecond)
		case !r.protected && (a.Why == "" || a.Fix == ""):
			t.Errorf("pod %s: no why or fix: %+v", r.pod, a)
		}
	}
	t.Logf("explain on the real apiserver:\n%s", table.String())

	// The table says the same, with the fixes; a single pod by name; the
	// workload kinds by their selectors are the unit tests'.
	out := kubectlFence(t, bin, false, "explain", "pod/mute", "-n", ns)
	if !strings.Contains(out, "driver-cannot-fence") || !strings.Contains(out, "fix: "+got["mute"].Fix) {
		t.Errorf("explain pod/mute:\n%s", out)
	}
	// status sums it up.
	if out := kubectlFence(t, bin, false, "status"); !strings.Contains(out, "Protection: ") || !strings.Contains(out, "kubectl fence explain -A") {
		t.Errorf("status says nothing of protection:\n%s", out)
	}

	// The storm guard paused: nothing is fenced, so nothing fails over.
	if err := setPaused(ctx, "e2e explain"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = setPaused(context.Background(), "") }()
	if a := explainOf(t, bin, "pod/storage", "-n", ns).Pods; len(a) != 1 || a[0].Reason != protection.ReasonStormGuardPaused {
		t.Errorf("explain with fencing paused: %+v", a)
	}
}

// What explain says before a node dies is what happens when it does: a
// StatefulSet it calls protected fails over through the backend it named;
// one it calls unprotected (opted out) does not, and the product's Event
// gives the reason explain gave.
func TestExplainPredictsFailover(t *testing.T) {
	ctx := context.Background()
	bin := buildKubectlFence(ctx, t)

	t.Run("protected fails over", func(t *testing.T) {
		env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "xp", 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		x := explainOf(t, bin, "sts/"+env.App, "-n", env.NS)
		if len(x.Pods) != 1 || !x.Pods[0].Protected || x.Pods[0].Backend != fencingv1alpha1.BackendStorage {
			t.Fatalf("explain sts/%s: %+v", env.App, x.Pods)
		}
		victim := x.Pods[0].Node
		if err := env.PowerOff(ctx, victim); err != nil {
			t.Fatal(err)
		}
		if _, err := env.WaitAttached(ctx, 0, victim, 120*time.Second); err != nil {
			t.Fatalf("explain said protected, and the pod did not fail over: %v", err)
		}
		frs := fencingv1alpha1.NewClient(cluster.Dynamic)
		fr, err := frs.Get(ctx, victim)
		if err != nil || len(fr.Status.Volumes) == 0 {
			t.Errorf("no storage fence recorded for %s: %+v, %v", victim, fr, err)
		}
		if err := env.PowerOn(ctx, victim); err != nil {
			t.Fatal(err)
		}
		expectReleased(ctx, t, victim, fencedVolume{driver: product.Driver, handle: env.Volumes[0]})
		expectNoViolations(t)
	})

	t.Run("unprotected does not, for the reason given", func(t *testing.T) {
		env, err := scenario.SetupWith(ctx, cluster, product, tLogger{t}, scenario.Options{Prefix: "xu", Nodes: 2, Replicas: 1,
			Template: func(tpl *corev1.PodTemplateSpec) {
				// A copy: the template's labels are also the selector's.
				labels := maps.Clone(tpl.Labels)
				labels[contract.FailoverLabel] = contract.FailoverDisabled
				tpl.Labels = labels
			}})
		if err != nil {
			t.Fatal(err)
		}
		x := explainOf(t, bin, "sts/"+env.App, "-n", env.NS)
		if len(x.Pods) != 1 || x.Pods[0].Protected || x.Pods[0].Reason != protection.ReasonOptedOut {
			t.Fatalf("explain sts/%s: %+v", env.App, x.Pods)
		}
		why, victim := x.Pods[0].Why, x.Pods[0].Node
		if err := env.PowerOff(ctx, victim); err != nil {
			t.Fatal(err)
		}
		lifted := false
		defer func() {
			if !lifted {
				_ = labelPod(context.Background(), env, "")
			}
		}()
		// The pass that decides not to move the pod says why in an Event:
		// once it is there, that pass has happened.
		if err := framework.WaitFor(ctx, 120*time.Second, "FailoverDisabled on pod "+env.PodName(0), func(ctx context.Context) (bool, error) {
			evs, err := cluster.Client.CoreV1().Events(env.NS).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + env.PodName(0) + ",reason=FailoverDisabled"})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if !strings.Contains(e.Message, why) {
					return false, fmt.Errorf("the product said %q, explain said %q", e.Message, why)
				}
			}
			return len(evs.Items) > 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule) {
			t.Fatalf("%s quarantined for a pod explain called unprotected", victim)
		}
		if p, err := cluster.Client.CoreV1().Pods(env.NS).Get(ctx, env.PodName(0), metav1.GetOptions{}); err != nil || p.Spec.NodeName != victim {
			t.Fatalf("pod %s moved (or is gone) although explain called it unprotected: %v", env.PodName(0), err)
		}
		// The fix explain gave (the label) makes it fail over.
		if err := labelPod(ctx, env, contract.FailoverEnabled); err != nil {
			t.Fatal(err)
		}
		lifted = true
		if _, err := env.WaitAttached(ctx, 0, victim, 120*time.Second); err != nil {
			t.Fatalf("no failover once the fix was applied: %v", err)
		}
		if err := env.PowerOn(ctx, victim); err != nil {
			t.Fatal(err)
		}
		expectReleased(ctx, t, victim, fencedVolume{driver: product.Driver, handle: env.Volumes[0]})
		expectNoViolations(t)
	})
}
