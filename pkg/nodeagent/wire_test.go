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

package nodeagent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	csitestdriver "github.com/kubernetes-csi/csi-test/v5/driver"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-fence/fence-attacher/pkg/fence"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

// These tests pin the CSI calls themselves against csi-test's gomock node
// server: which RPCs, in which order, on which paths, and the force bit on
// the wire (pkg/fence's field 3).

func (e *env) startGomock(t *testing.T) *csitestdriver.MockNodeServer {
	ctrl := gomock.NewController(t)
	node := csitestdriver.NewMockNodeServer(ctrl)
	d := csitestdriver.NewMockCSIDriver(&csitestdriver.MockCSIDriverServers{Node: node})
	e.sock = filepath.Join(socketDir(t), "csi.sock")
	if err := d.StartOnAddress("unix", e.sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	e.dial()
	return node
}

func nodeCaps(types ...csi.NodeServiceCapability_RPC_Type) *csi.NodeGetCapabilitiesResponse {
	rsp := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range types {
		rsp.Capabilities = append(rsp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return rsp
}

// syncOnce builds an agent, waits for its informer and runs one sync of
// handle, so that the CSI calls of exactly one attempt are seen.
func (e *env) syncOnce(handle string) error {
	e.t.Helper()
	a, err := New(e.options())
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	a.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.informer.HasSynced) {
		e.t.Fatal("informer did not sync")
	}
	return a.syncVolume(ctx, handle)
}

// unpublishCall expects one NodeUnpublishVolume of target with the force bit.
func unpublishCall(t *testing.T, node *csitestdriver.MockNodeServer, target string, force bool, rspErr error) *gomock.Call {
	return node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
			got, err := fence.GetNodeUnpublishForce(req)
			if err != nil || got != force || req.GetVolumeId() != "vol-a" || req.GetTargetPath() != target {
				t.Errorf("NodeUnpublishVolume(%s, %s, force=%v, %v), want (vol-a, %s, force=%v)", req.GetVolumeId(), req.GetTargetPath(), got, err, target, force)
			}
			return &csi.NodeUnpublishVolumeResponse{}, rspErr
		})
}

func unstageCall(t *testing.T, node *csitestdriver.MockNodeServer, staging string, force bool) *gomock.Call {
	return node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
			got, err := fence.GetNodeUnstageForce(req)
			if err != nil || got != force || req.GetVolumeId() != "vol-a" || req.GetStagingTargetPath() != staging {
				t.Errorf("NodeUnstageVolume(%s, %s, force=%v, %v), want (vol-a, %s, force=%v)", req.GetVolumeId(), req.GetStagingTargetPath(), got, err, staging, force)
			}
			return &csi.NodeUnstageVolumeResponse{}, nil
		})
}

func TestWire(t *testing.T) {
	stage := csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME
	tests := []struct {
		name string
		caps []csi.NodeServiceCapability_RPC_Type
		// targetMounted: the publish path is still a mount point after a
		// successful NodeUnpublishVolume (a broken driver).
		targetMounted bool
		unpublishErr  error
		wantForce     bool
		wantUnstage   bool
		wantErr       string
	}{
		{name: "force and stage", caps: []csi.NodeServiceCapability_RPC_Type{stage, fence.NodeForceUnpublish}, wantForce: true, wantUnstage: true},
		{name: "force, no stage", caps: []csi.NodeServiceCapability_RPC_Type{fence.NodeForceUnpublish}, wantForce: true},
		{name: "no force: plain calls", caps: []csi.NodeServiceCapability_RPC_Type{stage}, wantUnstage: true},
		{
			name: "unpublish fails: no unstage", caps: []csi.NodeServiceCapability_RPC_Type{stage, fence.NodeForceUnpublish},
			unpublishErr: status.Error(codes.Internal, "device busy"), wantForce: true, wantErr: "device busy",
		},
		{
			name: "target still mounted after unpublish: nothing removed, no unstage", caps: []csi.NodeServiceCapability_RPC_Type{stage, fence.NodeForceUnpublish},
			targetMounted: true, wantForce: true, wantErr: "still a mount point",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			node := e.startGomock(t)
			e.record("vol-a", "pv-a")
			e.mount0("vol-a", "pv-a", "pod-1")
			staging, err := e.layout.PrepareStage(testDriver, "vol-a")
			if err != nil {
				t.Fatal(err)
			}
			target := e.layout.PublishPath("pod-1", "pv-a")
			if tc.targetMounted {
				e.mounts.set(target, true)
			}

			node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(nodeCaps(tc.caps...), nil)
			node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csi.NodeGetInfoResponse{NodeId: testNode}, nil)
			calls := []any{unpublishCall(t, node, target, tc.wantForce, tc.unpublishErr)}
			if tc.wantUnstage && tc.wantErr == "" {
				calls = append(calls, unstageCall(t, node, staging, tc.wantForce))
			}
			gomock.InOrder(calls...)

			err = e.syncOnce("vol-a")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				if v := e.entry("vol-a"); v.CleanedTime != nil || !strings.Contains(v.CleanupError, tc.wantErr) {
					t.Errorf("record: %+v", v)
				}
				mustExist(t, filepath.Join(e.layout.PodVolumeDir("pod-1", "pv-a"), kubeletlayout.VolDataFileName), staging)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v := e.entry("vol-a"); v.CleanedTime == nil {
				t.Errorf("not recorded clean: %+v", v)
			}
			mustBeGone(t, e.layout.PodVolumeDir("pod-1", "pv-a"), filepath.Dir(staging))
		})
	}
}
