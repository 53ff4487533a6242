package attacher

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"go.uber.org/mock/gomock"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-fence/fence-attacher/pkg/csiclient"
)

// The handler over the real gRPC client, against csi-test's mock controller
// server on a unix socket: what the driver receives is what DESIGN.md's wire
// format says, and --timeout cuts a hanging driver off.
func TestHandlerOverGRPC(t *testing.T) {
	notReady := node("node-1", readyStatus(v1.ConditionFalse))
	tests := []struct {
		name        string
		caps        Capabilities
		hang        bool
		wantUnknown []byte // the unknown fields the server saw
		wantErr     string // in the VA's detachError; "" = detached
	}{
		{name: "driver without UNPUBLISH_FENCE: stock message from a NotReady node", caps: Capabilities{}, wantUnknown: nil},
		{name: "driver with UNPUBLISH_FENCE: fence=true on the wire", caps: Capabilities{Fence: true}, wantUnknown: []byte{0x20, 0x01}},
		{name: "hanging driver: DeadlineExceeded after --timeout", caps: Capabilities{Fence: true}, hang: true, wantUnknown: []byte{0x20, 0x01}, wantErr: "DeadlineExceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			srv := driver.NewMockControllerServer(gomock.NewController(t))
			var mu sync.Mutex
			var seen *csi.ControllerUnpublishVolumeRequest
			srv.EXPECT().ControllerUnpublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
				func(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
					mu.Lock()
					seen = proto.Clone(req).(*csi.ControllerUnpublishVolumeRequest)
					mu.Unlock()
					if tc.hang {
						<-ctx.Done()
						return nil, ctx.Err()
					}
					return &csi.ControllerUnpublishVolumeResponse{}, nil
				}).Times(1)
			d := driver.NewMockCSIDriver(&driver.MockCSIDriverServers{Controller: srv})
			sock := filepath.Join(t.TempDir(), "csi.sock")
			if err := d.StartOnAddress("unix", sock); err != nil {
				t.Fatal(err)
			}
			defer d.Stop()
			conn, err := connection.Connect(ctx, sock, metrics.NewCSIMetricsManager(drv))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			e := newEnv(t, envConfig{caps: tc.caps, attacher: csiclient.New(conn, 0),
				objects: objs(notReady, csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1"))})
			e.syncVA("va1")
			v := e.getVA("va1")
			mu.Lock()
			defer mu.Unlock()
			if seen == nil || seen.GetVolumeId() != "vol-1" || seen.GetNodeId() != "node-1-id" {
				t.Fatalf("server saw %v", seen)
			}
			if got := seen.ProtoReflect().GetUnknown(); !bytes.Equal(got, tc.wantUnknown) {
				t.Errorf("unknown fields on the server %x, want %x", got, tc.wantUnknown)
			}
			if tc.wantErr == "" {
				isDetached(t, v)
				return
			}
			keepsFinalizer(t, v)
			if !strings.Contains(v.Status.DetachError.Message, tc.wantErr) {
				t.Errorf("detachError %q, want %q", v.Status.DetachError.Message, tc.wantErr)
			}
		})
	}
}
