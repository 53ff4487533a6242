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

package fenceview

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/machinefence"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

const (
	exDriver = "disk.csi.example"
	exNS     = "app"
	guardNS  = "kube-system"
)

// world is the cluster of one explain case: node n1 with pod db-0 of
// StatefulSet db, its claim bound to a ReadWriteOnce volume of exDriver,
// which is SafeDetach and registered as fencing storage, with the failover
// on (backends storage), nothing admitted or paused.
type world struct {
	node    *corev1.Node
	pod     *corev1.Pod
	pvc     *corev1.PersistentVolumeClaim
	pv      *corev1.PersistentVolume
	driver  *storagev1.CSIDriver
	reg     *coordinationv1.Lease // nil: no registration
	guard   *coordinationv1.Lease // nil: none yet
	extra   []runtime.Object
	configs []*fencingv1alpha1.FenceAgentConfig
}

func newWorld(now time.Time) *world {
	renew := metav1.NewMicroTime(now.Add(-10 * time.Second))
	w := &world{
		node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: exNS, Labels: map[string]string{"app": "db"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db", APIVersion: "apps/v1", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: "n1",
				Volumes: []corev1.Volume{
					{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}},
					{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
				Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		},
		pvc: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-db-0", Namespace: exNS}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1"}},
		pv: &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}, Spec: corev1.PersistentVolumeSpec{
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: exDriver, VolumeHandle: "vol-1"}}}},
		driver: &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: exDriver, Annotations: map[string]string{contract.SafeDetachAnnotation: contract.SafeDetachTrue}}},
		reg: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.RegistrationLeaseName(exDriver), Namespace: guardNS,
			Labels:      map[string]string{protection.RegistrationLabel: contract.SanitizeDriverName(exDriver)},
			Annotations: map[string]string{protection.RegistrationLabel: exDriver, protection.CanFenceAnnotation: "true"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-a"), RenewTime: &renew}},
	}
	for k, v := range protection.ConfigAnnotations(true, false, []string{fencingv1alpha1.BackendStorage}, 15*time.Second) {
		w.reg.Annotations[k] = v
	}
	return w
}

func (w *world) backends(b ...string) {
	w.reg.Annotations[protection.BackendsAnnotation] = strings.Join(b, ",")
}

func (w *world) cannotFence() { w.reg.Annotations[protection.CanFenceAnnotation] = "false" }

func (w *world) explain(t *testing.T, now time.Time, target Target) *Explanation {
	t.Helper()
	objs := []runtime.Object{w.node, w.pod, w.pvc, w.pv, w.driver,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: exNS}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: exNS}, Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}}
	if w.reg != nil {
		objs = append(objs, w.reg)
	}
	if w.guard != nil {
		objs = append(objs, w.guard)
	}
	kube := fake.NewClientset(append(objs, w.extra...)...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.FenceAgentConfigResource: "FenceAgentConfigList"})
	for _, c := range w.configs {
		u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(fencingv1alpha1.FenceAgentConfigResource).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	x, err := Explain(context.Background(), kube, dyn, target, ExplainOptions{StormGuardNamespace: guardNS, Now: now})
	if err != nil {
		t.Fatalf("Explain: %v", err)
	}
	return x
}

// Each reason the failover has for not moving a pod, and each backend that
// moves it, on one pod: explain's answer is protection.Assess's on what it
// read, with the fix.
func TestExplainReasons(t *testing.T) {
	now := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	powerConfig := &fencingv1alpha1.FenceAgentConfig{ObjectMeta: metav1.ObjectMeta{Name: "rack-1"},
		Spec: fencingv1alpha1.FenceAgentConfigSpec{Agent: "fence_ipmilan", Nodes: []fencingv1alpha1.FenceAgentNode{{Name: "n1"}},
			Timeouts: &fencingv1alpha1.FenceAgentTimeouts{CallTimeoutSeconds: 20, ConfirmTimeoutSeconds: 40}}}
	va := func(driverPV string) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-" + driverPV},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: exDriver, NodeName: "n1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(driverPV)}}}
	}
	tests := []struct {
		name       string
		change     func(w *world)
		protected  bool
		backend    string
		reason     protection.Reason
		fixMention string
		// afterSeconds: 50 (node-monitor grace) + 30 (toleration) + the
		// fence's bound.
		afterSeconds float64
	}{
		{name: "storage fence", protected: true, backend: "storage", afterSeconds: 50 + 30 + 15},
		{name: "storage fence, default toleration 300s", change: func(w *world) {
			w.pod.Spec.Tolerations[0].TolerationSeconds = ptr.To[int64](300)
		}, protected: true, backend: "storage", afterSeconds: 50 + 300 + 15},
		{name: "no toleration: evicted at once", change: func(w *world) { w.pod.Spec.Tolerations = nil }, protected: true, backend: "storage", afterSeconds: 50 + 0 + 15},
		{name: "fence by detach (declared) registers as fencing", change: func(w *world) {
			w.reg.Annotations[protection.FenceModeAnnotation] = "unpublish-revokes-access"
		}, protected: true, backend: "storage", afterSeconds: 95},
		{name: "power", change: func(w *world) {
			w.cannotFence()
			w.backends("storage", "power")
			w.configs = append(w.configs, powerConfig)
		}, protected: true, backend: "power", afterSeconds: 50 + 30 + 60},
		{name: "power first", change: func(w *world) {
			w.backends("power", "storage")
			w.configs = append(w.configs, powerConfig)
		}, protected: true, backend: "power", afterSeconds: 140},
		{name: "power first, no FenceAgentConfig: storage frees it", change: func(w *world) {
			w.backends("power", "storage")
		}, protected: true, backend: "storage", afterSeconds: 95},
		{name: "machine", change: func(w *world) {
			w.cannotFence()
			w.backends("storage", "machine")
			w.node.Annotations = map[string]string{machinefence.MachineAnnotation: "m-1", machinefence.ClusterNamespaceAnnotation: "capi"}
		}, protected: true, backend: "machine", afterSeconds: 80},
		{name: "out-of-service", change: func(w *world) {
			w.cannotFence()
			w.backends("storage", "out-of-service")
			w.driver.Annotations[contract.FencesOnOutOfServiceAnnotation] = "true"
			w.extra = append(w.extra, va("pv-1"))
		}, protected: true, backend: "out-of-service", afterSeconds: 80},
		{name: "out-of-service, but the volume has no attachment", change: func(w *world) {
			w.cannotFence()
			w.backends("storage", "out-of-service")
			w.driver.Annotations[contract.FencesOnOutOfServiceAnnotation] = "true"
		}, reason: protection.ReasonNoNodeBackend, fixMention: "FenceAgentConfig listing node n1"},
		{name: "no registration", change: func(w *world) { w.reg = nil }, reason: protection.ReasonNoController, fixMention: "install"},
		{name: "gate off", change: func(w *world) { w.reg.Annotations[protection.GateAnnotation] = "false" }, reason: protection.ReasonGateOff, fixMention: "--feature-gates=NonGracefulFailover=true"},
		{name: "control plane", change: func(w *world) {
			w.node.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
		}, reason: protection.ReasonControlPlane, fixMention: "kubectl fence fence n1"},
		{name: "cordoned", change: func(w *world) { w.node.Spec.Unschedulable = true }, reason: protection.ReasonMaintenance, fixMention: "uncordon"},
		{name: "tolerates unreachable for ever", change: func(w *world) { w.pod.Spec.Tolerations[0].TolerationSeconds = nil }, reason: protection.ReasonToleratesUnreachable, fixMention: "tolerationSeconds"},
		{name: "inline NFS volume", change: func(w *world) {
			w.pod.Spec.Volumes = append(w.pod.Spec.Volumes, corev1.Volume{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}}})
		}, reason: protection.ReasonInlineVolume, fixMention: "PersistentVolumeClaim"},
		{name: "claim not bound", change: func(w *world) { w.pvc.Spec.VolumeName = "" }, reason: protection.ReasonClaimUnresolved, fixMention: "bind"},
		{name: "not a CSI volume", change: func(w *world) {
			w.pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}}
		}, reason: protection.ReasonNotCSI, fixMention: "CSI driver"},
		{name: "node-local volumes only", change: func(w *world) { w.pod.Spec.Volumes = w.pod.Spec.Volumes[1:] }, reason: protection.ReasonNoVolume, fixMention: "out-of-service"},
		{name: "ReadWriteMany", change: func(w *world) {
			w.pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}, reason: protection.ReasonRWX, fixMention: "ReadWriteOnce"},
		{name: "driver not SafeDetach", change: func(w *world) { w.driver.Annotations = nil }, reason: protection.ReasonNotSafeDetach, fixMention: contract.SafeDetachAnnotation + "=true"},
		{name: "driver cannot fence, no node backend", change: func(w *world) { w.cannotFence() }, reason: protection.ReasonCannotFence, fixMention: contract.UnpublishRevokesAccessAnnotation},
		{name: "registration not renewed for 10 minutes", change: func(w *world) {
			w.reg.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-10 * time.Minute)))
		}, reason: protection.ReasonCannotFence, fixMention: "FenceAgentConfig listing node n1"},
		{name: "storage backend off", change: func(w *world) { w.backends("power") }, reason: protection.ReasonCannotFence},
		{name: "opted out by the pod's label", change: func(w *world) {
			w.pod.Labels[contract.FailoverLabel] = contract.FailoverDisabled
		}, reason: protection.ReasonOptedOut, fixMention: contract.FailoverLabel + "=enabled"},
		{name: "opt-in without the label", change: func(w *world) { w.reg.Annotations[protection.OptInAnnotation] = "true" }, reason: protection.ReasonOptedOut},
		{name: "storm guard paused", change: func(w *world) {
			w.guard = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.StormGuardLeaseName, Namespace: guardNS, Annotations: map[string]string{PausedAnnotation: "san upgrade"}}}
		}, reason: protection.ReasonStormGuardPaused, fixMention: "kubectl fence resume"},
		{name: "storm guard full", change: func(w *world) {
			w.reg.Annotations[protection.MaxFencedNodesAnnotation] = "1"
			w.guard = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.StormGuardLeaseName, Namespace: guardNS, Annotations: map[string]string{stormGuardNodesAnnotation: "n9"}}}
		}, reason: protection.ReasonStormGuardFull, fixMention: "--max-fenced-nodes"},
		{name: "storm guard full, but the node is admitted already", change: func(w *world) {
			w.reg.Annotations[protection.MaxFencedNodesAnnotation] = "1"
			w.guard = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.StormGuardLeaseName, Namespace: guardNS, Annotations: map[string]string{stormGuardNodesAnnotation: "n1"}}}
		}, protected: true, backend: "storage", afterSeconds: 95},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(now)
			if tc.change != nil {
				tc.change(w)
			}
			x := w.explain(t, now, Target{Kind: "pod", Namespace: exNS, Name: "db-0"})
			if len(x.Pods) != 1 {
				t.Fatalf("explained %d pods, want 1: %+v", len(x.Pods), x.Pods)
			}
			a := x.Pods[0]
			if a.Protected != tc.protected || a.Backend != tc.backend || a.Reason != tc.reason {
				t.Errorf("protected %v, backend %q, reason %q (%s); want %v, %q, %q", a.Protected, a.Backend, a.Reason, a.Why, tc.protected, tc.backend, tc.reason)
			}
			if !strings.Contains(a.Fix, tc.fixMention) || (!tc.protected && (a.Why == "" || a.Fix == "")) {
				t.Errorf("why %q, fix %q; want a fix mentioning %q", a.Why, a.Fix, tc.fixMention)
			}
			if tc.protected && a.AfterSeconds != tc.afterSeconds {
				t.Errorf("after %vs (%+v), want %vs", a.AfterSeconds, a.After, tc.afterSeconds)
			}
			wantCounts := [2]int{0, 1}
			if tc.protected {
				wantCounts = [2]int{1, 0}
			}
			if [2]int{x.Protected, x.Unprotected} != wantCounts || (!tc.protected && x.ByReason[string(tc.reason)] != 1) {
				t.Errorf("counted %d protected, %d not (%v)", x.Protected, x.Unprotected, x.ByReason)
			}
			table := x.Table()
			if !strings.Contains(table, "db-0") || (!tc.protected && !strings.Contains(table, "fix: "+a.Fix)) {
				t.Errorf("table:\n%s", table)
			}
		})
	}
}

// A workload's pods are found by its selector, a namespace's all of them;
// a DaemonSet's pod is said but not counted; -o json and yaml carry the
// same answer as the table.
func TestExplainTargetsAndOutput(t *testing.T) {
	now := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	w := newWorld(now)
	other := w.pod.DeepCopy()
	other.Name, other.Labels = "web-1", map[string]string{"app": "web"}
	other.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "web", APIVersion: "apps/v1", Controller: ptr.To(true)}}
	w.extra = append(w.extra, other)
	sts := w.explain(t, now, Target{Kind: "statefulset", Namespace: exNS, Name: "db"})
	if len(sts.Pods) != 1 || sts.Pods[0].Name != "db-0" || !sts.Pods[0].Protected {
		t.Errorf("statefulset/db: %+v", sts.Pods)
	}
	ns := w.explain(t, now, Target{Kind: "namespace", Name: exNS})
	if len(ns.Pods) != 2 || ns.Protected != 1 || ns.Unprotected != 0 || ns.Pods[1].Reason != protection.ReasonDaemonSet {
		t.Errorf("namespace: %d pods, %d protected, %d not: %+v", len(ns.Pods), ns.Protected, ns.Unprotected, ns.Pods)
	}
	for _, format := range []string{"json", "yaml"} {
		var out bytes.Buffer
		if err := ns.Write(&out, format); err != nil {
			t.Fatal(err)
		}
		var back Explanation
		var err error
		if format == "json" {
			err = json.Unmarshal(out.Bytes(), &back)
		} else {
			err = yaml.Unmarshal(out.Bytes(), &back)
		}
		if err != nil || len(back.Pods) != 2 || back.Pods[0].Backend != "storage" || back.Pods[0].AfterSeconds != 95 || back.Config.Driver != exDriver {
			t.Errorf("-o %s: %v\n%s", format, err, out.String())
		}
	}
	if err := ns.Write(&bytes.Buffer{}, "wide"); err == nil {
		t.Error("-o wide was accepted")
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		all     bool
		want    Target
		wantErr bool
	}{
		{args: nil, want: Target{Kind: "namespace", Name: "ctx-ns"}},
		{args: nil, all: true, want: Target{}},
		{args: []string{"pod/db-0"}, want: Target{Kind: "pod", Namespace: "ctx-ns", Name: "db-0"}},
		{args: []string{"sts/db"}, want: Target{Kind: "statefulset", Namespace: "ctx-ns", Name: "db"}},
		{args: []string{"deploy/web"}, want: Target{Kind: "deployment", Namespace: "ctx-ns", Name: "web"}},
		{args: []string{"ns/prod"}, want: Target{Kind: "namespace", Name: "prod"}},
		{args: []string{"db-0"}, wantErr: true},
		{args: []string{"service/db"}, wantErr: true},
		{args: []string{"pod/a", "pod/b"}, wantErr: true},
		{args: []string{"pod/a"}, all: true, wantErr: true},
	} {
		got, err := ParseTarget(tc.args, "ctx-ns", tc.all)
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("ParseTarget(%q, all %v) = %+v, %v; want %+v (error %v)", tc.args, tc.all, got, err, tc.want, tc.wantErr)
		}
	}
}

// kubectl fence status sums up explain over the cluster.
func TestStatusSaysProtection(t *testing.T) {
	now := time.Now()
	w := newWorld(now)
	rwx := w.pod.DeepCopy()
	rwx.Name = "db-1"
	rwx.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "shared"
	w.extra = append(w.extra,
		rwx,
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: exNS}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-rwx"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-rwx"}, Spec: corev1.PersistentVolumeSpec{
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: exDriver, VolumeHandle: "vol-rwx"}}}})
	objs := append([]runtime.Object{w.node, w.pod, w.pvc, w.pv, w.driver, w.reg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: exNS}}}, w.extra...)
	kube := fake.NewClientset(objs...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		fencingv1alpha1.FenceAgentConfigResource: "FenceAgentConfigList", fencingv1alpha1.Resource: "FencingRequestList"})
	st, err := GetStatus(context.Background(), kube, fencingv1alpha1.NewClient(dyn), guardNS)
	if err != nil {
		t.Fatal(err)
	}
	st.AddProtection(context.Background(), kube, dyn, ExplainOptions{StormGuardNamespace: guardNS})
	if p := st.Protection; p == nil || p.Protected != 1 || p.Unprotected != 1 || p.ByReason["rwx"] != 1 || p.Error != "" {
		t.Fatalf("protection %+v", st.Protection)
	}
	table := st.Table(now)
	if want := "Protection: 1 pod(s) would fail over if their node died now, 1 would not (rwx: 1): kubectl fence explain -A"; !strings.Contains(table, want) {
		t.Errorf("status table does not say %q:\n%s", want, table)
	}
}
