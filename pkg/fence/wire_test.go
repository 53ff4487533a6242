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
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func marshal(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return hex.EncodeToString(b)
}

// The exact bytes are the contract with drivers: a tag of (4<<3|0)=0x20 or
// (3<<3|0)=0x18 followed by the varint 1, after the known fields.
func TestWireBytes(t *testing.T) {
	cuv := &csi.ControllerUnpublishVolumeRequest{VolumeId: "v", NodeId: "n"}
	nuv := &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "/t"}
	nus := &csi.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: "/s"}
	tests := []struct {
		name string
		set  func()
		msg  proto.Message
		want string
	}{
		{"plain unpublish", func() {}, cuv, "0a0176" + "12016e"},
		{"fence=true", func() { SetFence(cuv, true) }, cuv, "0a0176" + "12016e" + "2001"},
		{"fence set twice stays one field", func() { SetFence(cuv, true); SetFence(cuv, true) }, cuv, "0a0176" + "12016e" + "2001"},
		{"fence=false clears it", func() { SetFence(cuv, true); SetFence(cuv, false) }, cuv, "0a0176" + "12016e"},
		{"node unpublish force", func() { SetNodeUnpublishForce(nuv, true) }, nuv, "0a0176" + "12022f74" + "1801"},
		{"node unstage force", func() { SetNodeUnstageForce(nus, true) }, nus, "0a0176" + "12022f73" + "1801"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.set()
			if got := marshal(t, tc.msg); got != tc.want {
				t.Errorf("bytes = %s, want %s", got, tc.want)
			}
		})
	}
}

// A receiver on the stock types must read what a sender on the stock types set.
func TestRoundTrip(t *testing.T) {
	for _, v := range []bool{true, false} {
		req := &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol", NodeId: "node", Secrets: map[string]string{"k": "v"}}
		SetFence(req, v)
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got := &csi.ControllerUnpublishVolumeRequest{}
		if err := proto.Unmarshal(b, got); err != nil {
			t.Fatal(err)
		}
		fence, err := GetFence(got)
		if err != nil || fence != v {
			t.Errorf("fence = %v, %v; want %v", fence, err, v)
		}
		if got.GetSecrets()["k"] != "v" || got.GetVolumeId() != "vol" {
			t.Errorf("known fields lost: %v", got)
		}

		nu := &csi.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: "/t"}
		SetNodeUnpublishForce(nu, v)
		b, _ = proto.Marshal(nu)
		nu2 := &csi.NodeUnpublishVolumeRequest{}
		if err := proto.Unmarshal(b, nu2); err != nil {
			t.Fatal(err)
		}
		if force, err := GetNodeUnpublishForce(nu2); err != nil || force != v {
			t.Errorf("unpublish force = %v, %v; want %v", force, err, v)
		}

		ns := &csi.NodeUnstageVolumeRequest{VolumeId: "vol", StagingTargetPath: "/s"}
		SetNodeUnstageForce(ns, v)
		b, _ = proto.Marshal(ns)
		ns2 := &csi.NodeUnstageVolumeRequest{}
		if err := proto.Unmarshal(b, ns2); err != nil {
			t.Fatal(err)
		}
		if force, err := GetNodeUnstageForce(ns2); err != nil || force != v {
			t.Errorf("unstage force = %v, %v; want %v", force, err, v)
		}
	}
}

func unknown(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func varintField(n protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, n, protowire.VarintType), v)
}

func TestGetFenceFromRawUnknownFields(t *testing.T) {
	other := protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "keep")
	tests := []struct {
		name    string
		raw     []byte
		want    bool
		wantErr bool
	}{
		{"absent", nil, false, false},
		{"other field only", other, false, false},
		{"true among others", unknown(other, varintField(4, 1), other), true, false},
		{"last occurrence wins", unknown(varintField(4, 1), varintField(4, 0)), false, false},
		{"wrong wire type", protowire.AppendString(protowire.AppendTag(nil, 4, protowire.BytesType), "x"), false, true},
		{"not a bool", varintField(4, 7), false, true},
		{"truncated", []byte{0x20}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &csi.ControllerUnpublishVolumeRequest{}
			req.ProtoReflect().SetUnknown(tc.raw)
			got, err := GetFence(req)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("GetFence = %v, %v; want %v, err %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestSetFenceKeepsOtherUnknownFields(t *testing.T) {
	other := protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "keep")
	req := &csi.ControllerUnpublishVolumeRequest{}
	req.ProtoReflect().SetUnknown(unknown(other, varintField(4, 0)))
	SetFence(req, true)
	want := unknown(other, varintField(4, 1))
	if got := req.ProtoReflect().GetUnknown(); !bytes.Equal(got, want) {
		t.Errorf("unknown = %x, want %x", got, want)
	}
}

func TestCapabilityValuesDoNotCollide(t *testing.T) {
	if _, known := csi.ControllerServiceCapability_RPC_Type_name[int32(ControllerUnpublishFence)]; known {
		t.Errorf("UNPUBLISH_FENCE %d collides with a released controller capability", ControllerUnpublishFence)
	}
	if _, known := csi.NodeServiceCapability_RPC_Type_name[int32(NodeForceUnpublish)]; known {
		t.Errorf("FORCE_UNPUBLISH %d collides with a released node capability", NodeForceUnpublish)
	}
	if ControllerUnpublishFence != 1000 || NodeForceUnpublish != 1000 {
		t.Errorf("capability values changed: the contract is 1000")
	}
}
