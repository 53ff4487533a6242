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
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { t := metav1.NewTime(t0.Add(d)); return &t }

func node(name string, ready corev1.ConditionStatus, since time.Duration, taints []corev1.Taint, conds ...corev1.NodeCondition) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints}}
	n.Status.Conditions = append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: *at(since), Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}, conds...)
	if ready == corev1.ConditionTrue {
		n.Status.Conditions[0].Reason, n.Status.Conditions[0].Message = "KubeletReady", ""
	}
	return n
}

func event(uid, ns, kind, objNS, name, reason, msg string, when time.Duration, count int32) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: uid, Namespace: ns, UID: types.UID(uid)},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: objNS, Name: name},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning,
		FirstTimestamp: *at(when), LastTimestamp: *at(when + time.Duration(count-1)*time.Second), Count: count,
	}
}

// A failover under way on node-a (storage fenced for one volume, another
// refused by the driver, one cleaned from an earlier failure, a pod
// force-deleted), a manual request completed on node-b, node-c healthy
// and untouched, node-d left quarantined without a record, and the record
// of a Node deleted since (gone-1), with the storm guard paused.
func fixture() (*fake.Clientset, []runtime.Object) {
	unreachable := corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute, TimeAdded: at(time.Second)}
	quarantine := corev1.Taint{Key: contract.QuarantineTaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: at(5 * time.Minute)}
	kube := fake.NewClientset(
		node("node-a", corev1.ConditionUnknown, 0, []corev1.Taint{unreachable, quarantine},
			corev1.NodeCondition{Type: contract.ConditionFencingComplete, Status: corev1.ConditionTrue, LastTransitionTime: *at(5*time.Minute + 2*time.Second), Reason: "StorageFenced"}),
		node("node-b", corev1.ConditionTrue, -time.Hour, nil),
		node("node-c", corev1.ConditionTrue, -time.Hour, nil),
		node("node-d", corev1.ConditionFalse, -time.Hour, []corev1.Taint{{Key: contract.QuarantineTaintKey, Effect: corev1.TaintEffectNoSchedule}}),
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: StormGuardLease, Namespace: "kube-system", Annotations: map[string]string{
			stormGuardNodesAnnotation: "node-a,gone-1", PausedAnnotation: "storage maintenance"}}},
		event("e1", "default", "Node", "", "node-a", "NodeQuarantined", "Node node-a quarantined", 5*time.Minute, 1),
		event("e2", "default", "VolumeAttachment", "", AttachmentName("vol-2", "mock.csi.io", "node-a"), "FenceFailed", "fence refused: cannot prove the node stopped", 5*time.Minute+4*time.Second, 3),
		event("e3", "web", "Pod", "web", "db-0", "ForceDeleted", "Force-deleted (SafeDetach)", 5*time.Minute+3*time.Second, 1),
		// Not this failover's: another node, a namesake pod elsewhere, the
		// attachment of the same volume on another node.
		event("x1", "default", "Node", "", "node-c", "NodeReady", "ready", 5*time.Minute, 1),
		event("x2", "other", "Pod", "other", "db-0", "Killing", "stopping", 5*time.Minute, 1),
		event("x3", "default", "VolumeAttachment", "", AttachmentName("vol-2", "mock.csi.io", "node-c"), "FenceFailed", "other node", 5*time.Minute, 1),
	)
	frs := []runtime.Object{
		record(&fencingv1alpha1.FencingRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "node-a", CreationTimestamp: *at(5 * time.Minute)},
			Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: "node-a", Origin: fencingv1alpha1.OriginAutomatic, Reason: "NodeUnreachable"},
			Status: fencingv1alpha1.FencingRequestStatus{
				Phase: fencingv1alpha1.PhaseFencing, StartTime: at(5 * time.Minute), ErrorReason: "FenceFailed",
				Volumes: []fencingv1alpha1.FencedVolume{
					{Driver: "mock.csi.io", VolumeHandle: "vol-1", PersistentVolumeName: "pv-1", StartedTime: at(5*time.Minute + time.Second), FencedTime: at(5*time.Minute + 2*time.Second)},
					{Driver: "mock.csi.io", VolumeHandle: "vol-2", StartedTime: at(5*time.Minute + time.Second), FenceError: "fence refused: cannot prove the node stopped"},
					{Driver: "mock.csi.io", VolumeHandle: "vol-0", StartedTime: at(-time.Hour), FencedTime: at(-time.Hour), CleanedTime: at(-50 * time.Minute)},
				},
				ForceDeletedPods: []fencingv1alpha1.ForceDeletedPod{{Namespace: "web", Name: "db-0", TerminationReason: "IntolerableTaint", DeletedTime: at(5*time.Minute + 3*time.Second)}},
			},
		}),
		record(&fencingv1alpha1.FencingRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "node-b", CreationTimestamp: *at(-30 * time.Minute)},
			Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: "node-b", Reason: "disk array maintenance"},
			Status: fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseComplete, StartTime: at(-30 * time.Minute), CompletionTime: at(-20 * time.Minute),
				Volumes: []fencingv1alpha1.FencedVolume{{Driver: "mock.csi.io", VolumeHandle: "vol-9", StartedTime: at(-30 * time.Minute), FencedTime: at(-29 * time.Minute), CleanedTime: at(-20 * time.Minute)}}},
		}),
		record(&fencingv1alpha1.FencingRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "gone-1", CreationTimestamp: *at(-2 * time.Hour)},
			Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: "gone-1", Origin: fencingv1alpha1.OriginAutomatic},
			Status: fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseFenced, StartTime: at(-2 * time.Hour),
				NodeFence: &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendPower, Config: "rack-1", Agent: "fence_ipmilan", StartedTime: at(-2 * time.Hour), Attempts: 2, ConfirmedTime: at(-2*time.Hour + 40*time.Second)}},
		}),
	}
	return kube, frs
}

func record(fr *fencingv1alpha1.FencingRequest) runtime.Object {
	u, err := fencingv1alpha1.ToUnstructured(fr)
	if err != nil {
		panic(err)
	}
	return u
}

func frClient(objs ...runtime.Object) (*fencingv1alpha1.Client, *dynamicfake.FakeDynamicClient) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"}, objs...)
	return fencingv1alpha1.NewClient(dyn), dyn
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name    string
		setup   func() (*fake.Clientset, []runtime.Object)
		listErr error
		want    string
		wantErr string
	}{{
		name:  "a failover under way, a manual request done, a node left quarantined, a deleted node's record, paused",
		setup: fixture,
		want: `NODE     READY     PHASE      ORIGIN      BACKEND   FENCED   PENDING   CLEANED   TAINTS                  STORM-GUARD   AGE     ERROR
gone-1   Gone      Fenced     Automatic   power     0        0         0         -                       admitted      2h10m   -
node-a   Unknown   Fencing    Automatic   storage   1        1         1         quarantine:NoSchedule   admitted      5m0s    FenceFailed
node-b   True      Complete   Manual      storage   0        0         1         -                       -             40m0s   -
node-d   False     -          -           -         0        0         0         quarantine:NoSchedule   -             -       -

Storm guard (Lease kube-system/csi-fence-storm-guard): 2 admitted (gone-1, node-a); PAUSED: storage maintenance (no new node is fenced)
`,
	}, {
		name: "nothing fenced, the storm guard never used",
		setup: func() (*fake.Clientset, []runtime.Object) {
			return fake.NewClientset(node("node-c", corev1.ConditionTrue, 0, nil)), nil
		},
		want: `No node is fenced, quarantined or under a FencingRequest.

Storm guard (Lease kube-system/csi-fence-storm-guard): no admission yet; not paused
`,
	}, {
		name:    "no CRD",
		setup:   func() (*fake.Clientset, []runtime.Object) { return fake.NewClientset(), nil },
		listErr: errors.New(`the server could not find the requested resource`),
		wantErr: "listing FencingRequests (is the CRD installed?): the server could not find the requested resource",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kube, objs := tc.setup()
			frs, dyn := frClient(objs...)
			if tc.listErr != nil {
				dyn.PrependReactor("list", "fencingrequests", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.listErr })
			}
			st, err := GetStatus(context.Background(), kube, frs, "kube-system")
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Table(t0.Add(10 * time.Minute)); got != tc.want {
				t.Errorf("status:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestTimeline(t *testing.T) {
	tests := []struct {
		name, node string
		want       string
		wantErr    string
	}{{
		name: "a failover under way: the Node's times, the record's, the Events of the node, its attachments and its pods",
		node: "node-a",
		// vol-0 was fenced and cleaned in an earlier failure, under the
		// same record: its times come first.
		want: `TIME                   SINCE    SOURCE           STEP
2026-11-25T09:00:00Z   +0s      FencingRequest   fence of vol-0 (mock.csi.io) recorded
2026-11-25T09:00:00Z   +0s      FencingRequest   volume vol-0 (mock.csi.io) fenced
2026-11-25T09:10:00Z   +10m0s   FencingRequest   volume vol-0 (mock.csi.io) cleaned on the node
2026-11-25T10:00:00Z   +1h0m    Node             node NotReady (Ready=Unknown): NodeStatusUnknown: Kubelet stopped posting node status.
2026-11-25T10:00:01Z   +1h0m    Node             taint node.kubernetes.io/unreachable:NoExecute added
2026-11-25T10:05:00Z   +1h5m    Node             taint csi-fence.io/quarantine:NoSchedule added
2026-11-25T10:05:00Z   +1h5m    FencingRequest   request created (Automatic): NodeUnreachable
2026-11-25T10:05:00Z   +1h5m    FencingRequest   fencing started
2026-11-25T10:05:00Z   +1h5m    Event            Warning NodeQuarantined on Node node-a: Node node-a quarantined
2026-11-25T10:05:01Z   +1h5m    FencingRequest   fence of pv-1 (mock.csi.io) recorded
2026-11-25T10:05:01Z   +1h5m    FencingRequest   fence of vol-2 (mock.csi.io) recorded, not confirmed: fence refused: cannot prove the node stopped
2026-11-25T10:05:02Z   +1h5m    Node             condition FencingComplete=True: StorageFenced
2026-11-25T10:05:02Z   +1h5m    FencingRequest   volume pv-1 (mock.csi.io) fenced
2026-11-25T10:05:03Z   +1h5m    FencingRequest   pod web/db-0 force-deleted: IntolerableTaint
2026-11-25T10:05:03Z   +1h5m    Event            Warning ForceDeleted on Pod web/db-0: Force-deleted (SafeDetach)
2026-11-25T10:05:04Z   +1h5m    Event            Warning FenceFailed on VolumeAttachment ` + AttachmentName("vol-2", "mock.csi.io", "node-a") + `: fence refused: cannot prove the node stopped (3 times, last 2026-11-25T10:05:06Z)
`,
	}, {
		name: "a deleted node powered off: the record alone",
		node: "gone-1",
		want: `TIME                   SINCE   SOURCE           STEP
2026-11-25T08:00:00Z   +0s     FencingRequest   request created (Automatic)
2026-11-25T08:00:00Z   +0s     FencingRequest   fencing started
2026-11-25T08:00:00Z   +0s     FencingRequest   power fence started (attempt 2): rack-1 fence_ipmilan
2026-11-25T08:00:40Z   +40s    FencingRequest   node confirmed off (power)
`,
	}, {
		name:    "a node never fenced and unknown",
		node:    "node-z",
		wantErr: "node node-z: no Node and no FencingRequest",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kube, objs := fixture()
			frs, _ := frClient(objs...)
			tl, err := GetTimeline(context.Background(), kube, frs, tc.node)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tl.Table(); got != tc.want {
				t.Errorf("timeline:\n%s\nwant:\n%s", got, tc.want)
			}
			if strings.Contains(tl.Table(), "node-c") || strings.Contains(tl.Table(), "stopping") {
				t.Errorf("another node's or object's Events in the timeline:\n%s", tl.Table())
			}
		})
	}
}

// The VolumeAttachment name is the attach/detach controller's: a known
// value of kubernetes' getAttachmentName.
func TestAttachmentName(t *testing.T) {
	// printf 'vol-1mock.csi.ionode-a' | sha256sum
	if got, want := AttachmentName("vol-1", "mock.csi.io", "node-a"), "csi-36e220c52700a9869843aea1c0ccc032e18d1a77a0f39f9db04c03a4e9dc413e"; got != want {
		t.Errorf("AttachmentName = %q, want %q", got, want)
	}
}
