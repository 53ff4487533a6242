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

package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/pkg/fence"
)

var (
	mountCap = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	blockCap = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	rwxCap = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}}
)

// pair is a controller and the node plugin of node "n1" on one array.
type pair struct {
	arr       *array.Array
	ctl, node *Driver
	staging   string
	target    string
	ctx       context.Context
}

func newPair(t *testing.T, cfg Config) *pair {
	t.Helper()
	dir := t.TempDir()
	arr, err := array.Open(filepath.Join(dir, "array"))
	if err != nil {
		t.Fatal(err)
	}
	if err := arr.RegisterNode("n1", 0); err != nil {
		t.Fatal(err)
	}
	nc := cfg
	nc.NodeID = "n1"
	p := &pair{arr: arr, ctl: New(cfg, arr), node: New(nc, arr), staging: filepath.Join(dir, "staging"), target: filepath.Join(dir, "pods", "target"), ctx: context.Background()}
	return p
}

func (p *pair) create(t *testing.T, c *csi.VolumeCapability) string {
	t.Helper()
	rsp, err := p.ctl.CreateVolume(p.ctx, &csi.CreateVolumeRequest{Name: t.Name() + c.String(), VolumeCapabilities: []*csi.VolumeCapability{c}})
	if err != nil {
		t.Fatal(err)
	}
	return rsp.GetVolume().GetVolumeId()
}

func (p *pair) publish(t *testing.T, id string, c *csi.VolumeCapability, stage bool) {
	t.Helper()
	if _, err := p.ctl.ControllerPublishVolume(p.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: c}); err != nil {
		t.Fatal(err)
	}
	staging := ""
	if stage {
		staging = p.staging
		if _, err := p.node.NodeStageVolume(p.ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: c}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.node.NodePublishVolume(p.ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: p.target, VolumeCapability: c}); err != nil {
		t.Fatal(err)
	}
}

func (p *pair) access(t *testing.T, id string) string {
	t.Helper()
	s, err := p.arr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Volumes[id]; v != nil && v.Publications["n1"] != nil {
		return v.Publications["n1"].Access
	}
	return ""
}

func wantCode(t *testing.T, err error, c codes.Code) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("got %v, want code %v", err, c)
	}
}

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		ctlHas      []csi.ControllerServiceCapability_RPC_Type
		ctlLacks    []csi.ControllerServiceCapability_RPC_Type
		nodeHas     []csi.NodeServiceCapability_RPC_Type
		nodeLacks   []csi.NodeServiceCapability_RPC_Type
		unpublishOK bool
	}{
		{name: "everything", ctlHas: []csi.ControllerServiceCapability_RPC_Type{fence.ControllerUnpublishFence, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
			csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME, csi.ControllerServiceCapability_RPC_GET_CAPACITY, csi.ControllerServiceCapability_RPC_PUBLISH_READONLY},
			nodeHas: []csi.NodeServiceCapability_RPC_Type{fence.NodeForceUnpublish, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
		{name: "no fence", cfg: Config{NoFence: true}, ctlLacks: []csi.ControllerServiceCapability_RPC_Type{fence.ControllerUnpublishFence},
			ctlHas: []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}},
		{name: "no publish hides fence too", cfg: Config{NoPublish: true},
			ctlLacks: []csi.ControllerServiceCapability_RPC_Type{fence.ControllerUnpublishFence, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME, csi.ControllerServiceCapability_RPC_PUBLISH_READONLY}},
		{name: "detach revokes: a cloud disk driver, without the extension", cfg: Config{Detach: DetachRevokes},
			ctlLacks: []csi.ControllerServiceCapability_RPC_Type{fence.ControllerUnpublishFence}, ctlHas: []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME},
			nodeLacks: []csi.NodeServiceCapability_RPC_Type{fence.NodeForceUnpublish}, nodeHas: []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
		{name: "detach lies: the same capabilities", cfg: Config{Detach: DetachLies},
			ctlLacks: []csi.ControllerServiceCapability_RPC_Type{fence.ControllerUnpublishFence}, ctlHas: []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME},
			nodeLacks: []csi.NodeServiceCapability_RPC_Type{fence.NodeForceUnpublish}},
		{name: "no force, no stage", cfg: Config{NoForce: true, NoStage: true}, nodeLacks: []csi.NodeServiceCapability_RPC_Type{fence.NodeForceUnpublish, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
		{name: "no list, expand, capacity, readonly", cfg: Config{NoListVolumes: true, NoExpand: true, NoCapacity: true, NoReadOnly: true},
			ctlLacks: []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
				csi.ControllerServiceCapability_RPC_EXPAND_VOLUME, csi.ControllerServiceCapability_RPC_GET_CAPACITY, csi.ControllerServiceCapability_RPC_PUBLISH_READONLY}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.cfg)
			crsp, err := p.ctl.ControllerGetCapabilities(p.ctx, &csi.ControllerGetCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var ctl []csi.ControllerServiceCapability_RPC_Type
			for _, c := range crsp.GetCapabilities() {
				ctl = append(ctl, c.GetRpc().GetType())
			}
			nrsp, err := p.node.NodeGetCapabilities(p.ctx, &csi.NodeGetCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var node []csi.NodeServiceCapability_RPC_Type
			for _, c := range nrsp.GetCapabilities() {
				node = append(node, c.GetRpc().GetType())
			}
			for _, c := range tc.ctlHas {
				if !slices.Contains(ctl, c) {
					t.Errorf("controller lacks %v: %v", c, ctl)
				}
			}
			for _, c := range tc.ctlLacks {
				if slices.Contains(ctl, c) {
					t.Errorf("controller has %v: %v", c, ctl)
				}
			}
			for _, c := range tc.nodeHas {
				if !slices.Contains(node, c) {
					t.Errorf("node lacks %v: %v", c, node)
				}
			}
			for _, c := range tc.nodeLacks {
				if slices.Contains(node, c) {
					t.Errorf("node has %v: %v", c, node)
				}
			}
			// The fence capability as pkg/fence reads it.
			if got, want := fence.ControllerCanFence(toSet(ctl)), slices.Contains(ctl, fence.ControllerUnpublishFence); got != want {
				t.Errorf("ControllerCanFence = %v", got)
			}
		})
	}
}

func toSet(l []csi.ControllerServiceCapability_RPC_Type) map[csi.ControllerServiceCapability_RPC_Type]bool {
	m := map[csi.ControllerServiceCapability_RPC_Type]bool{}
	for _, c := range l {
		m[c] = true
	}
	return m
}

func unpublishReq(id, node string, fenced bool) *csi.ControllerUnpublishVolumeRequest {
	r := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node}
	fence.SetFence(r, fenced)
	return r
}

// The fence field decides between quarantine and plain unpublish, unless
// the driver plays one without the extension.
func TestControllerUnpublishFence(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		fence      bool
		wantCode   codes.Code
		wantAccess string
	}{
		{name: "fence=true quarantines", fence: true, wantAccess: array.AccessFenced},
		{name: "fence=false on a node still holding the volume lingers", fence: false, wantAccess: array.AccessUnpublished},
		{name: "fence=false, revoke mode", cfg: Config{Array: array.Options{PlainUnpublish: array.PlainUnpublishRevoke}}, fence: false, wantAccess: ""},
		{name: "without the extension fence=true is a plain unpublish", cfg: Config{NoFence: true}, fence: true, wantAccess: array.AccessUnpublished},
		{name: "detach revokes: a plain unpublish detaches the node still holding the volume", cfg: Config{Detach: DetachRevokes}, wantAccess: array.AccessDetached},
		{name: "detach revokes: fence=true is a plain unpublish too", cfg: Config{Detach: DetachRevokes}, fence: true, wantAccess: array.AccessDetached},
		{name: "detach lies: a plain unpublish leaves the node's data path open", cfg: Config{Detach: DetachLies}, wantAccess: array.AccessUnpublished},
		{name: "detach lies despite an explicit plain unpublish mode", cfg: Config{Detach: DetachLies, Array: array.Options{PlainUnpublish: array.PlainUnpublishDetach}}, wantAccess: array.AccessUnpublished},
		{name: "fences on out-of-service: tainted node fenced", cfg: Config{NoFence: true, OutOfService: outOfService(true, nil)}, wantAccess: array.AccessFenced},
		{name: "fences on out-of-service: other node plain", cfg: Config{NoFence: true, OutOfService: outOfService(false, nil)}, wantAccess: array.AccessUnpublished},
		{name: "fences on out-of-service: node unreadable", cfg: Config{NoFence: true, OutOfService: outOfService(false, errors.New("apiserver down"))},
			wantCode: codes.Unavailable, wantAccess: array.AccessGranted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.cfg)
			id := p.create(t, mountCap)
			p.publish(t, id, mountCap, true)
			_, err := p.ctl.ControllerUnpublishVolume(p.ctx, unpublishReq(id, "n1", tc.fence))
			if tc.wantCode != codes.OK {
				wantCode(t, err, tc.wantCode)
			} else if err != nil {
				t.Fatal(err)
			}
			if got := p.access(t, id); got != tc.wantAccess {
				t.Fatalf("access after unpublish: %q, want %q", got, tc.wantAccess)
			}
		})
	}
}

// outOfService is an OutOfService hook with a fixed answer.
func outOfService(oos bool, err error) func(context.Context, string) (bool, error) {
	return func(context.Context, string) (bool, error) { return oos, err }
}

func TestControllerErrors(t *testing.T) {
	p := newPair(t, Config{})
	id := p.create(t, mountCap)
	malformed := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}
	malformed.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, fence.FenceFieldNumber, protowire.VarintType), 7))
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"publish to an unknown node", func() error {
			_, err := p.ctl.ControllerPublishVolume(p.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "ghost", VolumeCapability: mountCap})
			return err
		}, codes.NotFound},
		{"publish an unknown volume", func() error {
			_, err := p.ctl.ControllerPublishVolume(p.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: "nope", NodeId: "n1", VolumeCapability: mountCap})
			return err
		}, codes.NotFound},
		{"publish without access mode", func() error {
			_, err := p.ctl.ControllerPublishVolume(p.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: &csi.VolumeCapability{}})
			return err
		}, codes.InvalidArgument},
		{"fence field that is not a bool", func() error { _, err := p.ctl.ControllerUnpublishVolume(p.ctx, malformed); return err }, codes.InvalidArgument},
		{"fence without node", func() error { _, err := p.ctl.ControllerUnpublishVolume(p.ctx, unpublishReq(id, "", true)); return err }, codes.InvalidArgument},
		{"create with limit below required", func() error {
			_, err := p.ctl.CreateVolume(p.ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{mountCap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 10, LimitBytes: 5}})
			return err
		}, codes.InvalidArgument},
		{"create bigger than the array", func() error {
			_, err := p.ctl.CreateVolume(p.ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{mountCap}, CapacityRange: &csi.CapacityRange{RequiredBytes: DefaultCapacity + 1}})
			return err
		}, codes.OutOfRange},
		{"list with a foreign token", func() error {
			_, err := p.ctl.ListVolumes(p.ctx, &csi.ListVolumesRequest{StartingToken: "garbage"})
			return err
		}, codes.Aborted},
		{"expand beyond the limit", func() error {
			_, err := p.ctl.ControllerExpandVolume(p.ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 1, LimitBytes: 2}})
			return err
		}, codes.OutOfRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.call(), tc.want) })
	}
}

func TestAnyNodeAndUnpublishEverywhere(t *testing.T) {
	p := newPair(t, Config{AnyNode: true})
	id := p.create(t, rwxCap)
	for _, n := range []string{"ghost-1", "ghost-2"} {
		if _, err := p.ctl.ControllerPublishVolume(p.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: n, VolumeCapability: rwxCap}); err != nil {
			t.Fatalf("publish to %s: %v", n, err)
		}
	}
	// No node ID: unpublish from every node, as the spec asks.
	if _, err := p.ctl.ControllerUnpublishVolume(p.ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
	rsp, err := p.ctl.ListVolumes(p.ctx, &csi.ListVolumesRequest{})
	if err != nil || len(rsp.GetEntries()) != 1 || len(rsp.GetEntries()[0].GetStatus().GetPublishedNodeIds()) != 0 {
		t.Fatalf("after unpublishing everywhere: %v %v", rsp, err)
	}
}

// ListVolumes pages with tokens that survive the deletion of the volume they
// point at.
func TestListVolumesPaging(t *testing.T) {
	p := newPair(t, Config{})
	var ids []string
	for i := 0; i < 5; i++ {
		rsp, err := p.ctl.CreateVolume(p.ctx, &csi.CreateVolumeRequest{Name: string(rune('a' + i)), VolumeCapabilities: []*csi.VolumeCapability{mountCap}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rsp.GetVolume().GetVolumeId())
	}
	first, err := p.ctl.ListVolumes(p.ctx, &csi.ListVolumesRequest{MaxEntries: 2})
	if err != nil || len(first.GetEntries()) != 2 || first.GetNextToken() == "" {
		t.Fatalf("first page: %v %v", first, err)
	}
	if _, err := p.ctl.DeleteVolume(p.ctx, &csi.DeleteVolumeRequest{VolumeId: ids[2]}); err != nil {
		t.Fatal(err)
	}
	rest, err := p.ctl.ListVolumes(p.ctx, &csi.ListVolumesRequest{StartingToken: first.GetNextToken()})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range rest.GetEntries() {
		got = append(got, e.GetVolume().GetVolumeId())
	}
	if !slices.Equal(got, ids[3:]) || rest.GetNextToken() != "" {
		t.Fatalf("second page after deleting its first volume: %v (next %q), want %v", got, rest.GetNextToken(), ids[3:])
	}
}

func TestNodeForceAndLayout(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		c        *csi.VolumeCapability
		stage    bool
		force    bool
		wantCode codes.Code // of the NodeUnpublishVolume after a fence
	}{
		{name: "forced unpublish after a fence", c: mountCap, stage: true, force: true, wantCode: codes.OK},
		{name: "unforced unpublish after a fence", c: mountCap, stage: true, force: false, wantCode: codes.FailedPrecondition},
		{name: "force ignored without FORCE_UNPUBLISH", cfg: Config{NoForce: true}, c: mountCap, stage: true, force: true, wantCode: codes.FailedPrecondition},
		{name: "block volume without staging", cfg: Config{NoStage: true}, c: blockCap, force: true, wantCode: codes.OK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.cfg)
			id := p.create(t, tc.c)
			p.publish(t, id, tc.c, tc.stage)
			fi, err := os.Stat(p.target)
			if err != nil || fi.IsDir() == (tc.c.GetBlock() != nil) {
				t.Fatalf("target after NodePublishVolume: %v %v", fi, err)
			}
			if _, err := p.ctl.ControllerUnpublishVolume(p.ctx, unpublishReq(id, "n1", true)); err != nil {
				t.Fatal(err)
			}
			req := &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p.target}
			fence.SetNodeUnpublishForce(req, tc.force)
			_, err = p.node.NodeUnpublishVolume(p.ctx, req)
			wantCode(t, err, tc.wantCode)
			_, statErr := os.Stat(p.target)
			if gone := os.IsNotExist(statErr); gone != (tc.wantCode == codes.OK) {
				t.Fatalf("target gone=%v after NodeUnpublishVolume returning %v", gone, err)
			}
			if tc.wantCode != codes.OK {
				return
			}
			if tc.stage {
				ureq := &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: p.staging}
				fence.SetNodeUnstageForce(ureq, true)
				if _, err := p.node.NodeUnstageVolume(p.ctx, ureq); err != nil {
					t.Fatal(err)
				}
			}
			if got := p.access(t, id); got != "" {
				t.Fatalf("after the forced cleanup the volume is still %q on the node", got)
			}
		})
	}
}

// A driver without a controller publish step: the node plugin grants its
// node access itself, as local storage would, and releases it when the node
// has nothing of the volume left, so that the volume can be deleted.
func TestNodeWithoutControllerPublish(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		c     *csi.VolumeCapability
		stage bool
	}{
		{name: "staged", cfg: Config{NoPublish: true}, c: mountCap, stage: true},
		{name: "without staging", cfg: Config{NoPublish: true, NoStage: true}, c: blockCap},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.cfg)
			id := p.create(t, tc.c)
			_, err := p.ctl.ControllerPublishVolume(p.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: tc.c})
			wantCode(t, err, codes.Unimplemented)
			staging := ""
			if tc.stage {
				staging = p.staging
				if _, err := p.node.NodeStageVolume(p.ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: tc.c}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := p.node.NodePublishVolume(p.ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: p.target, VolumeCapability: tc.c}); err != nil {
				t.Fatal(err)
			}
			if got := p.access(t, id); got != array.AccessGranted {
				t.Fatalf("access after the node-side publish: %q", got)
			}
			if err := p.arr.Write(id, "n1"); err != nil {
				t.Fatalf("the node cannot write: %v", err)
			}
			if _, err := p.node.NodeUnpublishVolume(p.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p.target}); err != nil {
				t.Fatal(err)
			}
			if tc.stage {
				if got := p.access(t, id); got != array.AccessGranted {
					t.Fatalf("access released while the volume is still staged: %q", got)
				}
				if _, err := p.node.NodeUnstageVolume(p.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
					t.Fatal(err)
				}
			}
			if got := p.access(t, id); got != "" {
				t.Fatalf("access after the node cleaned up: %q, want none", got)
			}
			if _, err := p.ctl.DeleteVolume(p.ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
				t.Fatalf("DeleteVolume after the node cleaned up: %v", err)
			}
		})
	}
}

// With MountDataDir the node plugin mounts for real: the staging and target
// paths are bind mounts of the volume's data directory, a file written
// through the target lands there, the mounts are idempotent, and unpublish
// and unstage (forced or not) leave no mount behind. Needs root (mounts).
func TestBindMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	dir := t.TempDir()
	p := newPair(t, Config{MountDataDir: filepath.Join(dir, "data")})
	t.Cleanup(func() {
		for _, m := range []string{p.target, p.staging} {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	})
	id := p.create(t, mountCap)
	p.publish(t, id, mountCap, true)
	p.publish(t, id, mountCap, true) // repeated: no second mount on top
	for _, m := range []string{p.staging, p.target} {
		if n := mountsAt(t, m); n != 1 {
			t.Fatalf("%d mounts at %s, want 1", n, m)
		}
	}
	if err := os.WriteFile(filepath.Join(p.target, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "data", id, "f")); err != nil || string(b) != "data" {
		t.Fatalf("the write through the target is not in the volume's data directory: %q, %v", b, err)
	}
	if _, err := p.node.NodeUnpublishVolume(p.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p.target}); err != nil {
		t.Fatal(err)
	}
	unstage := &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: p.staging}
	fence.SetNodeUnstageForce(unstage, true)
	if _, err := p.node.NodeUnstageVolume(p.ctx, unstage); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{p.staging, p.target} {
		if n := mountsAt(t, m); n != 0 {
			t.Fatalf("%d mounts left at %s", n, m)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "data", id, "f")); err != nil || string(b) != "data" {
		t.Fatalf("the volume's data is gone after unpublish: %q, %v", b, err)
	}
}

// mountsAt counts the mounts at path in this process's mount table.
func mountsAt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == path {
			n++
		}
	}
	return n
}
