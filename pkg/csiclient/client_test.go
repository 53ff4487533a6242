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

package csiclient

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// startDriver serves a gomock controller server on a unix socket and
// connects to it the way the binary does (csi-lib-utils connection.Connect
// with a metrics manager), so the bytes really cross gRPC.
func startDriver(t *testing.T, ctrl *driver.MockControllerServer) *grpc.ClientConn {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	d := driver.NewMockCSIDriver(&driver.MockCSIDriverServers{
		Controller: ctrl,
		Identity:   driver.NewMockIdentityServer(gomock.NewController(t)),
	})
	sock := filepath.Join(t.TempDir(), "csi.sock")
	if err := d.StartOnAddress("unix", sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	conn, err := connection.Connect(ctx, sock, metrics.NewCSIMetricsManager("test.csi.io"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// protoEq matches a request by proto.Equal, which also compares unknown
// fields, so an unexpected fence field fails the match.
type protoEq struct{ want proto.Message }

func (m protoEq) Matches(x any) bool {
	msg, ok := x.(proto.Message)
	return ok && proto.Equal(m.want, msg)
}
func (m protoEq) String() string { return fmt.Sprintf("is %v", m.want) }

func TestAttach(t *testing.T) {
	mountCap := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"noatime"}}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	req := AttachRequest{
		VolumeID: "vol-1", NodeID: "node-id-1", ReadOnly: true, Capability: mountCap,
		VolumeContext: map[string]string{"a": "b"}, Secrets: map[string]string{"user": "secret"},
	}
	wantReq := &csi.ControllerPublishVolumeRequest{
		VolumeId: "vol-1", NodeId: "node-id-1", Readonly: true, VolumeCapability: mountCap,
		VolumeContext: map[string]string{"a": "b"}, Secrets: map[string]string{"user": "secret"},
	}
	tests := []struct {
		name     string
		rsp      *csi.ControllerPublishVolumeResponse
		err      error
		wantMeta map[string]string
		wantCode codes.Code
	}{
		{name: "success with publish context", rsp: &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"lun": "3"}}, wantMeta: map[string]string{"lun": "3"}, wantCode: codes.OK},
		{name: "success without publish context", rsp: &csi.ControllerPublishVolumeResponse{}, wantCode: codes.OK},
		{name: "quarantined volume refused", err: status.Error(codes.FailedPrecondition, "volume is quarantined on this node"), wantCode: codes.FailedPrecondition},
		{name: "volume gone", err: status.Error(codes.NotFound, "no such volume"), wantCode: codes.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			mc := gomock.NewController(t)
			srv := driver.NewMockControllerServer(mc)
			srv.EXPECT().ControllerPublishVolume(gomock.Any(), protoEq{wantReq}).Return(tc.rsp, tc.err).Times(1)
			c := New(startDriver(t, srv), 0)
			meta, err := c.Attach(ctx, req)
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.wantCode)
			}
			if !reflect.DeepEqual(meta, tc.wantMeta) {
				t.Errorf("metadata = %v, want %v", meta, tc.wantMeta)
			}
		})
	}
}

// The fence field is the contract with drivers: the server must see exactly
// the tag of field 4 with the value 1 when fencing, and nothing at all
// otherwise (a driver without UNPUBLISH_FENCE gets the stock message).
func TestDetachFenceOnTheWire(t *testing.T) {
	tests := []struct {
		name        string
		fence       bool
		wantUnknown []byte
	}{
		{name: "plain unpublish carries no unknown field", fence: false, wantUnknown: nil},
		{name: "fenced unpublish carries field 4 = true", fence: true, wantUnknown: []byte{0x20, 0x01}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			mc := gomock.NewController(t)
			srv := driver.NewMockControllerServer(mc)
			var seen *csi.ControllerUnpublishVolumeRequest
			srv.EXPECT().ControllerUnpublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
				func(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
					seen = proto.Clone(req).(*csi.ControllerUnpublishVolumeRequest)
					return &csi.ControllerUnpublishVolumeResponse{}, nil
				}).Times(1)
			c := New(startDriver(t, srv), 0)
			if err := c.Detach(ctx, "vol-1", "node-id-1", map[string]string{"k": "v"}, tc.fence); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if seen.GetVolumeId() != "vol-1" || seen.GetNodeId() != "node-id-1" || seen.GetSecrets()["k"] != "v" {
				t.Errorf("server saw %v", seen)
			}
			if got := seen.ProtoReflect().GetUnknown(); !bytes.Equal(got, tc.wantUnknown) {
				t.Errorf("unknown fields on the server = %x, want %x", got, tc.wantUnknown)
			}
			got, err := fence.GetFence(seen)
			if err != nil || got != tc.fence {
				t.Errorf("GetFence on the server = %v, %v; want %v", got, err, tc.fence)
			}
		})
	}
}

func TestDetachErrors(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode codes.Code
	}{
		{name: "fence refused", err: status.Error(codes.FailedPrecondition, "cannot prove the node stopped using the volume"), wantCode: codes.FailedPrecondition},
		{name: "driver unavailable", err: status.Error(codes.Unavailable, "array offline"), wantCode: codes.Unavailable},
		{name: "internal", err: status.Error(codes.Internal, "boom"), wantCode: codes.Internal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			srv := driver.NewMockControllerServer(gomock.NewController(t))
			srv.EXPECT().ControllerUnpublishVolume(gomock.Any(), gomock.Any()).Return(nil, tc.err).Times(1)
			err := New(startDriver(t, srv), 0).Detach(ctx, "vol-1", "node-id-1", nil, true)
			if got := status.Code(err); got != tc.wantCode {
				t.Errorf("code = %v (%v), want %v", got, err, tc.wantCode)
			}
		})
	}
}

// A plugin that hangs is cut off by the caller's --timeout: the call returns
// DeadlineExceeded instead of blocking the worker.
func TestTimeout(t *testing.T) {
	calls := []struct {
		name string
		call func(ctx context.Context, c *Client) error
	}{
		{"Attach", func(ctx context.Context, c *Client) error {
			_, err := c.Attach(ctx, AttachRequest{VolumeID: "v", NodeID: "n"})
			return err
		}},
		{"Detach", func(ctx context.Context, c *Client) error { return c.Detach(ctx, "v", "n", nil, true) }},
		{"ListVolumes", func(ctx context.Context, c *Client) error { _, err := c.ListVolumes(ctx); return err }},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			srv := driver.NewMockControllerServer(gomock.NewController(t))
			hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
			srv.EXPECT().ControllerPublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
				func(ctx context.Context, _ *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
					return nil, hang(ctx)
				}).AnyTimes()
			srv.EXPECT().ControllerUnpublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
				func(ctx context.Context, _ *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
					return nil, hang(ctx)
				}).AnyTimes()
			srv.EXPECT().ListVolumes(gomock.Any(), gomock.Any()).DoAndReturn(
				func(ctx context.Context, _ *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
					return nil, hang(ctx)
				}).AnyTimes()
			c := New(startDriver(t, srv), 0)
			tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := tc.call(tctx, c)
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("err = %v, want DeadlineExceeded", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("call took %v despite the timeout", d)
			}
		})
	}
}

func vol(id string, nodes ...string) *csi.ListVolumesResponse_Entry {
	return &csi.ListVolumesResponse_Entry{
		Volume: &csi.Volume{VolumeId: id},
		Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: nodes},
	}
}

func TestListVolumes(t *testing.T) {
	type page struct {
		token string // expected starting_token
		rsp   *csi.ListVolumesResponse
		err   error
	}
	tests := []struct {
		name       string
		maxEntries int32
		pages      []page
		want       map[string][]string
		wantErr    string
	}{
		{
			name: "one page, no limit",
			pages: []page{{token: "", rsp: &csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{
				vol("v1", "n1"), vol("v2"), vol("v3", "n1", "n2")}}}},
			want: map[string][]string{"v1": {"n1"}, "v2": nil, "v3": {"n1", "n2"}},
		},
		{
			name:       "paged by --max-entries",
			maxEntries: 2,
			pages: []page{
				{token: "", rsp: &csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{vol("v1", "n1"), vol("v2", "n2")}, NextToken: "t1"}},
				{token: "t1", rsp: &csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{vol("v3", "n3"), vol("v4")}, NextToken: "t2"}},
				{token: "t2", rsp: &csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{vol("v5", "n1")}}},
			},
			want: map[string][]string{"v1": {"n1"}, "v2": {"n2"}, "v3": {"n3"}, "v4": nil, "v5": {"n1"}},
		},
		{
			name:       "error on the second page loses nothing and says so",
			maxEntries: 1,
			pages: []page{
				{token: "", rsp: &csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{vol("v1", "n1")}, NextToken: "t1"}},
				{token: "t1", err: status.Error(codes.Aborted, "token expired")},
			},
			wantErr: "token expired",
		},
		{
			name:       "a token that repeats is an error, not an endless loop",
			maxEntries: 1,
			pages: []page{
				{token: "", rsp: &csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{vol("v1")}, NextToken: "t1"}},
				{token: "t1", rsp: &csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{vol("v2")}, NextToken: "t1"}},
			},
			wantErr: "second time",
		},
		{
			name:    "garbage entry without a volume",
			pages:   []page{{token: "", rsp: &csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{{}}}}},
			wantErr: "no volume ID",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			srv := driver.NewMockControllerServer(gomock.NewController(t))
			var calls []any
			for _, p := range tc.pages {
				want := &csi.ListVolumesRequest{MaxEntries: tc.maxEntries, StartingToken: p.token}
				calls = append(calls, srv.EXPECT().ListVolumes(gomock.Any(), protoEq{want}).Return(p.rsp, p.err).Times(1))
			}
			gomock.InOrder(calls...)
			got, err := New(startDriver(t, srv), tc.maxEntries).ListVolumes(ctx)
			if tc.wantErr != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.wantErr)) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
