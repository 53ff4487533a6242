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

package attacher

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	basemetrics "k8s.io/component-base/metrics"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// objs returns the objects of a detach of vol-1 (PV pv1) from node-1: the
// node given, its CSINode, the PV and the VolumeAttachment being deleted.
func objs(n *v1.Node) []runtime.Object {
	out := []runtime.Object{csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")}
	if n != nil {
		out = append(out, n)
	}
	return out
}

// claimedObjs is objs with pv1 bound to the claim default/<claim>, and pods.
func claimedObjs(claim string, n *v1.Node, pods ...*v1.Pod) []runtime.Object {
	out := []runtime.Object{csiNode("node-1"), detachingVA("va1", "pv1", "node-1"), n,
		pv("pv1", "vol-1", func(p *v1.PersistentVolume) { p.Spec.ClaimRef = &v1.ObjectReference{Namespace: "default", Name: claim} })}
	for _, p := range pods {
		out = append(out, p)
	}
	return out
}

// podUsing is a running pod in default on node that mounts claim.
func podUsing(name, node, claim string, mods ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.PodSpec{NodeName: node, Volumes: []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

// ephemeralPod is a pod named name on node whose generic ephemeral volume
// vol has the claim name-vol.
func ephemeralPod(name, node, vol string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.PodSpec{NodeName: node, Volumes: []v1.Volume{{Name: vol, VolumeSource: v1.VolumeSource{
			Ephemeral: &v1.EphemeralVolumeSource{}}}}},
	}
}

// detach runs Detach of vol-1 from node-1 as external-attacher's handler
// calls it: under --timeout, for va1, and again once the fence pool says
// the fence it was handed is over, as Handler.Requeue makes it.
func (e *env) detach() error {
	for range 3 {
		ctx, cancel := context.WithTimeout(withVolumeAttachment(e.ctx, detachingVA("va1", "pv1", "node-1")), 2*time.Second)
		err := e.a.Detach(ctx, "vol-1", "node-1-id", nil)
		cancel()
		if !IsFencePending(err) {
			return err
		}
		e.waitFenceDone("va1")
	}
	e.t.Fatal("Detach still pending after its fence was over")
	return nil
}

func TestDetach(t *testing.T) {
	notReady := readyStatus(v1.ConditionFalse)
	manualFR := fencingRequest("node-1", fencingv1alpha1.OriginManual, fencingv1alpha1.PhasePending)
	autoFR := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing)
	intent := fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "vol-1", StartedTime: &t0}
	plain := []string{"unpublish vol-1 node-1-id"}
	fenced := []string{"unpublish vol-1 node-1-id fence"}
	// A fence: the Detach that hands it to the fence pool, the fence
	// worker before it acts and the Detach that finds it over each read the
	// node live.
	fenceReads := []string{"get nodes node-1", "get nodes node-1", "get nodes node-1"}
	tests := []struct {
		name string
		envConfig
		wantSent    []string
		wantErr     string
		wantActions []string // Node reads and writes
		wantFenced  bool     // the record says vol-1 fenced on node-1
		wantNoFR    bool     // no FencingRequest exists afterwards
		wantEvents  []string // prefixes, in order
		// metrics: "metric/reason" -> growth.
		wantMetrics map[string]float64
	}{
		{
			name:      "Ready node, read live: plain unpublish, no record",
			envConfig: envConfig{objects: objs(node("node-1"))},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
		},
		{
			name:      "S1: Ready node whose kubelet still uses the volume (volumesInUse), read live: fenced and recorded",
			envConfig: envConfig{objects: objs(node("node-1", inUse("vol-1")))},
			wantSent:  fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/volume-in-use": 1, "csi_fence_forced_detaches_total/volume-in-use": 1},
		},
		{
			name:      "S1: the cache does not show the volume in use, the live Node does: fenced",
			envConfig: envConfig{objects: objs(node("node-1", inUse("vol-1"))), cache: objs(node("node-1"))},
			wantSent:  fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/volume-in-use": 1},
		},
		{
			name:      "S4 (trial seeds 11032, 13100): Ready, in use for a pod on the node that wants the volume, scheduled there after the detach was decided: plain",
			envConfig: envConfig{objects: claimedObjs("data", node("node-1", inUse("vol-1")), podUsing("db-0", "node-1", "data"))},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
		},
		{
			name:      "S4: the same through a generic ephemeral volume's claim (<pod>-<volume>): plain",
			envConfig: envConfig{objects: claimedObjs("db-data", node("node-1", inUse("vol-1")), ephemeralPod("db", "node-1", "data"))},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
		},
		{
			name: "S1: in use, the pod on the node that uses it is terminating (its containers may run): fenced",
			envConfig: envConfig{objects: claimedObjs("data", node("node-1", inUse("vol-1")), podUsing("db-0", "node-1", "data", func(p *v1.Pod) {
				p.DeletionTimestamp = &metav1.Time{Time: t0.Time}
			}))},
			wantSent: fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents: []string{"Normal FencedUnpublish"},
		},
		{
			name:      "S1: in use, the pod that wants the volume is on another node: fenced",
			envConfig: envConfig{objects: claimedObjs("data", node("node-1", inUse("vol-1")), podUsing("db-0", "node-2", "data"))},
			wantSent:  fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents: []string{"Normal FencedUnpublish"},
		},
		{
			name:      "S1: in use, a pod on the node uses another claim: fenced",
			envConfig: envConfig{objects: claimedObjs("data", node("node-1", inUse("vol-1")), podUsing("db-0", "node-1", "other"))},
			wantSent:  fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents: []string{"Normal FencedUnpublish"},
		},
		{
			name:      "the cache shows the volume in use, the kubelet unmounted it since (read live): plain",
			envConfig: envConfig{objects: objs(node("node-1")), cache: objs(node("node-1", inUse("vol-1")))},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
		},
		{
			name:      "another volume in use on the node: plain",
			envConfig: envConfig{objects: objs(node("node-1", inUse("vol-2")))},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
		},
		{
			name:      "S1: volume in use, driver without UNPUBLISH_FENCE: the detach waits for the kubelet, nothing sent",
			envConfig: envConfig{objects: objs(node("node-1", inUse("vol-1"))), cannotFence: true},
			wantSent:  nil, wantActions: []string{"get nodes node-1"}, wantNoFR: true, wantErr: "still in use on node node-1",
		},
		{
			name:      "S1: volume in use, driver fencing on the out-of-service taint, no taint: the detach waits",
			envConfig: envConfig{objects: objs(node("node-1", inUse("vol-1"))), cannotFence: true, fencesOnOutOfService: true},
			wantSent:  nil, wantActions: []string{"get nodes node-1"}, wantNoFR: true, wantErr: "still in use on node node-1",
		},
		{
			name:      "S1: volume in use, no FencingRequest API: the fence cannot be recorded, the detach waits",
			envConfig: envConfig{objects: objs(node("node-1", inUse("vol-1"))), noRecord: true},
			wantSent:  nil, wantActions: []string{"get nodes node-1"}, wantNoFR: true, wantErr: "still in use on node node-1",
		},
		{
			name:      "NotReady node, read live: fenced and recorded",
			envConfig: envConfig{objects: objs(node("node-1", notReady))},
			wantSent:  fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/node-not-ready": 1, "csi_fence_forced_detaches_total/node-not-ready": 1},
		},
		{
			name:      "Node and CSINode deleted: the node comes from the VolumeAttachment, the ID from its annotation; fenced",
			envConfig: envConfig{objects: []runtime.Object{pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")}},
			wantSent:  fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/node-deleted": 1},
		},
		{
			name:      "out-of-service taint: fenced",
			envConfig: envConfig{objects: objs(node("node-1", notReady, outOfServiceTaint))},
			wantSent:  fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/out-of-service": 1},
		},
		{
			name:      "S4: Ready node with a manual FencingRequest, read live: fenced",
			envConfig: envConfig{objects: objs(node("node-1")), frs: []*fencingv1alpha1.FencingRequest{manualFR}},
			wantSent:  fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/fencing-request": 1},
		},
		{
			name:      "S4: Ready node with the failover's automatic FencingRequest: plain",
			envConfig: envConfig{objects: objs(node("node-1")), frs: []*fencingv1alpha1.FencingRequest{autoFR}},
			wantSent:  plain, wantActions: []string{"get nodes node-1"},
		},
		{
			name:      "S4: the cache still shows the manual request, the API no longer has it: plain",
			envConfig: envConfig{objects: objs(node("node-1")), frCache: []*fencingv1alpha1.FencingRequest{manualFR}},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
		},
		{
			name:      "S4: the cache says NotReady, the node is Ready again when read live: plain",
			envConfig: envConfig{objects: objs(node("node-1")), cache: objs(node("node-1", notReady))},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
		},
		{
			name: "S8: Ready node, the record holds an uncleaned intent for the volume: sticky, fenced",
			envConfig: envConfig{objects: objs(node("node-1")),
				frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseComplete, intent)}},
			wantSent: fenced, wantActions: fenceReads, wantFenced: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/quarantined": 1},
		},
		{
			name: "already recorded fenced from the node: no call to the driver, no write",
			envConfig: envConfig{objects: objs(node("node-1", notReady)),
				frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced, fencedEntry("vol-1"))}},
			wantSent: nil, wantActions: []string{"get nodes node-1"}, wantFenced: true,
		},
		{
			name:      "driver without UNPUBLISH_FENCE: the field is never sent, even from a NotReady node",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), cannotFence: true},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
		},
		{
			name:      "driver fencing on the out-of-service taint, node tainted: its plain unpublish is the fence, recorded",
			envConfig: envConfig{objects: objs(node("node-1", notReady, outOfServiceTaint)), cannotFence: true, fencesOnOutOfService: true},
			wantSent:  plain, wantActions: fenceReads, wantFenced: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/out-of-service": 1},
		},
		{
			name:      "driver fencing on the out-of-service taint, node only NotReady: plain, not recorded",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), cannotFence: true, fencesOnOutOfService: true},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
		},
		{
			name:      "no FencingRequest API (CRD or RBAC): a fence nobody could record is not sent; plain, warning, metric",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), noRecord: true},
			wantSent:  plain, wantActions: []string{"get nodes node-1"}, wantNoFR: true,
			wantEvents:  []string{"Warning FenceFailed"},
			wantMetrics: map[string]float64{"csi_fence_unfenced_detaches_total/node-not-ready": 1},
		},
		{
			name:      "no access to Nodes: external-attacher's plain unpublish, nothing read",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), noNodes: true},
			wantSent:  plain, wantNoFR: true,
		},
		{
			name: "the driver refuses the fence: error, the attempt stays recorded (S8), warning",
			envConfig: envConfig{objects: objs(node("node-1", notReady)),
				unpublish: func(context.Context, *csi.ControllerUnpublishVolumeRequest) error {
					return status.Error(codes.FailedPrecondition, "cannot prove the node stopped")
				}},
			wantSent: fenced, wantActions: fenceReads, wantErr: "refused to fence volume vol-1 from node node-1",
			wantEvents:  []string{"Warning FenceFailed"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublish_errors_total/node-not-ready": 1},
		},
		{
			name: "the intent cannot be recorded: nothing is sent, error",
			envConfig: envConfig{objects: objs(node("node-1", notReady)),
				frReactors: []reactor{{"create", "fencingrequests", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: fencingv1alpha1.Resource.Group, Resource: "fencingrequests"}, "node-1", nil)
				}}}},
			wantSent: nil, wantActions: fenceReads, wantErr: "recording the intent to fence before fencing", wantNoFR: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.envConfig)
			before := metricValues(t, tc.wantMetrics)
			err := e.detach()
			checkErr(t, err, tc.wantErr)
			if got := e.sent(); !reflect.DeepEqual(got, tc.wantSent) {
				t.Errorf("driver received %q, want %q", got, tc.wantSent)
			}
			if got := actions(e.client.Actions()); !reflect.DeepEqual(got, tc.wantActions) {
				t.Errorf("API actions %q, want %q", got, tc.wantActions)
			}
			fr := e.getFR("node-1")
			if got := fencerecord.IsFenced(fr, drv, "vol-1"); got != tc.wantFenced {
				t.Errorf("recorded fenced = %v, want %v: %+v", got, tc.wantFenced, fr)
			}
			if tc.wantNoFR && fr != nil {
				t.Errorf("a FencingRequest was written: %+v", fr)
			}
			if tc.wantErr != "" && !tc.wantNoFR && !fencerecord.MayBeQuarantined(fr, drv, "vol-1") {
				t.Errorf("a failed fence was forgotten: %+v", fr)
			}
			checkEvents(t, e.events(), tc.wantEvents)
			checkMetrics(t, before, metricValues(t, tc.wantMetrics), tc.wantMetrics)
		})
	}
}

// S8, write-ahead: when the driver receives the fence, the record already
// says it may be quarantined (intent, no outcome); once the fence returns,
// the record says fenced before Detach does.
func TestDetachRecordsTheIntentBeforeTheFence(t *testing.T) {
	var e *env
	var atRPC []*fencingv1alpha1.FencedVolume // the entry at each call
	e = newEnv(t, envConfig{objects: objs(node("node-1", readyStatus(v1.ConditionUnknown))),
		unpublish: func(context.Context, *csi.ControllerUnpublishVolumeRequest) error {
			atRPC = append(atRPC, fencerecord.Find(e.getFR("node-1"), drv, "vol-1"))
			return nil
		}})
	if err := e.detach(); err != nil {
		t.Fatal(err)
	}
	if len(atRPC) != 1 {
		t.Fatalf("the driver was called %d times, want once", len(atRPC))
	}
	switch atRPC := atRPC[0]; {
	case atRPC == nil:
		t.Fatal("the driver was called before the intent was recorded")
	case atRPC.StartedTime == nil || atRPC.FencedTime != nil:
		t.Errorf("at the call the entry was %+v, want the intent alone", atRPC)
	case atRPC.NodeID != "node-1-id" || atRPC.PersistentVolumeName != "pv1":
		t.Errorf("the entry does not say what was fenced: %+v", atRPC)
	}
	if !fencerecord.IsFenced(e.getFR("node-1"), drv, "vol-1") {
		t.Errorf("the outcome was not recorded: %+v", e.getFR("node-1"))
	}
}

// S8: a fence cut off by --timeout may have happened: the error is
// returned (external-attacher keeps its finalizer and retries) and the
// record keeps the volume possibly quarantined.
func TestDetachTimeoutKeepsTheFence(t *testing.T) {
	e := newEnv(t, envConfig{objects: objs(node("node-1", readyStatus(v1.ConditionFalse))), timeout: 300 * time.Millisecond,
		unpublish: func(ctx context.Context, _ *csi.ControllerUnpublishVolumeRequest) error {
			<-ctx.Done()
			return ctx.Err()
		}})
	err := e.detach()
	checkErr(t, err, "failed, will retry")
	if fr := e.getFR("node-1"); !fencerecord.MayBeQuarantined(fr, drv, "vol-1") || fencerecord.IsFenced(fr, drv, "vol-1") {
		t.Errorf("record %+v, want the volume possibly quarantined, not confirmed", fr)
	}
}

func TestAttach(t *testing.T) {
	target := va("va1", "pv1", "node-1")
	base := func(n *v1.Node, more ...runtime.Object) []runtime.Object {
		return append([]runtime.Object{n, csiNode("node-1"), pv("pv1", "vol-1"), target}, more...)
	}
	tests := []struct {
		name string
		envConfig
		wantErr string
	}{
		{name: "healthy node: published", envConfig: envConfig{objects: base(node("node-1"))}},
		{name: "NotReady node: published (only a quarantine stops a publish)", envConfig: envConfig{objects: base(node("node-1", readyStatus(v1.ConditionFalse)))}},
		{name: "S2: quarantine taint", envConfig: envConfig{objects: base(node("node-1", quarantineTaint))}, wantErr: "is quarantined"},
		{name: "S2: the record says the volume may be quarantined there", envConfig: envConfig{objects: base(node("node-1")),
			frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing,
				fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "vol-1", StartedTime: &t0})}},
			wantErr: "volume vol-1 is quarantined on node node-1"},
		{name: "S2: a fence intent written a moment ago, in the API but not yet in the cache: read live, refused",
			envConfig: envConfig{objects: base(node("node-1")), frCache: []*fencingv1alpha1.FencingRequest{},
				frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing,
					fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "vol-1", StartedTime: &t0})}},
			wantErr: "volume vol-1 is quarantined on node node-1"},
		{name: "S2: cleaned up: published", envConfig: envConfig{objects: base(node("node-1")),
			frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", "", fencingv1alpha1.PhaseComplete, cleanedEntry("vol-1"))}}},
		{name: "S1: still attached to another node", envConfig: envConfig{objects: base(node("node-1"), va("va0", "pv1", "node-0", withFinalizer, attached))},
			wantErr: "still attached to node node-0"},
		{name: "S1 does not hold a RWX volume", envConfig: envConfig{objects: []runtime.Object{node("node-1"), csiNode("node-1"),
			pv("pv1", "vol-1", withModes(v1.ReadWriteMany)), target, va("va0", "pv1", "node-0", withFinalizer, attached)}}},
		{name: "no access to Nodes: the taint is not seen, published as external-attacher does", envConfig: envConfig{objects: base(node("node-1", quarantineTaint)), noNodes: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.envConfig)
			ctx, cancel := context.WithTimeout(withVolumeAttachment(e.ctx, target), 2*time.Second)
			defer cancel()
			md, detached, err := e.a.Attach(ctx, "vol-1", false, "node-1-id", &csi.VolumeCapability{}, nil, nil)
			checkErr(t, err, tc.wantErr)
			want := []string{"publish vol-1 node-1-id"}
			if tc.wantErr != "" {
				want = nil
				if !detached {
					t.Error("a refusal must say detached: nothing was sent")
				}
			} else if md["lun"] != "1" {
				t.Errorf("publish context %v", md)
			}
			if got := e.sent(); !reflect.DeepEqual(got, want) {
				t.Errorf("driver received %q, want %q", got, want)
			}
			// A publish costs one live read of the node's FencingRequest
			// at most, and nothing else live.
			if got := actions(e.dyn.Actions()); len(got) > 1 || (len(got) == 1 && got[0] != "get fencingrequests node-1") {
				t.Errorf("FencingRequest requests %q, want one live read at most", got)
			}
			if got := actions(e.client.Actions()); len(got) != 0 {
				t.Errorf("API requests %q, want none", got)
			}
		})
	}
}

func checkEvents(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("events %q, want %q", got, want)
		return
	}
	for i := range got {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("event %q, want %q...", got[i], want[i])
		}
	}
}

func metricValues(t *testing.T, keys map[string]float64) map[string]float64 {
	t.Helper()
	vecs := map[string]*basemetrics.CounterVec{
		"csi_fence_fenced_unpublishes_total":      fencedUnpublishes,
		"csi_fence_fenced_unpublish_errors_total": fencedUnpublishErrors,
		"csi_fence_forced_detaches_total":         forcedDetaches,
		"csi_fence_unfenced_detaches_total":       unfencedDetaches,
	}
	out := map[string]float64{}
	for k := range keys {
		name, reason, _ := strings.Cut(k, "/")
		vec, ok := vecs[name]
		if !ok {
			t.Fatalf("unknown metric %q", name)
		}
		out[k] = counter(t, vec, reason)
	}
	return out
}

func checkMetrics(t *testing.T, before, after, want map[string]float64) {
	t.Helper()
	for k, w := range want {
		if got := after[k] - before[k]; got != w {
			t.Errorf("metric %s grew by %v, want %v", k, got, w)
		}
	}
}

// S1: external-attacher replaces the node ID on a VolumeAttachment right
// before each publish. An attachment published (or half published) under
// the node's old ID and published again after the node plugin registered a
// new one would stay published under the old ID, out of reach of the detach
// and of any fence: the old ID is unpublished first. Here the Attacher is
// called as if Handler had not recorded the old ID (the CSINode changed
// between its read and external-attacher's): it records it itself, before
// anything is sent, and removes the record only once the old ID is
// unpublished. Its unpublish failing keeps the record for the retry; an old
// ID that another node registers now is not unpublished (it could cut that
// node off), the publish waits, and the record stays for the admin.
func TestAttachUnpublishesThePreviousNodeID(t *testing.T) {
	synced := va("va1", "pv1", "node-1", withNodeIDAnnotation("node-1-old-id"))
	// What external-attacher wrote a moment before it called Attach.
	written := va("va1", "pv1", "node-1", withNodeIDAnnotation("node-1-id"))
	otherNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-2"},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: drv, NodeID: "node-1-old-id"}}}}
	tests := []struct {
		name      string
		objects   []runtime.Object
		unpublish func(context.Context, *csi.ControllerUnpublishVolumeRequest) error
		// liveRecorded is a previous node ID the API shows and the
		// synced VolumeAttachment does not (the cache is behind).
		liveRecorded string
		wantErr      string
		wantSent     []string
		wantRecorded string
	}{
		{name: "unpublished from the previous ID, then published", wantSent: []string{"unpublish vol-1 node-1-old-id", "publish vol-1 node-1-id"}},
		{name: "the unpublish fails: nothing published, the previous ID recorded",
			unpublish: func(context.Context, *csi.ControllerUnpublishVolumeRequest) error {
				return status.Error(codes.Unavailable, "array busy")
			},
			wantErr: "previous node ID", wantSent: []string{"unpublish vol-1 node-1-old-id"}, wantRecorded: "node-1-old-id"},
		{name: "another node registers the previous ID now: refused, nothing sent, the previous ID recorded", objects: []runtime.Object{otherNode},
			wantErr: "which node node-2 registers now", wantRecorded: "node-1-old-id"},
		{name: "the API records another previous ID the cache does not show: kept, nothing sent", liveRecorded: "node-1-mid-id",
			wantErr: `records the previous node ID "node-1-mid-id"`, wantRecorded: "node-1-mid-id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			live := written.DeepCopy()
			if tc.liveRecorded != "" {
				live.Annotations[contract.PreviousNodeIDAnnotation] = tc.liveRecorded
			}
			objs := append([]runtime.Object{node("node-1"), csiNode("node-1"), pv("pv1", "vol-1"), live}, tc.objects...)
			e := newEnv(t, envConfig{objects: objs, unpublish: tc.unpublish})
			ctx, cancel := context.WithTimeout(withVolumeAttachment(e.ctx, synced), 5*time.Second)
			defer cancel()
			_, _, err := e.a.Attach(ctx, "vol-1", false, "node-1-id", &csi.VolumeCapability{}, nil, nil)
			checkErr(t, err, tc.wantErr)
			// sent lists publishes before unpublishes; the failing unpublish
			// shows that the publish waits for it.
			if got, want := e.sent(), slices.Sorted(slices.Values(tc.wantSent)); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
				t.Errorf("driver received %q, want %q", got, tc.wantSent)
			}
			got, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if id := got.Annotations[contract.NodeIDAnnotation]; id != "node-1-id" {
				t.Errorf("node ID annotation %q, want external-attacher's node-1-id", id)
			}
			if id := got.Annotations[contract.PreviousNodeIDAnnotation]; id != tc.wantRecorded {
				t.Errorf("previous node ID annotation %q, want %q", id, tc.wantRecorded)
			}
			if tc.liveRecorded == "" && !slices.ContainsFunc(e.events(), func(ev string) bool { return strings.HasPrefix(ev, "Warning "+EventReasonNodeIDChanged) }) {
				t.Errorf("no %s event: %v", EventReasonNodeIDChanged, e.events())
			}
		})
	}
}
