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

package fence

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func nodeCap(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
	return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
}

func TestGetNodeCapabilities(t *testing.T) {
	tests := []struct {
		name      string
		caps      []*csi.NodeServiceCapability
		wantForce bool
		wantStage bool
		wantErr   bool
	}{
		{"none", nil, false, false, false},
		{"stage only", []*csi.NodeServiceCapability{nodeCap(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)}, false, true, false},
		{"force and stage", []*csi.NodeServiceCapability{nodeCap(NodeForceUnpublish), nodeCap(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)}, true, true, false},
		{"PR 477's 7 is GET_VOLUME_HEALTH, not force", []*csi.NodeServiceCapability{nodeCap(7)}, false, false, false},
		{"garbage entry", []*csi.NodeServiceCapability{{}}, false, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctrl := gomock.NewController(t)
			node := driver.NewMockNodeServer(ctrl)
			node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).
				Return(&csi.NodeGetCapabilitiesResponse{Capabilities: tc.caps}, nil)
			conn := startMock(t, &driver.MockCSIDriverServers{Node: node})

			got, err := GetNodeCapabilities(context.Background(), conn)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got.CanForceUnpublish() != tc.wantForce || got.CanStage() != tc.wantStage {
				t.Errorf("force=%v stage=%v, want %v %v", got.CanForceUnpublish(), got.CanStage(), tc.wantForce, tc.wantStage)
			}
		})
	}
}

func TestControllerCanFence(t *testing.T) {
	if ControllerCanFence(rpc.ControllerCapabilitySet{csi.ControllerServiceCapability_RPC_MODIFY_VOLUME: true}) {
		t.Error("MODIFY_VOLUME (PR 477's 14) must not read as UNPUBLISH_FENCE")
	}
	if !ControllerCanFence(rpc.ControllerCapabilitySet{ControllerUnpublishFence: true}) {
		t.Error("UNPUBLISH_FENCE not detected")
	}
}

// startMock serves servers on a unix socket and returns a client connection.
func startMock(t *testing.T, servers *driver.MockCSIDriverServers) *grpc.ClientConn {
	t.Helper()
	d := driver.NewMockCSIDriver(servers)
	sock := filepath.Join(t.TempDir(), "csi.sock")
	if err := d.StartOnAddress("unix", sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
