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

package podgc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
)

const driver = "fence.csi-fence.io"

func pod(volumes ...v1.Volume) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "ns", DeletionTimestamp: ptr.To(metav1.Now())}, Spec: v1.PodSpec{Volumes: volumes}}
}

func pvcVol(claim string) v1.Volume {
	return v1.Volume{Name: claim, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

// Hole 6 of the safety issue: only an allow-list of node-local sources is
// ignored; any other volume must be fenceable or the pod does not go.
func TestVolumes(t *testing.T) {
	claims := map[string]*Volume{"rwo": {Driver: driver, VolumeHandle: "h1", PVName: "pv1"}}
	claim := func(name string) (*Volume, error) {
		if v, ok := claims[name]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("claim %s not found", name)
	}
	local := []v1.VolumeSource{
		{EmptyDir: &v1.EmptyDirVolumeSource{}}, {ConfigMap: &v1.ConfigMapVolumeSource{}}, {Secret: &v1.SecretVolumeSource{}},
		{DownwardAPI: &v1.DownwardAPIVolumeSource{}}, {Projected: &v1.ProjectedVolumeSource{}}, {HostPath: &v1.HostPathVolumeSource{}},
		{Image: &v1.ImageVolumeSource{}},
	}
	network := []v1.VolumeSource{
		{NFS: &v1.NFSVolumeSource{}}, {ISCSI: &v1.ISCSIVolumeSource{}}, {RBD: &v1.RBDVolumeSource{}}, {FC: &v1.FCVolumeSource{}},
		{CSI: &v1.CSIVolumeSource{Driver: driver}}, {AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{}},
		{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{}}, {CephFS: &v1.CephFSVolumeSource{}}, {Glusterfs: &v1.GlusterfsVolumeSource{}},
	}
	for i, src := range local {
		if vols, err := Volumes(pod(pvcVol("rwo"), v1.Volume{Name: "x", VolumeSource: src}), claim); err != nil || len(vols) != 1 {
			t.Errorf("node-local source %d: got %v, %v; want the claim only", i, vols, err)
		}
	}
	for i, src := range network {
		if _, err := Volumes(pod(pvcVol("rwo"), v1.Volume{Name: "x", VolumeSource: src}), claim); err == nil {
			t.Errorf("network source %d (%+v) treated as node-local", i, src)
		}
	}
	if _, err := Volumes(pod(pvcVol("missing")), claim); err == nil {
		t.Error("a missing claim must be an error")
	}
	eph := pod(v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}})
	claims["db-0-data"] = claims["rwo"]
	if vols, err := Volumes(eph, claim); err != nil || len(vols) != 1 {
		t.Errorf("generic ephemeral volume: %v, %v", vols, err)
	}
}

func TestSafeDetach(t *testing.T) {
	rwo := Volume{Driver: driver, VolumeHandle: "h1", PVName: "pv1"}
	rwx := Volume{Driver: driver, VolumeHandle: "h2", PVName: "pv2", RWX: true}
	other := Volume{Driver: "other.example.com", VolumeHandle: "h3", PVName: "pv3"}
	otherSafe := Volume{Driver: "safe.example.com", VolumeHandle: "h4", PVName: "pv4"}
	safe := func(d string) bool { return d == driver || d == "safe.example.com" }
	all := func(Volume) bool { return true }
	only := func(h string) func(Volume) bool { return func(v Volume) bool { return v.VolumeHandle == h } }
	running := pod()
	running.DeletionTimestamp = nil
	tests := []struct {
		name   string
		pod    *v1.Pod
		vols   []Volume
		fenced func(Volume) bool
		want   bool
	}{
		{"RWO volume of a SafeDetach driver, fenced", pod(), []Volume{rwo}, all, true},
		{"not fenced yet", pod(), []Volume{rwo}, only("x"), false},
		{"one of two fenced", pod(), []Volume{rwo, otherSafe}, only("h1"), false},
		{"two SafeDetach drivers, both fenced", pod(), []Volume{rwo, otherSafe}, all, true},
		{"no volume to fence: not a storage fence's business", pod(), nil, all, false},
		{"RWX never", pod(), []Volume{rwo, rwx}, all, false},
		{"a non-SafeDetach driver's volume never", pod(), []Volume{rwo, other}, all, false},
		{"not Terminating", running, []Volume{rwo}, all, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, why := SafeDetach(tc.pod, tc.vols, safe, tc.fenced)
			if got != tc.want {
				t.Errorf("SafeDetach = %v (%s), want %v", got, why, tc.want)
			}
			if !got && why == "" {
				t.Error("a refusal must say why")
			}
		})
	}
}

func node(ready v1.ConditionStatus, taints []v1.Taint, conds ...v1.NodeCondition) *v1.Node {
	return &v1.Node{Spec: v1.NodeSpec{Taints: taints},
		Status: v1.NodeStatus{Conditions: append([]v1.NodeCondition{{Type: v1.NodeReady, Status: ready}}, conds...)}}
}

func TestOutOfServiceAndFencingComplete(t *testing.T) {
	oos := []v1.Taint{{Key: contract.OutOfServiceTaintKey, Value: contract.OutOfServiceTaintValue, Effect: v1.TaintEffectNoExecute}}
	complete := v1.NodeCondition{Type: contract.ConditionFencingComplete, Status: v1.ConditionTrue}
	tolerating := pod()
	tolerating.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	running := pod()
	running.DeletionTimestamp = nil
	tests := []struct {
		name                 string
		pod                  *v1.Pod
		node                 *v1.Node
		oos, fencingComplete bool
	}{
		{"out-of-service, NotReady", pod(), node(v1.ConditionUnknown, oos), true, false},
		{"out-of-service on a Ready node: never", pod(), node(v1.ConditionTrue, oos), false, false},
		{"out-of-service, pod tolerates it forever", tolerating, node(v1.ConditionFalse, oos), false, false},
		{"out-of-service, pod not Terminating", running, node(v1.ConditionFalse, oos), false, false},
		{"FencingComplete, NotReady", pod(), node(v1.ConditionUnknown, nil, complete), false, true},
		{"FencingComplete on a Ready node: never", pod(), node(v1.ConditionTrue, nil, complete), false, false},
		{"nothing", pod(), node(v1.ConditionUnknown, nil), false, false},
	}
	for _, tc := range tests {
		if got := OutOfService(tc.pod, tc.node); got != tc.oos {
			t.Errorf("%s: OutOfService = %v, want %v", tc.name, got, tc.oos)
		}
		if got := FencingComplete(tc.pod, tc.node); got != tc.fencingComplete {
			t.Errorf("%s: FencingComplete = %v, want %v", tc.name, got, tc.fencingComplete)
		}
	}
}

func TestTolerates(t *testing.T) {
	taint := v1.Taint{Key: contract.OutOfServiceTaintKey, Effect: v1.TaintEffectNoExecute}
	forever := v1.Toleration{Operator: v1.TolerationOpExists}
	bounded := v1.Toleration{Key: taint.Key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(5))}
	if !Tolerates(&v1.Pod{Spec: v1.PodSpec{Tolerations: []v1.Toleration{forever}}}, taint) {
		t.Error("a pod tolerating everything forever must be left alone")
	}
	if Tolerates(&v1.Pod{Spec: v1.PodSpec{Tolerations: []v1.Toleration{bounded}}}, taint) {
		t.Error("a bounded toleration ends")
	}
	if Tolerates(&v1.Pod{}, taint) {
		t.Error("no toleration tolerates nothing")
	}
}

// The reason a pod is deleted for comes from who marked it; once this GC
// marked it, the reason it wrote stays, though its condition replaced the
// taint manager's.
func TestTerminationReason(t *testing.T) {
	marked := func(reason string, anns map[string]string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: anns}, Status: v1.PodStatus{Conditions: []v1.PodCondition{
			{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: DisruptionReasonTaintManager},
			{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: reason}}}}
	}
	recorded := func(r string) map[string]string { return map[string]string{contract.TerminationReasonAnnotation: r} }
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"unmarked", &v1.Pod{}, contract.TerminationEviction},
		{"marked by the taint manager", marked(DisruptionReasonTaintManager, nil), contract.TerminationIntolerableTaint},
		{"marked by the eviction API", marked("EvictionByEvictionAPI", recorded("Decommissioned")), contract.TerminationEviction},
		{"marked by this GC for a taint", marked(DisruptionReasonPodGC, recorded(contract.TerminationIntolerableTaint)), contract.TerminationIntolerableTaint},
		{"marked by this GC for an eviction", marked(DisruptionReasonPodGC, recorded(contract.TerminationEviction)), contract.TerminationEviction},
		{"marked by a pod GC that recorded nothing", marked(DisruptionReasonPodGC, nil), contract.TerminationEviction},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TerminationReason(tc.pod); got != tc.want {
				t.Errorf("TerminationReason = %q, want %q", got, tc.want)
			}
		})
	}
}

// A decision made from a cache may be about a pod that is gone and replaced
// under the same name: every write of ForceDelete names the pod's UID, so
// that the apiserver refuses it for the replacement.
func TestForceDeleteNamesThePodsUID(t *testing.T) {
	p := pod()
	p.UID, p.Spec.NodeName = "uid-1", "n1"
	down := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}}}
	client := fake.NewClientset(down, p)
	rec := record.NewFakeRecorder(10)
	g := &GC{Client: client, Recorder: rec, Health: nodehealth.NewObserver(client)}
	if err := g.ForceDelete(context.Background(), p, ReasonSafeDetach, contract.TerminationEviction, "test", nil); err != nil {
		t.Fatal(err)
	}
	// The Event says which termination reason the pod's hooks get.
	if ev := <-rec.Events; !strings.Contains(ev, "termination reason "+contract.TerminationEviction) {
		t.Errorf("the ForceDeleted event does not carry the termination reason: %s", ev)
	}
	writes := 0
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			writes++
			if !bytes.Contains(a.GetPatch(), []byte(`"uid":"uid-1"`)) {
				t.Errorf("%s %s/%s does not name the pod's UID: %s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), a.GetPatch())
			}
			if a.GetSubresource() != "status" || !bytes.Contains(a.GetPatch(), []byte(contract.TerminationReasonAnnotation)) {
				t.Errorf("want the termination reason in the status write: %s %s/%s %s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), a.GetPatch())
			}
		case k8stesting.DeleteAction:
			writes++
			if pre := a.GetDeleteOptions().Preconditions; pre == nil || pre.UID == nil || *pre.UID != p.UID {
				t.Errorf("the delete has no UID precondition: %+v", a.GetDeleteOptions())
			}
		}
	}
	if writes != 2 {
		t.Errorf("want the status (with the termination reason) and the delete written; got %d writes: %v", writes, client.Actions())
	}
}

// going runs once the node is found down, before any write of the pod (the
// Failed phase is what starts the attach/detach controller's detach), and
// not at all for a node that is alive.
func TestForceDeleteGoingBeforeThePodsWrites(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ready     v1.ConditionStatus
		wantGoing bool
	}{
		{name: "node down", ready: v1.ConditionUnknown, wantGoing: true},
		{name: "node alive", ready: v1.ConditionTrue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod()
			p.UID, p.Spec.NodeName = "uid-1", "n1"
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: tc.ready}}}}
			client := fake.NewClientset(node, p)
			g := &GC{Client: client, Recorder: record.NewFakeRecorder(10), Health: nodehealth.NewObserver(client)}
			writesBefore := -1
			err := g.ForceDelete(context.Background(), p, ReasonSafeDetach, contract.TerminationEviction, "test", func() {
				writesBefore = 0
				for _, a := range client.Actions() {
					if a.GetResource().Resource == "pods" && a.GetVerb() != "get" && a.GetVerb() != "list" {
						writesBefore++
					}
				}
			})
			if going := writesBefore >= 0; going != tc.wantGoing {
				t.Fatalf("going called: %v, want %v (err %v)", going, tc.wantGoing, err)
			}
			if tc.wantGoing && (err != nil || writesBefore != 0) {
				t.Errorf("going after %d writes of the pod (err %v), want before any", writesBefore, err)
			}
			if !tc.wantGoing && !errors.Is(err, ErrNodeAlive) {
				t.Errorf("err = %v, want ErrNodeAlive", err)
			}
		})
	}
}

func TestFailoverAllowed(t *testing.T) {
	pod := func(v string) *v1.Pod {
		p := &v1.Pod{}
		if v != "" {
			p.Labels = map[string]string{contract.FailoverLabel: v}
		}
		return p
	}
	ns := func(v string) map[string]string {
		if v == "" {
			return nil
		}
		return map[string]string{contract.FailoverLabel: v}
	}
	for _, tc := range []struct {
		name       string
		pod, ns    string
		optIn      bool
		allowed    bool
		whyMention string
	}{
		{name: "default", allowed: true},
		{name: "default opt-in", optIn: true, whyMention: "opt-in"},
		{name: "pod disabled", pod: "disabled", whyMention: "pod's label"},
		{name: "namespace disabled", ns: "disabled", whyMention: "namespace's label"},
		{name: "pod enabled wins over namespace disabled", pod: "enabled", ns: "disabled", allowed: true},
		{name: "pod disabled wins over namespace enabled", pod: "disabled", ns: "enabled", whyMention: "pod's label"},
		{name: "namespace enabled under opt-in", ns: "enabled", optIn: true, allowed: true},
		{name: "typo refuses", pod: "Enabled", whyMention: "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := FailoverAllowed(pod(tc.pod), ns(tc.ns), tc.optIn)
			if ok != tc.allowed || (!ok && !strings.Contains(why, tc.whyMention)) {
				t.Errorf("FailoverAllowed = %v, %q; want %v mentioning %q", ok, why, tc.allowed, tc.whyMention)
			}
		})
	}
}

func TestWantsClaim(t *testing.T) {
	now := metav1.Now()
	pod := func(name, node string, mutate func(*v1.Pod)) v1.Pod {
		p := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: v1.PodSpec{NodeName: node,
			Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}}}}}
		if mutate != nil {
			mutate(&p)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pods []v1.Pod
		want string
	}{
		{"a running pod on the node", []v1.Pod{pod("db-0", "n1", nil)}, "db-0"},
		{"on another node", []v1.Pod{pod("db-0", "n2", nil)}, ""},
		{"terminating", []v1.Pod{pod("db-0", "n1", func(p *v1.Pod) { p.DeletionTimestamp = &now })}, ""},
		{"finished", []v1.Pod{pod("db-0", "n1", func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded })}, ""},
		{"another namespace", []v1.Pod{pod("db-0", "n1", func(p *v1.Pod) { p.Namespace = "other" })}, ""},
		{"another claim", []v1.Pod{pod("db-0", "n1", func(p *v1.Pod) { p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "x" })}, ""},
		{"an ephemeral volume's generated claim (<pod>-<volume>)", []v1.Pod{pod("data-db", "n1", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "0", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}}
		})}, "data-db"},
		{"the second of two pods", []v1.Pod{pod("old", "n1", func(p *v1.Pod) { p.DeletionTimestamp = &now }), pod("db-0", "n1", nil)}, "db-0"},
	} {
		got := WantsClaim(tc.pods, "n1", "ns", "data-db-0")
		if name := ""; got != nil {
			name = got.Name
			if name != tc.want {
				t.Errorf("%s: WantsClaim = %s, want %q", tc.name, name, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%s: WantsClaim = nil, want %s", tc.name, tc.want)
		}
	}
}
