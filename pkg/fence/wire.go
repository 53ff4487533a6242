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
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Field numbers of the extension. They are part of the wire contract.
const (
	// FenceFieldNumber is ControllerUnpublishVolumeRequest.fence.
	FenceFieldNumber protowire.Number = 4
	// ForceFieldNumber is NodeUnpublishVolumeRequest.force and
	// NodeUnstageVolumeRequest.force.
	ForceFieldNumber protowire.Number = 3
)

// Capability values of the extension. They are part of the wire contract.
const (
	// ControllerUnpublishFence is ControllerServiceCapability.RPC.Type
	// UNPUBLISH_FENCE: the controller honours ControllerUnpublishVolume.fence.
	ControllerUnpublishFence csi.ControllerServiceCapability_RPC_Type = 1000
	// NodeForceUnpublish is NodeServiceCapability.RPC.Type FORCE_UNPUBLISH: the
	// node plugin honours NodeUnpublishVolume.force and, with
	// STAGE_UNSTAGE_VOLUME, NodeUnstageVolume.force.
	NodeForceUnpublish csi.NodeServiceCapability_RPC_Type = 1000
)

// SetFence sets or clears the fence field of req. A false value is not
// encoded at all, as proto3 does for a default bool.
func SetFence(req *csi.ControllerUnpublishVolumeRequest, fence bool) {
	setBool(req, FenceFieldNumber, fence)
}

// GetFence reports the fence field of req. An error means the unknown fields
// hold the field number with a wire type or value that is not a bool.
func GetFence(req *csi.ControllerUnpublishVolumeRequest) (bool, error) {
	return getBool(req, FenceFieldNumber)
}

// SetNodeUnpublishForce sets or clears the force field of req.
func SetNodeUnpublishForce(req *csi.NodeUnpublishVolumeRequest, force bool) {
	setBool(req, ForceFieldNumber, force)
}

// GetNodeUnpublishForce reports the force field of req.
func GetNodeUnpublishForce(req *csi.NodeUnpublishVolumeRequest) (bool, error) {
	return getBool(req, ForceFieldNumber)
}

// SetNodeUnstageForce sets or clears the force field of req.
func SetNodeUnstageForce(req *csi.NodeUnstageVolumeRequest, force bool) {
	setBool(req, ForceFieldNumber, force)
}

// GetNodeUnstageForce reports the force field of req.
func GetNodeUnstageForce(req *csi.NodeUnstageVolumeRequest) (bool, error) {
	return getBool(req, ForceFieldNumber)
}

// setBool replaces every occurrence of field num in msg's unknown fields by a
// single varint (or by nothing for false) and keeps all other unknown fields.
func setBool(msg proto.Message, num protowire.Number, v bool) {
	m := msg.ProtoReflect()
	kept, _ := without(m.GetUnknown(), num)
	if v {
		kept = protowire.AppendTag(kept, num, protowire.VarintType)
		kept = protowire.AppendVarint(kept, 1)
	}
	m.SetUnknown(kept)
}

// getBool decodes field num from msg's unknown fields. As for any proto
// scalar, the last occurrence wins.
func getBool(msg proto.Message, num protowire.Number) (bool, error) {
	b := msg.ProtoReflect().GetUnknown()
	value := false
	for len(b) > 0 {
		n, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return false, fmt.Errorf("malformed unknown fields: %w", protowire.ParseError(tagLen))
		}
		fieldLen := protowire.ConsumeFieldValue(n, typ, b[tagLen:])
		if fieldLen < 0 {
			return false, fmt.Errorf("malformed unknown field %d: %w", n, protowire.ParseError(fieldLen))
		}
		if n == num {
			if typ != protowire.VarintType {
				return false, fmt.Errorf("field %d has wire type %d, want varint (bool)", n, typ)
			}
			x, _ := protowire.ConsumeVarint(b[tagLen:])
			if x > 1 {
				return false, fmt.Errorf("field %d holds %d, not a bool", n, x)
			}
			value = x == 1
		}
		b = b[tagLen+fieldLen:]
	}
	return value, nil
}

// without returns b less every field numbered num. On malformed input it
// keeps the unparseable rest unchanged and reports false.
func without(b []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	for len(b) > 0 {
		n, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return append(out, b...), false
		}
		fieldLen := protowire.ConsumeFieldValue(n, typ, b[tagLen:])
		if fieldLen < 0 {
			return append(out, b...), false
		}
		if n != num {
			out = append(out, b[:tagLen+fieldLen]...)
		}
		b = b[tagLen+fieldLen:]
	}
	return out, true
}
