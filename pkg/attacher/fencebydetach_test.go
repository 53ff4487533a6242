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

// Fence by detach (issue 37): the detach of a driver that does not
// advertise UNPUBLISH_FENCE, and whose CSIDriver declares that its plain
// unpublish revokes access, from a node that failed is a fence: that plain
// unpublish, recorded write-ahead as one.

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

func TestDetachFenceByDetach(t *testing.T) {
	notReady := readyStatus(v1.ConditionFalse)
	plain := []string{"unpublish vol-1 node-1-id"}
	fenced := []string{"unpublish vol-1 node-1-id fence"}
	// A fence: the Detach that hands it to the fence pool, the fence
	// worker before it acts and the Detach that finds it over each read
	// the node, and for a declared driver its CSIDriver, live.
	declaredReads := []string{"get nodes node-1", "get csidrivers " + drv, "get nodes node-1", "get csidrivers " + drv, "get nodes node-1", "get csidrivers " + drv}
	fenceReads := []string{"get nodes node-1", "get nodes node-1", "get nodes node-1"}
	failing := func(context.Context, *csi.ControllerUnpublishVolumeRequest) error {
		return status.Error(codes.FailedPrecondition, "the disk is busy")
	}
	hanging := func(ctx context.Context, _ *csi.ControllerUnpublishVolumeRequest) error {
		<-ctx.Done()
		return ctx.Err()
	}
	tests := []struct {
		name string
		envConfig
		// csiDriverGet answers the live GETs of the CSIDriver.
		csiDriverGet clienttesting.ReactionFunc
		wantSent     []string
		wantErr      string
		wantActions  []string
		wantFenced   bool // the record says vol-1 fenced on node-1
		wantIntent   bool // the record keeps an entry of vol-1 not cleaned (S8)
		wantEvents   []string
		wantMetrics  map[string]float64
	}{
		{
			name:      "declared, NotReady node: the plain unpublish is the fence, recorded",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), cannotFence: true, declaration: "true"},
			wantSent:  plain, wantActions: declaredReads, wantFenced: true, wantIntent: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/node-not-ready": 1, "csi_fence_forced_detaches_total/node-not-ready": 1},
		},
		{
			name:      "declared, Node deleted: fenced by detach",
			envConfig: envConfig{objects: []runtime.Object{pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")}, cannotFence: true, declaration: "true"},
			wantSent:  plain, wantActions: declaredReads, wantFenced: true, wantIntent: true,
			wantEvents:  []string{"Normal FencedUnpublish"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublishes_total/node-deleted": 1},
		},
		{
			name:      "declared, Ready node: graceful, plain, the CSIDriver not even read",
			envConfig: envConfig{objects: objs(node("node-1")), cannotFence: true, declaration: "true"},
			wantSent:  plain, wantActions: []string{"get nodes node-1"},
		},
		{
			name:      "UNPUBLISH_FENCE and declared: fence=true, the CSIDriver not read",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), declaration: "true"},
			wantSent:  fenced, wantActions: fenceReads, wantFenced: true, wantIntent: true,
			wantEvents: []string{"Normal FencedUnpublish"},
		},
		{
			name:      "not declared, no UNPUBLISH_FENCE: unchanged, plain and not recorded",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), cannotFence: true, declaration: "-"},
			wantSent:  plain, wantActions: []string{"get nodes node-1", "get csidrivers " + drv},
		},
		{
			name:      "another value: no declaration, a warning on the CSIDriver, plain and not recorded",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), cannotFence: true, declaration: "yes"},
			wantSent:  plain, wantActions: []string{"get nodes node-1", "get csidrivers " + drv},
			wantEvents: []string{"Warning InvalidFenceDeclaration"},
		},
		{
			name:      "declared, the CSIDriver cannot be read now: nothing sent, the detach is retried",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), cannotFence: true, declaration: "true"},
			csiDriverGet: func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewServiceUnavailable("etcd down")
			},
			wantActions: []string{"get nodes node-1", "get csidrivers " + drv}, wantErr: "reading CSIDriver",
		},
		{
			name:      "declared, the unpublish fails: no fence, the reason on the VolumeAttachment, an Event and the metric; the intent stays (S8)",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), cannotFence: true, declaration: "true", unpublish: failing},
			wantSent:  plain, wantActions: declaredReads, wantIntent: true,
			wantErr:     "refused to fence volume vol-1 from node node-1",
			wantEvents:  []string{"Warning FenceFailed"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublish_errors_total/node-not-ready": 1},
		},
		{
			name:      "declared, the unpublish outlasts --timeout: no fence, retried",
			envConfig: envConfig{objects: objs(node("node-1", notReady)), cannotFence: true, declaration: "true", unpublish: hanging, timeout: 300 * time.Millisecond},
			wantSent:  plain, wantActions: declaredReads, wantIntent: true,
			wantErr:     "fencing volume vol-1 from node node-1 (node-not-ready) failed, will retry",
			wantEvents:  []string{"Warning FenceFailed"},
			wantMetrics: map[string]float64{"csi_fence_fenced_unpublish_errors_total/node-not-ready": 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.envConfig)
			if tc.csiDriverGet != nil {
				e.client.PrependReactor("get", "csidrivers", tc.csiDriverGet)
			}
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
			if got := fencerecord.MayBeQuarantined(fr, drv, "vol-1"); got != tc.wantIntent {
				t.Errorf("recorded as possibly quarantined = %v, want %v: %+v", got, tc.wantIntent, fr)
			}
			checkEvents(t, e.events(), tc.wantEvents)
			checkMetrics(t, before, metricValues(t, tc.wantMetrics), tc.wantMetrics)
		})
	}
}

// S1: the fence by detach goes to every node ID the volume may be published
// under: the previous one the VolumeAttachment records first, then the
// published one, both plain.
func TestFenceByDetachFromEveryNodeID(t *testing.T) {
	withPrevious := func(v *storagev1.VolumeAttachment) {
		v.Annotations[contract.PreviousNodeIDAnnotation] = "node-1-old-id"
	}
	detaching := detachingVA("va1", "pv1", "node-1", withPrevious)
	e := newEnv(t, envConfig{objects: []runtime.Object{csiNode("node-1"), pv("pv1", "vol-1"), detaching, node("node-1", readyStatus(v1.ConditionFalse))},
		cannotFence: true, declaration: "true"})
	var err error
	for range 3 {
		ctx, cancel := context.WithTimeout(withVolumeAttachment(e.ctx, detaching), 2*time.Second)
		err = e.a.Detach(ctx, "vol-1", "node-1-id", nil)
		cancel()
		if !IsFencePending(err) {
			break
		}
		e.waitFenceDone("va1")
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"unpublish vol-1 node-1-old-id", "unpublish vol-1 node-1-id"}
	if got := e.sentInOrder(); !slices.Equal(got, want) {
		t.Errorf("driver received %q, want %q", got, want)
	}
	if fr := e.getFR("node-1"); !fencerecord.IsFenced(fr, drv, "vol-1") {
		t.Errorf("not recorded fenced: %+v", fr)
	}
}

// S2: once fenced by detach, the volume is not published to the node
// again until the node agent cleaned it.
func TestFenceByDetachRefusesPublishUntilCleaned(t *testing.T) {
	e := newEnv(t, envConfig{objects: objs(node("node-1", readyStatus(v1.ConditionFalse))), cannotFence: true, declaration: "true"})
	if err := e.detach(); err != nil {
		t.Fatal(err)
	}
	if fr := e.getFR("node-1"); !fencerecord.IsFenced(fr, drv, "vol-1") {
		t.Fatalf("not recorded fenced: %+v", fr)
	}
	target := va("va2", "pv1", "node-1")
	ctx, cancel := context.WithTimeout(withVolumeAttachment(e.ctx, target), 2*time.Second)
	defer cancel()
	_, detached, err := e.a.Attach(ctx, "vol-1", false, "node-1-id", &csi.VolumeCapability{}, nil, nil)
	checkErr(t, err, "volume vol-1 is quarantined on node node-1")
	if !detached {
		t.Error("a refused publish must say nothing was sent")
	}
	if got := e.sent(); slices.ContainsFunc(got, func(s string) bool { return s == "publish vol-1 node-1-id" }) {
		t.Errorf("published to the node the volume is quarantined on: %q", got)
	}
}
