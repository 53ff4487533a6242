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

// Package kubeletlayout knows where the kubelet's CSI volume plugin
// (kubernetes.io/csi, pkg/volume/csi in Kubernetes 1.36) keeps its volumes on
// a node: the per-pod publish paths, the per-volume staging paths, the
// block-volume equivalents, and the vol_data.json files it writes before each
// CSI call so that it can tear the volume down later.
//
// It lays these out as the kubelet does (for the kubelet simulator and for
// tests), finds what is left of them on a node (Scan), attributes leftovers to
// a volume by their metadata (Inventory.Match), and removes them the way the
// kubelet does, never removing or descending into a path that is still a
// mount point (Remover).
//
// Layout under the kubelet root directory (default /var/lib/kubelet):
//
//	filesystem volumes
//	  pods/<podUID>/volumes/kubernetes.io~csi/<specName>/vol_data.json
//	  pods/<podUID>/volumes/kubernetes.io~csi/<specName>/mount           NodePublishVolume target_path
//	  plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/vol_data.json
//	  plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount  NodeStageVolume staging_target_path
//	  plugins/kubernetes.io/csi/pv/<pvName>/globalmount                   staging path of kubelets before 1.25
//	block volumes
//	  plugins/kubernetes.io/csi/volumeDevices/<specName>/data/vol_data.json
//	  plugins/kubernetes.io/csi/volumeDevices/<specName>/dev/<podUID>     bind mount of the device
//	  plugins/kubernetes.io/csi/volumeDevices/staging/<specName>          staging_target_path
//	  plugins/kubernetes.io/csi/volumeDevices/publish/<specName>/<podUID> target_path
//	  pods/<podUID>/volumeDevices/kubernetes.io~csi/<specName>            symlink for the container
//
// <specName> is the PV name for persistent volumes (and the pod's volume name
// for CSI inline volumes, which never get a staging path).
package kubeletlayout

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// DefaultRoot is the kubelet's default root directory (--root-dir).
const DefaultRoot = "/var/lib/kubelet"

// Names the kubelet uses in its directory layout.
const (
	// PluginName is the kubelet's in-tree CSI volume plugin.
	PluginName = "kubernetes.io/csi"
	// VolDataFileName is the metadata file the kubelet writes beside every
	// publish, staging and block volume directory.
	VolDataFileName = "vol_data.json"

	escapedPluginName = "kubernetes.io~csi" // utilstrings.EscapeQualifiedName(PluginName)
	globalMountDir    = "globalmount"
	mountDir          = "mount"
	legacyStagingDir  = "pv"
	volumeDevicesDir  = "volumeDevices"
	blockStagingDir   = "staging"
	blockPublishDir   = "publish"
	blockDataDir      = "data"
	blockDevDir       = "dev"
)

// Layout is the kubelet directory layout under one root directory.
type Layout struct {
	// Root is the kubelet's root directory, e.g. /var/lib/kubelet.
	Root string
}

// New returns the layout under root; an empty root means DefaultRoot.
func New(root string) Layout {
	if root == "" {
		root = DefaultRoot
	}
	return Layout{Root: filepath.Clean(root)}
}

// EscapeName escapes a spec or plugin name for use as a directory name, as the
// kubelet does (utilstrings.EscapeQualifiedName): '/' becomes '~'.
func EscapeName(name string) string {
	return strings.ReplaceAll(name, "/", "~")
}

// VolumeHandleHash is the directory name of a volume's staging path: the hex
// SHA-256 of its CSI volume handle.
func VolumeHandleHash(volumeHandle string) string {
	sum := sha256.Sum256([]byte(volumeHandle))
	return hex.EncodeToString(sum[:])
}

// AttachmentName is the name of the VolumeAttachment of a volume on a node,
// as the kubelet and the attach/detach controller compute it:
// csi-<sha256(volumeHandle + driver + nodeName)>.
func AttachmentName(volumeHandle, driver, nodeName string) string {
	sum := sha256.Sum256([]byte(volumeHandle + driver + nodeName))
	return "csi-" + hex.EncodeToString(sum[:])
}

// PodsDir is <root>/pods.
func (l Layout) PodsDir() string { return filepath.Join(l.Root, "pods") }

// PodDir is <root>/pods/<podUID>.
func (l Layout) PodDir(podUID string) string { return filepath.Join(l.PodsDir(), podUID) }

// PodCSIVolumesDir is pods/<podUID>/volumes/kubernetes.io~csi.
func (l Layout) PodCSIVolumesDir(podUID string) string {
	return filepath.Join(l.PodDir(podUID), "volumes", escapedPluginName)
}

// PodVolumeDir is the directory of one filesystem volume of a pod, holding
// vol_data.json and the publish path:
// pods/<podUID>/volumes/kubernetes.io~csi/<specName>.
func (l Layout) PodVolumeDir(podUID, specName string) string {
	return filepath.Join(l.PodCSIVolumesDir(podUID), EscapeName(specName))
}

// PublishPath is the NodePublishVolume target path of a filesystem volume:
// pods/<podUID>/volumes/kubernetes.io~csi/<specName>/mount.
func (l Layout) PublishPath(podUID, specName string) string {
	return filepath.Join(l.PodVolumeDir(podUID, specName), mountDir)
}

// PluginDir is plugins/kubernetes.io/csi.
func (l Layout) PluginDir() string { return filepath.Join(l.Root, "plugins", PluginName) }

// StagingDir is the directory of a filesystem volume's staging path, holding
// vol_data.json: plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>.
func (l Layout) StagingDir(driver, volumeHandle string) string {
	return filepath.Join(l.PluginDir(), driver, VolumeHandleHash(volumeHandle))
}

// StagingPath is the NodeStageVolume staging target path of a filesystem
// volume: plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount.
func (l Layout) StagingPath(driver, volumeHandle string) string {
	return filepath.Join(l.StagingDir(driver, volumeHandle), globalMountDir)
}

// LegacyStagingPath is the staging path kubelets before 1.25 used:
// plugins/kubernetes.io/csi/pv/<pvName>/globalmount.
func (l Layout) LegacyStagingPath(pvName string) string {
	return filepath.Join(l.PluginDir(), legacyStagingDir, EscapeName(pvName), globalMountDir)
}

// VolumeDevicesDir is plugins/kubernetes.io/csi/volumeDevices.
func (l Layout) VolumeDevicesDir() string { return filepath.Join(l.PluginDir(), volumeDevicesDir) }

// BlockVolumeDir is plugins/kubernetes.io/csi/volumeDevices/<specName>,
// holding data/vol_data.json and dev/.
func (l Layout) BlockVolumeDir(specName string) string {
	return filepath.Join(l.VolumeDevicesDir(), EscapeName(specName))
}

// BlockDataDir is the directory of a block volume's vol_data.json.
func (l Layout) BlockDataDir(specName string) string {
	return filepath.Join(l.BlockVolumeDir(specName), blockDataDir)
}

// BlockGlobalMapPath is the directory of a block volume's per-pod device bind
// mounts (dev/<podUID>).
func (l Layout) BlockGlobalMapPath(specName string) string {
	return filepath.Join(l.BlockVolumeDir(specName), blockDevDir)
}

// BlockStagingPath is the NodeStageVolume staging target path of a block
// volume: plugins/kubernetes.io/csi/volumeDevices/staging/<specName>.
func (l Layout) BlockStagingPath(specName string) string {
	return filepath.Join(l.VolumeDevicesDir(), blockStagingDir, EscapeName(specName))
}

// BlockPublishDir is the parent of a block volume's per-pod publish paths.
func (l Layout) BlockPublishDir(specName string) string {
	return filepath.Join(l.VolumeDevicesDir(), blockPublishDir, EscapeName(specName))
}

// BlockPublishPath is the NodePublishVolume target path of a block volume for
// one pod: plugins/kubernetes.io/csi/volumeDevices/publish/<specName>/<podUID>.
func (l Layout) BlockPublishPath(specName, podUID string) string {
	return filepath.Join(l.BlockPublishDir(specName), podUID)
}

// PodCSIDevicesDir is pods/<podUID>/volumeDevices/kubernetes.io~csi.
func (l Layout) PodCSIDevicesDir(podUID string) string {
	return filepath.Join(l.PodDir(podUID), "volumeDevices", escapedPluginName)
}

// PodDeviceMapPath is the symlink through which a pod's container sees a
// block volume: pods/<podUID>/volumeDevices/kubernetes.io~csi/<specName>.
func (l Layout) PodDeviceMapPath(podUID, specName string) string {
	return filepath.Join(l.PodCSIDevicesDir(podUID), EscapeName(specName))
}

// UniqueVolumeName is the name the kubelet and the attach/detach controller
// give a CSI volume, in a Node's status.volumesInUse and volumesAttached
// among others: "kubernetes.io/csi/<driver>^<handle>".
func UniqueVolumeName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(PluginName + "/" + driver + "^" + handle)
}
