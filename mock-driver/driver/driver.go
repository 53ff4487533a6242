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

// Package driver serves the CSI Identity, Controller and Node services of the
// mock driver over the simulated array, with the fence/force extension of
// DESIGN.md section 4 (pkg/fence). One Driver plays one instance: the
// controller, or the node plugin of one node; they share the array.
package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/fusefs"
)

// DefaultName is the driver name of the mock.
const DefaultName = "fence.csi-fence.io"

// DefaultCapacity is the array's total capacity when Config.Capacity is 0.
const DefaultCapacity = 1 << 40

// defaultVolumeSize is the size of a volume created without a required size.
const defaultVolumeSize = 1 << 30

// Config selects what the driver advertises and how the array behaves.
type Config struct {
	Name    string
	Version string
	// NodeID is the node this instance plays (node role only).
	NodeID string
	// MaxVolumesPerNode is reported by NodeGetInfo and enforced by the array
	// for this node (0: no limit).
	MaxVolumesPerNode int64
	// Capacity is the array's total capacity (0: DefaultCapacity).
	Capacity int64

	// Capabilities that can be switched off to play other drivers.
	NoPublish     bool // no PUBLISH_UNPUBLISH_VOLUME (nor PUBLISH_READONLY, UNPUBLISH_FENCE)
	NoReadOnly    bool // no PUBLISH_READONLY
	NoFence       bool // no UNPUBLISH_FENCE; fence=true is then ignored, as such a driver would
	NoForce       bool // no FORCE_UNPUBLISH; force=true is then ignored
	NoStage       bool // no STAGE_UNSTAGE_VOLUME
	NoListVolumes bool // no LIST_VOLUMES, LIST_VOLUMES_PUBLISHED_NODES
	NoExpand      bool // no EXPAND_VOLUME
	NoCapacity    bool // no GET_CAPACITY

	// MountDataDir, if set, makes the node plugin's mounts real for
	// filesystem volumes: NodeStageVolume bind-mounts the volume's data
	// directory (MountDataDir/<volume ID>, on storage every node shares, as
	// the array's state is) on the staging path, and NodePublishVolume
	// bind-mounts the staging path on the target path; a container then
	// writes to the volume with ordinary syscalls. Unset, the paths hold a
	// marker file in place of a filesystem.
	MountDataDir string
	// FUSE, with MountDataDir, makes NodeStageVolume mount a FUSE file
	// system over the data directory instead of a bind mount (package
	// fusefs): every change a container makes through it asks the array
	// first and fails with EIO once the node is fenced, and the array
	// counts every write it accepts (S1). The FUSE server lives in this
	// process: if it ends, the volume's mounts on this node answer
	// ENOTCONN until the kubelet unstages them.
	FUSE bool
	// BlockDevices, with MountDataDir, makes block volumes devices: each
	// is staged as a filesystem volume is, and NodePublishVolume
	// bind-mounts onto the target a loop device over a file on the staged
	// path (loop.go), which a container runtime accepts as a pod's device.
	// Needs the host's /dev (the loop devices) and CAP_SYS_ADMIN.
	BlockDevices bool

	// Detach, if set, plays a driver whose owner declares that a plain
	// ControllerUnpublishVolume revokes the node's access (the CSIDriver
	// annotation csi-fence.io/unpublish-revokes-access), as a cloud block
	// storage driver whose detach takes the disk away from the machine:
	// without the extension (NoFence and NoForce are set), and with its
	// detach telling the truth (DetachRevokes) or not (DetachLies). See
	// DetachMode.
	Detach DetachMode

	// AnyNode lets ControllerPublishVolume publish to nodes the array never
	// saw register; by default they are NotFound, as the spec asks.
	AnyNode bool

	// OutOfService, if set, makes the driver fence on KEP-2268's
	// out-of-service taint as ceph-csi's --enable-fencing does: a plain
	// ControllerUnpublishVolume from a node that carries the taint (as
	// OutOfService reads it, by node ID) is a fence.
	OutOfService func(ctx context.Context, nodeID string) (bool, error)

	Array array.Options
}

// DetachMode is what a plain ControllerUnpublishVolume of a driver declared
// to revoke access on unpublish really does (Config.Detach).
type DetachMode string

const (
	// DetachRevokes keeps the declaration: the unpublish closes the node's
	// data path at once, reads and writes through its old mounts fail (with
	// FUSE: EIO), as through a fenced publication's, and its plain node-side
	// cleanup then succeeds (array.PlainUnpublishDetach).
	DetachRevokes DetachMode = "revokes"
	// DetachLies breaks it: the unpublish succeeds and leaves the node's data
	// path open while the node holds the volume (array.PlainUnpublishLinger):
	// the node keeps writing. The negative control of csi-fence-sanity's
	// check of the declaration.
	DetachLies DetachMode = "lies"
)

// Validate rejects unknown modes.
func (m DetachMode) Validate() error {
	switch m {
	case "", DetachRevokes, DetachLies:
		return nil
	}
	return fmt.Errorf("unknown detach mode %q: want revokes or lies", m)
}

// apply sets what the mode implies in cfg: no UNPUBLISH_FENCE, no
// FORCE_UNPUBLISH (a cloud disk driver has neither), and the plain
// unpublish of the mode.
func (m DetachMode) apply(cfg *Config) {
	switch m {
	case DetachRevokes:
		cfg.NoFence, cfg.NoForce, cfg.Array.PlainUnpublish = true, true, array.PlainUnpublishDetach
	case DetachLies:
		cfg.NoFence, cfg.NoForce, cfg.Array.PlainUnpublish = true, true, array.PlainUnpublishLinger
	}
}

// Driver implements the three CSI services.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	cfg   Config
	array *array.Array

	// fuseMu guards fuse, the FUSE mounts this process serves, by staging
	// path.
	fuseMu sync.Mutex
	fuse   map[string]*fusefs.Mount
}

// New returns a driver over arr.
func New(cfg Config, arr *array.Array) *Driver {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	cfg.Detach.apply(&cfg)
	return &Driver{cfg: cfg, array: arr, fuse: map[string]*fusefs.Mount{}}
}

// Config returns the driver's configuration.
func (d *Driver) Config() Config { return d.cfg }

var codeOf = map[array.Code]codes.Code{
	array.CodeNotFound:           codes.NotFound,
	array.CodeFailedPrecondition: codes.FailedPrecondition,
	array.CodeUnavailable:        codes.Unavailable,
	array.CodePermissionDenied:   codes.PermissionDenied,
	array.CodeInvalidArgument:    codes.InvalidArgument,
	array.CodeAlreadyExists:      codes.AlreadyExists,
	array.CodeResourceExhausted:  codes.ResourceExhausted,
}

// toStatus maps array decisions to their gRPC codes, and anything else
// (the state could not be read or written) to Internal.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var ae *array.Error
	if errors.As(err, &ae) {
		if c, ok := codeOf[ae.Code]; ok {
			return status.Error(c, ae.Msg)
		}
	}
	return status.Error(codes.Internal, err.Error())
}

// Identity.

func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.Name, VendorVersion: d.cfg.Version}, nil
}

// GetPluginCapabilities advertises the controller service from every
// instance: the plugin has one, wherever this instance runs.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

// Probe is ready when the array's state can be read.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if _, err := d.array.Snapshot(); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "array not ready: %v", err)
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
