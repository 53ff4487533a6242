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

package protection

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

const (
	fencing = "fencing.csi"    // SafeDetach, fences storage
	oos     = "oos.csi"        // SafeDetach, fences on the out-of-service taint
	mute    = "mute.csi"       // SafeDetach, fences nothing
	plain   = "plain.csi"      // not SafeDetach
	nfs     = "nfs.csi.unused" // no CSIDriver at all
)

func facts() Facts {
	drivers := map[string]*storagev1.CSIDriver{}
	for _, d := range []string{fencing, oos, mute} {
		drivers[d] = &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d, Annotations: map[string]string{contract.SafeDetachAnnotation: contract.SafeDetachTrue}}}
	}
	drivers[plain] = &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: plain}}
	pvs := map[string]*v1.PersistentVolume{}
	for _, d := range []string{fencing, oos, mute, plain} {
		pvs["c-"+d] = &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + d}, Spec: v1.PersistentVolumeSpec{
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: d, VolumeHandle: "h-" + d}}}}
	}
	pvs["c-rwx"] = &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-rwx"}, Spec: v1.PersistentVolumeSpec{
		AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: fencing, VolumeHandle: "h-rwx"}}}}
	pvs["c-nfs"] = &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-nfs"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}}}
	return Facts{
		PV: func(ns, claim string) (*v1.PersistentVolume, error) {
			if claim == "c-unbound" {
				return nil, fmt.Errorf("claim %s/%s %w", ns, claim, ErrUnbound)
			}
			if pv, ok := pvs[claim]; ok {
				return pv, nil
			}
			return nil, errors.New("not found")
		},
		Driver: func(name string) (*storagev1.CSIDriver, error) {
			if d, ok := drivers[name]; ok {
				return d, nil
			}
			return nil, errors.New("not found")
		},
		StorageFences:        func(d string) bool { return d == fencing },
		FencesOnOutOfService: func(d string) bool { return d == oos },
		NamespaceLabels: func(ns string) map[string]string {
			if ns == "off" {
				return map[string]string{contract.FailoverLabel: contract.FailoverDisabled}
			}
			return nil
		},
	}
}

func terminating(ns string, claims ...string) *v1.Pod {
	now := metav1.Now()
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, DeletionTimestamp: &now}}
	p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}})
	for _, c := range claims {
		vol := v1.Volume{Name: c, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}}
		if c == "inline" {
			vol.VolumeSource = v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{}}
		}
		p.Spec.Volumes = append(p.Spec.Volumes, vol)
	}
	return p
}

func TestTriage(t *testing.T) {
	tests := []struct {
		name      string
		pod       *v1.Pod
		wholeNode bool
		class     Class
		reason    Reason
		driver    string
	}{
		{"a fencing driver", terminating("a", "c-"+fencing), false, Candidate, "", ""},
		{"a driver fencing on out-of-service", terminating("a", "c-"+oos), false, Candidate, "", ""},
		{"a driver that fences nothing", terminating("a", "c-"+mute), false, Blocked, ReasonCannotFence, mute},
		{"a driver that fences nothing, on a node with a power switch", terminating("a", "c-"+mute), true, Candidate, "", ""},
		{"not SafeDetach, even with a power switch", terminating("a", "c-"+plain), true, Blocked, ReasonNotSafeDetach, plain},
		{"one of two volumes not SafeDetach", terminating("a", "c-"+fencing, "c-"+plain), false, Blocked, ReasonNotSafeDetach, plain},
		{"ReadWriteMany", terminating("a", "c-rwx"), true, Blocked, ReasonRWX, fencing},
		{"inline iSCSI", terminating("a", "c-"+fencing, "inline"), true, Blocked, ReasonInlineVolume, ""},
		{"not CSI", terminating("a", "c-nfs"), true, Blocked, ReasonNotCSI, ""},
		{"unbound", terminating("a", "c-unbound"), true, Blocked, ReasonClaimUnresolved, ""},
		{"claim missing", terminating("a", "c-missing"), true, Blocked, ReasonClaimUnresolved, ""},
		{"node-local only", terminating("a"), true, Blocked, ReasonNoVolume, ""},
		{"namespace opted out", terminating("off", "c-"+fencing), false, OptedOut, ReasonOptedOut, ""},
		{"not Terminating", func() *v1.Pod { p := terminating("a", "c-"+fencing); p.DeletionTimestamp = nil; return p }(), false, Blocked, ReasonNotTerminating, ""},
	}
	for _, tc := range tests {
		v := Triage(tc.pod, facts(), tc.wholeNode)
		if v.Class != tc.class || v.Reason != tc.reason || v.Driver != tc.driver {
			t.Errorf("%s: class %v, reason %q, driver %q (%s); want %v, %q, %q", tc.name, v.Class, v.Reason, v.Driver, v.Why, tc.class, tc.reason, tc.driver)
		}
		if tc.class == Candidate && len(v.Vols) == 0 {
			t.Errorf("%s: a candidate with no volume", tc.name)
		}
	}
}

func TestNeedsNodeFenceAndBackends(t *testing.T) {
	vol := func(d string) podgc.Volume { return podgc.Volume{Driver: d, PVName: "pv-" + d} }
	storage := func(d string) bool { return d == fencing }
	for _, tc := range []struct {
		name     string
		backends []string
		vols     []podgc.Volume
		want     bool
	}{
		{"storage fences all", []string{"storage", "power"}, []podgc.Volume{vol(fencing)}, false},
		{"one driver does not fence", []string{"storage", "power"}, []podgc.Volume{vol(fencing), vol(mute)}, true},
		{"power first", []string{"power", "storage"}, []podgc.Volume{vol(fencing)}, true},
		{"power first, no candidate", []string{"power", "storage"}, nil, false},
		{"power without storage", []string{"power"}, []podgc.Volume{vol(fencing)}, true},
	} {
		if got, why := NeedsNodeFence(tc.backends, tc.vols, storage); got != tc.want || got == (why == "") {
			t.Errorf("%s: NeedsNodeFence = %v (%q), want %v", tc.name, got, why, tc.want)
		}
	}
	got := NodeBackends([]string{"storage", "machine", "power", "out-of-service"}, func(b string) bool { return b != "machine" })
	if strings.Join(got, ",") != "power,out-of-service" {
		t.Errorf("NodeBackends = %v, want the configured node-level ones in order", got)
	}
}

func TestOutOfServiceFences(t *testing.T) {
	va := func(pv string) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{Spec: storagev1.VolumeAttachmentSpec{Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}}}
	}
	inline := &storagev1.VolumeAttachment{}
	driverOf := func(pv string) string { return strings.TrimPrefix(pv, "pv-") }
	onOOS := func(d string) bool { return d == oos }
	storage := func(d string) bool { return d == fencing }
	for _, tc := range []struct {
		name       string
		vas        []*storagev1.VolumeAttachment
		unattached string
		want       bool
	}{
		{"one driver fencing on the taint", []*storagev1.VolumeAttachment{va("pv-" + oos)}, "", true},
		{"with one that fences storage", []*storagev1.VolumeAttachment{va("pv-" + oos), va("pv-" + fencing)}, "", true},
		{"with one that fences nothing", []*storagev1.VolumeAttachment{va("pv-" + oos), va("pv-" + mute)}, "", false},
		{"only storage fencing: not the taint's", []*storagev1.VolumeAttachment{va("pv-" + fencing)}, "", false},
		{"an inline attachment", []*storagev1.VolumeAttachment{va("pv-" + oos), inline}, "", false},
		{"unattached storage on the node", []*storagev1.VolumeAttachment{va("pv-" + oos)}, "pod a/b has inline volume x", false},
		{"nothing attached", nil, "", false},
	} {
		if got := OutOfServiceFences(tc.vas, driverOf, onOOS, storage, tc.unattached); got != tc.want {
			t.Errorf("%s: OutOfServiceFences = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEvictionAfter(t *testing.T) {
	tol := func(key string, effect v1.TaintEffect, secs *int64) v1.Toleration {
		return v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: effect, TolerationSeconds: secs}
	}
	for _, tc := range []struct {
		name string
		tols []v1.Toleration
		want time.Duration
		ok   bool
	}{
		{"none: at once", nil, 0, true},
		{"default 300s", []v1.Toleration{tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, ptr.To[int64](300))}, 300 * time.Second, true},
		{"for ever", []v1.Toleration{tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, nil)}, 0, false},
		{"tolerate everything", []v1.Toleration{{Operator: v1.TolerationOpExists}}, 0, false},
		{"for ever and 60s: the shortest", []v1.Toleration{{Operator: v1.TolerationOpExists}, tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, ptr.To[int64](60))}, time.Minute, true},
		{"another taint's", []v1.Toleration{tol(v1.TaintNodeNotReady, v1.TaintEffectNoExecute, nil)}, 0, true},
		{"NoSchedule only", []v1.Toleration{tol(v1.TaintNodeUnreachable, v1.TaintEffectNoSchedule, nil)}, 0, true},
	} {
		got, ok := EvictionAfter(&v1.Pod{Spec: v1.PodSpec{Tolerations: tc.tols}})
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: EvictionAfter = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRegistrationRoundTrip(t *testing.T) {
	ann := ConfigAnnotations(true, true, []string{"power", "storage"}, 15*time.Second)
	ann[RegistrationLabel], ann[CanFenceAnnotation], ann[MaxFencedNodesAnnotation] = fencing, "true", "2"
	now := metav1.NewMicroTime(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	r, ok := ParseRegistration(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x"), RenewTime: &now}})
	if !ok || r.Driver != fencing || !r.CanFence || !r.Configured || !r.Gate || !r.OptIn || strings.Join(r.Backends, ",") != "power,storage" ||
		r.Timeout != 15*time.Second || r.MaxNodes != 2 || r.Identity != "x" || !r.RenewTime.Equal(now.Time) {
		t.Errorf("ParseRegistration = %+v, %v", r, ok)
	}
	old, ok := ParseRegistration(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{RegistrationLabel: fencing}}})
	if !ok || old.Configured {
		t.Errorf("a registration of an older version: %+v, %v", old, ok)
	}
	if _, ok := ParseRegistration(&coordinationv1.Lease{}); ok {
		t.Error("a Lease that is no registration was taken for one")
	}
}

// Every reason that counts has a fix.
func TestEveryReasonHasAFix(t *testing.T) {
	for _, r := range Reasons {
		if !r.Counted() || r.Fix("d", "n") == "" {
			t.Errorf("reason %q: counted %v, fix %q", r, r.Counted(), r.Fix("d", "n"))
		}
	}
}

// Assess meets the reasons in the failover's order (decide's: the gate,
// the node held, then the pod), and names the backend that moves a pod.
func TestAssessOrder(t *testing.T) {
	live := func(mut func(*v1.Pod)) *v1.Pod {
		p := terminating("a", "c-"+fencing)
		p.DeletionTimestamp = nil
		p.Spec.NodeName = "n1"
		if mut != nil {
			mut(p)
		}
		return p
	}
	node := func(cp, cordoned bool) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{}}}
		if cp {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		n.Spec.Unschedulable = cordoned
		return n
	}
	cluster := func(mut func(*Cluster)) Cluster {
		c := Cluster{Facts: facts(), Registered: true, Gate: true, Backends: []string{"storage", "power"}, Nodes: 10,
			NodeBackend: func(*v1.Node, string) bool { return false }}
		if mut != nil {
			mut(&c)
		}
		return c
	}
	forever := func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	}
	for _, tc := range []struct {
		name    string
		pod     *v1.Pod
		node    *v1.Node
		cluster Cluster
		want    Reason
		backend string
	}{
		{"protected", live(nil), node(false, false), cluster(nil), "", "storage"},
		{"on no node", live(func(p *v1.Pod) { p.Spec.NodeName = "" }), nil, cluster(nil), ReasonNotScheduled, ""},
		{"no registration before the gate", live(nil), node(true, true), cluster(func(c *Cluster) { c.Registered, c.Gate = false, false }), ReasonNoController, ""},
		{"the gate before the node", live(nil), node(true, true), cluster(func(c *Cluster) { c.Gate = false }), ReasonGateOff, ""},
		{"control plane before maintenance", live(forever), node(true, true), cluster(nil), ReasonControlPlane, ""},
		{"maintenance before the pod", live(forever), node(false, true), cluster(nil), ReasonMaintenance, ""},
		{"tolerated for ever before the volumes", live(func(p *v1.Pod) { forever(p); p.Spec.Volumes = nil }), node(false, false), cluster(nil), ReasonToleratesUnreachable, ""},
		{"the volumes before the storm guard", live(func(p *v1.Pod) { p.Spec.Volumes = p.Spec.Volumes[:1] }), node(false, false), cluster(func(c *Cluster) { c.Paused = "x" }), ReasonNoVolume, ""},
		{"paused", live(nil), node(false, false), cluster(func(c *Cluster) { c.Paused = "x" }), ReasonStormGuardPaused, ""},
		{"paused, the node admitted already", live(nil), node(false, false), cluster(func(c *Cluster) { c.Paused, c.Admitted = "x", []string{"n1"} }), "", "storage"},
		{"full", live(nil), node(false, false), cluster(func(c *Cluster) { c.MaxNodes, c.Admitted = 1, []string{"n9"} }), ReasonStormGuardFull, ""},
		{"a driver fencing on the taint, no node backend", live(func(p *v1.Pod) { p.Spec.Volumes[1].PersistentVolumeClaim.ClaimName = "c-" + oos }), node(false, false), cluster(nil), ReasonNoNodeBackend, ""},
		{"a driver fencing nothing, a power switch", live(func(p *v1.Pod) { p.Spec.Volumes[1].PersistentVolumeClaim.ClaimName = "c-" + mute }), node(false, false),
			cluster(func(c *Cluster) { c.NodeBackend = func(_ *v1.Node, b string) bool { return b == "power" } }), "", "power"},
		{"a DaemonSet's", live(func(p *v1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: ptr.To(true)}}
		}), node(false, false), cluster(nil), ReasonDaemonSet, ""},
	} {
		a := Assess(tc.pod, tc.node, tc.cluster)
		if a.Reason != tc.want || a.Backend != tc.backend || a.Protected != (tc.want == "") {
			t.Errorf("%s: %+v; want reason %q, backend %q", tc.name, a, tc.want, tc.backend)
		}
	}
}
