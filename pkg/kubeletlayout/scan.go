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

package kubeletlayout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// PodVolume is what is left of one filesystem volume of one pod.
type PodVolume struct {
	PodUID   string
	SpecName string // directory name: the PV name, or the pod's volume name for inline volumes
	// Dir holds vol_data.json and the publish path.
	Dir string
	// TargetPath is Dir/mount, the NodePublishVolume target; it may be gone.
	TargetPath string
	// Data is the parsed vol_data.json, nil when it is missing or malformed
	// (DataErr says which).
	Data    *VolumeData
	DataErr error
}

// StagedVolume is what is left of one filesystem volume's staging.
type StagedVolume struct {
	// Dir holds vol_data.json and the staging path.
	Dir string
	// StagingPath is Dir/globalmount, the NodeStageVolume staging target.
	StagingPath string
	// Driver is the driver directory Dir is in; empty in the legacy layout.
	Driver string
	// LegacyPVName is the PV name of a legacy (pv/<pvName>) staging path.
	LegacyPVName string
	Data         *VolumeData
	DataErr      error
}

// BlockVolume is what is left of one block volume, across its staging path,
// its publish paths and the pods it was mapped into.
type BlockVolume struct {
	SpecName string
	// Data is the parsed data/vol_data.json, nil when missing or malformed.
	Data    *VolumeData
	DataErr error
	// StagingPath is set when the block staging path exists.
	StagingPath string
	// PodUIDs are the pods with a publish path, a device entry under dev/ or
	// a device symlink for this volume.
	PodUIDs []string
}

// Inventory is every CSI volume leftover found under a kubelet root.
type Inventory struct {
	PodVolumes []PodVolume
	Staged     []StagedVolume
	Block      []BlockVolume
}

// Scan lists the CSI volume directories under the kubelet root. It reads only
// directory listings and vol_data.json files, and never descends into a
// publish or staging path, so a path that is still a mount point (or hung, as
// a fenced volume's mount may be) is never entered. A directory that cannot
// be read is an error: the caller must not conclude that nothing is left.
func (l Layout) Scan() (*Inventory, error) {
	inv := &Inventory{}
	if err := l.scanPods(inv); err != nil {
		return nil, err
	}
	if err := l.scanStaging(inv); err != nil {
		return nil, err
	}
	if err := l.scanBlock(inv); err != nil {
		return nil, err
	}
	return inv, nil
}

// readDirNames lists dir's entries of the wanted kind, sorted; a missing dir
// has none.
func readDirNames(dir string, dirsOnly bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if dirsOnly && !e.IsDir() {
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

func (l Layout) scanPods(inv *Inventory) error {
	pods, err := readDirNames(l.PodsDir(), true)
	if err != nil {
		return err
	}
	for _, uid := range pods {
		specs, err := readDirNames(l.PodCSIVolumesDir(uid), true)
		if err != nil {
			return err
		}
		for _, spec := range specs {
			dir := filepath.Join(l.PodCSIVolumesDir(uid), spec)
			d, derr := ReadVolumeData(dir)
			inv.PodVolumes = append(inv.PodVolumes, PodVolume{
				PodUID: uid, SpecName: spec, Dir: dir, TargetPath: filepath.Join(dir, mountDir), Data: d, DataErr: derr,
			})
		}
	}
	return nil
}

func (l Layout) scanStaging(inv *Inventory) error {
	drivers, err := readDirNames(l.PluginDir(), true)
	if err != nil {
		return err
	}
	for _, driver := range drivers {
		if driver == volumeDevicesDir {
			continue
		}
		names, err := readDirNames(filepath.Join(l.PluginDir(), driver), true)
		if err != nil {
			return err
		}
		for _, name := range names {
			dir := filepath.Join(l.PluginDir(), driver, name)
			s := StagedVolume{Dir: dir, StagingPath: filepath.Join(dir, globalMountDir), Driver: driver}
			if driver == legacyStagingDir {
				s.Driver, s.LegacyPVName = "", name
			}
			ok, err := exists(s.StagingPath)
			if err != nil {
				return err
			}
			hasData, err := exists(filepath.Join(dir, VolDataFileName))
			if err != nil {
				return err
			}
			if !ok && !hasData {
				// Not a staging directory: the kubelet's staging dirs hold
				// globalmount and/or vol_data.json.
				continue
			}
			s.Data, s.DataErr = ReadVolumeData(dir)
			inv.Staged = append(inv.Staged, s)
		}
	}
	return nil
}

func (l Layout) scanBlock(inv *Inventory) error {
	byName := map[string]*BlockVolume{}
	get := func(spec string) *BlockVolume {
		if b := byName[spec]; b != nil {
			return b
		}
		b := &BlockVolume{SpecName: spec}
		byName[spec] = b
		return b
	}
	addPod := func(b *BlockVolume, uid string) {
		for _, u := range b.PodUIDs {
			if u == uid {
				return
			}
		}
		b.PodUIDs = append(b.PodUIDs, uid)
	}

	names, err := readDirNames(l.VolumeDevicesDir(), true)
	if err != nil {
		return err
	}
	for _, spec := range names {
		if spec == blockStagingDir || spec == blockPublishDir {
			continue
		}
		b := get(spec)
		b.Data, b.DataErr = ReadVolumeData(filepath.Join(l.VolumeDevicesDir(), spec, blockDataDir))
		devs, err := readDirNames(filepath.Join(l.VolumeDevicesDir(), spec, blockDevDir), false)
		if err != nil {
			return err
		}
		for _, uid := range devs {
			addPod(b, uid)
		}
	}
	staged, err := readDirNames(filepath.Join(l.VolumeDevicesDir(), blockStagingDir), false)
	if err != nil {
		return err
	}
	for _, spec := range staged {
		get(spec).StagingPath = filepath.Join(l.VolumeDevicesDir(), blockStagingDir, spec)
	}
	published, err := readDirNames(filepath.Join(l.VolumeDevicesDir(), blockPublishDir), true)
	if err != nil {
		return err
	}
	for _, spec := range published {
		b := get(spec)
		uids, err := readDirNames(filepath.Join(l.VolumeDevicesDir(), blockPublishDir, spec), false)
		if err != nil {
			return err
		}
		for _, uid := range uids {
			addPod(b, uid)
		}
	}
	pods, err := readDirNames(l.PodsDir(), true)
	if err != nil {
		return err
	}
	for _, uid := range pods {
		links, err := readDirNames(l.PodCSIDevicesDir(uid), false)
		if err != nil {
			return err
		}
		for _, spec := range links {
			addPod(get(spec), uid)
		}
	}

	specs := make([]string, 0, len(byName))
	for spec := range byName {
		specs = append(specs, spec)
	}
	sort.Strings(specs)
	for _, spec := range specs {
		b := byName[spec]
		if b.Data == nil && b.DataErr == nil {
			b.DataErr = fmt.Errorf("%s: %w", filepath.Join(l.BlockDataDir(spec), VolDataFileName), fs.ErrNotExist)
		}
		sort.Strings(b.PodUIDs)
		inv.Block = append(inv.Block, *b)
	}
	return nil
}

// Volume identifies one CSI volume: its driver, its handle and, when known,
// its PV name.
type Volume struct {
	Driver       string
	VolumeHandle string
	PVName       string
}

// Match is what an Inventory holds of one volume.
type Match struct {
	// PodVolumes are publish directories whose vol_data.json names the
	// volume: they get NodeUnpublishVolume.
	PodVolumes []PodVolume
	// UnverifiedPodVolumes are publish directories without readable
	// metadata whose name is the volume's PV name. The kubelet writes
	// vol_data.json before NodePublishVolume, so no CSI publish went through
	// them; and a CSI inline volume of another driver may have the same
	// name. They get no CSI call, only removal when nothing is mounted.
	UnverifiedPodVolumes []PodVolume
	// Staged are staging directories of the volume: by vol_data.json, or,
	// without it, at the path the kubelet derives from the driver and the
	// volume handle (or the legacy path of the PV name).
	Staged []StagedVolume
	// Block are block volumes of the volume: by vol_data.json or, without it,
	// by PV name (block volumes are always PVs, whose names are unique).
	Block []BlockVolume
}

// Empty reports whether nothing of the volume was found.
func (m Match) Empty() bool {
	return len(m.PodVolumes) == 0 && len(m.UnverifiedPodVolumes) == 0 && len(m.Staged) == 0 && len(m.Block) == 0
}

// Paths lists the directories of the match, for messages.
func (m Match) Paths(l Layout) []string {
	var out []string
	for _, p := range m.PodVolumes {
		out = append(out, p.Dir)
	}
	for _, p := range m.UnverifiedPodVolumes {
		out = append(out, p.Dir)
	}
	for _, s := range m.Staged {
		out = append(out, s.Dir)
	}
	for _, b := range m.Block {
		out = append(out, l.BlockVolumeDir(b.SpecName))
	}
	return out
}

// owns reports whether metadata d names v.
func (v Volume) owns(d *VolumeData) bool {
	return d != nil && d.DriverName == v.Driver && d.VolumeHandle == v.VolumeHandle
}

// Match returns the leftovers of v. Leftovers with metadata are attributed
// by it alone, never by their names.
func (inv *Inventory) Match(v Volume) Match {
	var m Match
	for _, p := range inv.PodVolumes {
		switch {
		case p.Data != nil:
			if v.owns(p.Data) {
				m.PodVolumes = append(m.PodVolumes, p)
			}
		case v.PVName != "" && p.SpecName == EscapeName(v.PVName):
			m.UnverifiedPodVolumes = append(m.UnverifiedPodVolumes, p)
		}
	}
	for _, s := range inv.Staged {
		switch {
		case s.Data != nil:
			if v.owns(s.Data) {
				m.Staged = append(m.Staged, s)
			}
		case s.LegacyPVName != "":
			if v.PVName != "" && s.LegacyPVName == EscapeName(v.PVName) {
				m.Staged = append(m.Staged, s)
			}
		case s.Driver == v.Driver && filepath.Base(s.Dir) == VolumeHandleHash(v.VolumeHandle):
			m.Staged = append(m.Staged, s)
		}
	}
	for _, b := range inv.Block {
		switch {
		case b.Data != nil:
			if v.owns(b.Data) {
				m.Block = append(m.Block, b)
			}
		case v.PVName != "" && b.SpecName == EscapeName(v.PVName):
			m.Block = append(m.Block, b)
		}
	}
	return m
}

// Unattributed lists leftovers without readable metadata that belong to none
// of known: nobody can tell whose they are, so they are left alone and
// reported. Staging directories under another driver's directory are that
// driver's business and are not listed.
func (inv *Inventory) Unattributed(l Layout, driver string, known []Volume) []string {
	var out []string
	for _, p := range inv.PodVolumes {
		if p.Data == nil && !matchesAny(known, func(v Volume) bool { return v.PVName != "" && p.SpecName == EscapeName(v.PVName) }) {
			out = append(out, p.Dir)
		}
	}
	for _, s := range inv.Staged {
		if s.Data != nil || (s.Driver != "" && s.Driver != driver) {
			continue
		}
		if !matchesAny(known, func(v Volume) bool {
			if s.LegacyPVName != "" {
				return v.PVName != "" && s.LegacyPVName == EscapeName(v.PVName)
			}
			return filepath.Base(s.Dir) == VolumeHandleHash(v.VolumeHandle)
		}) {
			out = append(out, s.Dir)
		}
	}
	for _, b := range inv.Block {
		if b.Data == nil && !matchesAny(known, func(v Volume) bool { return v.PVName != "" && b.SpecName == EscapeName(v.PVName) }) {
			out = append(out, l.BlockVolumeDir(b.SpecName))
		}
	}
	return out
}

func matchesAny(vs []Volume, f func(Volume) bool) bool {
	for _, v := range vs {
		if f(v) {
			return true
		}
	}
	return false
}
