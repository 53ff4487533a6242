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
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const (
	drv   = "fence.csi-fence.io"
	other = "other.csi.example.com"
)

func TestPaths(t *testing.T) {
	l := New("/var/lib/kubelet/")
	hash := VolumeHandleHash("vol-1")
	tests := []struct{ got, want string }{
		{l.PublishPath("uid-1", "pv-a"), "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount"},
		{l.PodVolumeDir("uid-1", "pv-a"), "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-a"},
		{l.StagingPath(drv, "vol-1"), "/var/lib/kubelet/plugins/kubernetes.io/csi/fence.csi-fence.io/" + hash + "/globalmount"},
		{l.LegacyStagingPath("pv-a"), "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pv-a/globalmount"},
		{l.BlockDataDir("pv-b"), "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv-b/data"},
		{l.BlockGlobalMapPath("pv-b"), "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv-b/dev"},
		{l.BlockStagingPath("pv-b"), "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-b"},
		{l.BlockPublishPath("pv-b", "uid-1"), "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid-1"},
		{l.PodDeviceMapPath("uid-1", "pv-b"), "/var/lib/kubelet/pods/uid-1/volumeDevices/kubernetes.io~csi/pv-b"},
		{New("").Root, "/var/lib/kubelet"},
		{VolumeHandleHash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{AttachmentName("vol-1", drv, "node-1"), "csi-550643f5cd1c4c588f1c3458561031feb17db2e2b864188f99e5b97a4ea21d07"},
	}
	for i, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%d: got %s, want %s", i, tc.got, tc.want)
		}
	}
}

func TestVolumeData(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadVolumeData(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: got %v, want ErrNotExist", err)
	}
	// The kubelet's own encoding: a JSON object of strings.
	raw := `{"attachmentID":"csi-x","driverName":"d","nodeName":"n","specVolID":"pv","volumeHandle":"h","volumeLifecycleMode":"Persistent"}`
	if err := os.WriteFile(filepath.Join(dir, VolDataFileName), []byte(raw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := ReadVolumeData(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := VolumeData{SpecVolID: "pv", VolumeHandle: "h", DriverName: "d", NodeName: "n", AttachmentID: "csi-x", VolumeLifecycleMode: "Persistent"}
	if *d != want {
		t.Errorf("got %+v, want %+v", *d, want)
	}
	for _, bad := range []string{`{`, `{"driverName":"d"}`, `{"volumeHandle":"h"}`, `[]`} {
		if err := os.WriteFile(filepath.Join(dir, VolDataFileName), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadVolumeData(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: got %v, want a malformed-file error", bad, err)
		}
	}
	if err := WriteVolumeData(dir, VolumeData{DriverName: "d"}); err == nil {
		t.Error("WriteVolumeData without a handle succeeded")
	}
}

// node lays out a node's kubelet directory for the scan and match tests.
type node struct {
	t *testing.T
	l Layout
}

func (n node) mkdir(p string) {
	n.t.Helper()
	if err := os.MkdirAll(p, 0o750); err != nil {
		n.t.Fatal(err)
	}
}

// stagedPublished lays out a filesystem volume staged and published to pods,
// with the driver's target directories, as after a kubelet mount.
func (n node) stagedPublished(driver, handle, pv string, pods ...string) {
	n.t.Helper()
	sp, err := n.l.PrepareStage(driver, handle)
	if err != nil {
		n.t.Fatal(err)
	}
	n.mkdir(sp)
	for _, uid := range pods {
		tp, err := n.l.PreparePublish(uid, pv, VolumeData{VolumeHandle: handle, DriverName: driver, NodeName: "node-1"})
		if err != nil {
			n.t.Fatal(err)
		}
		n.mkdir(tp)
	}
}

func (n node) block(driver, handle, pv string, pods ...string) {
	n.t.Helper()
	if err := n.l.PrepareBlock(pv, VolumeData{VolumeHandle: handle, DriverName: driver}); err != nil {
		n.t.Fatal(err)
	}
	if _, err := n.l.PrepareBlockStage(pv); err != nil {
		n.t.Fatal(err)
	}
	for _, uid := range pods {
		p, err := n.l.PrepareBlockPublish(pv, uid)
		if err != nil {
			n.t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil { // the driver's device file
			n.t.Fatal(err)
		}
		if err := n.l.MapBlockDevice(pv, uid); err != nil {
			n.t.Fatal(err)
		}
	}
}

func podVolumeDirs(ps []PodVolume) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.PodUID+"/"+p.SpecName)
	}
	return out
}

func stagedDirs(ss []StagedVolume) []string {
	var out []string
	for _, s := range ss {
		out = append(out, filepath.Base(filepath.Dir(s.Dir))+"/"+filepath.Base(s.Dir))
	}
	return out
}

func blockNames(bs []BlockVolume) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.SpecName+":"+strings.Join(b.PodUIDs, ","))
	}
	return out
}

func TestScanAndMatch(t *testing.T) {
	root := t.TempDir()
	n := node{t, New(root)}
	l := n.l
	n.stagedPublished(drv, "vol-1", "pv-1", "pod-a", "pod-b")
	n.stagedPublished(drv, "vol-2", "pv-2", "pod-a")
	n.stagedPublished(other, "vol-1", "pv-x", "pod-c") // same handle, other driver
	n.block(drv, "vol-3", "pv-3", "pod-d")
	// A publish dir named after pv-1 whose metadata names another volume: the
	// metadata decides, never the name.
	n.stagedPublished(drv, "vol-9", "pv-1", "pod-e")
	// Leftovers without metadata.
	n.mkdir(l.PublishPath("pod-f", "pv-2"))              // named after a recorded PV
	n.mkdir(l.PublishPath("pod-f", "scratch"))           // an inline volume's name
	n.mkdir(l.StagingPath(drv, "vol-4"))                 // path derived from a handle
	n.mkdir(l.StagingPath(drv, "vol-unknown"))           // our driver, unknown handle
	n.mkdir(l.StagingPath(other, "vol-5"))               // another driver's
	n.mkdir(l.LegacyStagingPath("pv-1"))                 // pre-1.25 kubelet
	n.mkdir(filepath.Join(l.PluginDir(), drv, "plugin")) // not a staging dir (no globalmount, no vol_data.json)
	n.mkdir(filepath.Join(l.BlockPublishDir("pv-6"), "pod-g"))

	inv, err := l.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(inv.PodVolumes), 7; got != want {
		t.Errorf("pod volumes: got %d %v, want %d", got, podVolumeDirs(inv.PodVolumes), want)
	}
	if got, want := blockNames(inv.Block), []string{"pv-3:pod-d", "pv-6:pod-g"}; !reflect.DeepEqual(got, want) {
		t.Errorf("block: got %v, want %v", got, want)
	}

	tests := []struct {
		name       string
		vol        Volume
		pods       []string
		unverified []string
		staged     []string
		block      []string
	}{
		{
			name:   "staged and published to two pods, plus a legacy staging dir",
			vol:    Volume{Driver: drv, VolumeHandle: "vol-1", PVName: "pv-1"},
			pods:   []string{"pod-a/pv-1", "pod-b/pv-1"},
			staged: []string{drv + "/" + VolumeHandleHash("vol-1"), "pv/pv-1"},
		},
		{
			name:       "metadata-less publish dir named after the PV is unverified",
			vol:        Volume{Driver: drv, VolumeHandle: "vol-2", PVName: "pv-2"},
			pods:       []string{"pod-a/pv-2"},
			unverified: []string{"pod-f/pv-2"},
			staged:     []string{drv + "/" + VolumeHandleHash("vol-2")},
		},
		{
			name:   "without a PV name nothing is matched by name",
			vol:    Volume{Driver: drv, VolumeHandle: "vol-2"},
			pods:   []string{"pod-a/pv-2"},
			staged: []string{drv + "/" + VolumeHandleHash("vol-2")},
		},
		{
			name:  "block volume",
			vol:   Volume{Driver: drv, VolumeHandle: "vol-3", PVName: "pv-3"},
			block: []string{"pv-3:pod-d"},
		},
		{
			name:   "staging dir without metadata at the handle's path",
			vol:    Volume{Driver: drv, VolumeHandle: "vol-4", PVName: "pv-4"},
			staged: []string{drv + "/" + VolumeHandleHash("vol-4")},
		},
		{
			name: "another driver's volume with the same handle is not ours",
			vol:  Volume{Driver: drv, VolumeHandle: "vol-5", PVName: "pv-5"},
		},
		{
			name:  "block leftovers without metadata, by PV name",
			vol:   Volume{Driver: drv, VolumeHandle: "vol-6", PVName: "pv-6"},
			block: []string{"pv-6:pod-g"},
		},
		{
			name:   "the metadata of a dir named pv-1 names vol-9",
			vol:    Volume{Driver: drv, VolumeHandle: "vol-9", PVName: "pv-9"},
			pods:   []string{"pod-e/pv-1"},
			staged: []string{drv + "/" + VolumeHandleHash("vol-9")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := inv.Match(tc.vol)
			check := func(what string, got, want []string) {
				t.Helper()
				sort.Strings(got)
				sort.Strings(want)
				if len(got) == 0 && len(want) == 0 {
					return
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: got %v, want %v", what, got, want)
				}
			}
			check("pod volumes", podVolumeDirs(m.PodVolumes), tc.pods)
			check("unverified", podVolumeDirs(m.UnverifiedPodVolumes), tc.unverified)
			check("staged", stagedDirs(m.Staged), tc.staged)
			check("block", blockNames(m.Block), tc.block)
			if m.Empty() != (len(tc.pods)+len(tc.unverified)+len(tc.staged)+len(tc.block) == 0) {
				t.Errorf("Empty() = %v", m.Empty())
			}
		})
	}

	known := []Volume{{Driver: drv, VolumeHandle: "vol-2", PVName: "pv-2"}, {Driver: drv, VolumeHandle: "vol-4", PVName: "pv-4"}}
	got := inv.Unattributed(l, drv, known)
	want := []string{
		l.PodVolumeDir("pod-f", "scratch"),
		l.StagingDir(drv, "vol-unknown"),
		filepath.Dir(l.LegacyStagingPath("pv-1")),
		l.BlockVolumeDir("pv-6"),
	}
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unattributed:\n got %v\nwant %v", got, want)
	}
}

func TestScanUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any directory")
	}
	root := t.TempDir()
	l := New(root)
	dir := l.PodCSIVolumesDir("pod-a")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Chmod(dir, 0o750) }()
	if _, err := l.Scan(); err == nil {
		t.Fatal("Scan of an unreadable directory succeeded: it must not report that nothing is left")
	}
}

// fakeMounts is a MountChecker with a fixed set of mount points.
type fakeMounts map[string]bool

func (f fakeMounts) IsMountPoint(p string) (bool, error) {
	if _, err := os.Lstat(p); err != nil {
		return false, err
	}
	return f[p], nil
}

func TestRemover(t *testing.T) {
	t.Run("filesystem volume", func(t *testing.T) {
		n := node{t, New(t.TempDir())}
		n.stagedPublished(drv, "vol-1", "pv-1", "pod-a")
		inv, _ := n.l.Scan()
		m := inv.Match(Volume{Driver: drv, VolumeHandle: "vol-1"})
		p, s := m.PodVolumes[0], m.Staged[0]

		mounts := fakeMounts{p.TargetPath: true, s.StagingPath: true}
		r := Remover{Layout: n.l, Mounts: mounts}
		if err := r.RemovePodVolume(p); !errors.Is(err, ErrStillMounted) {
			t.Errorf("mounted target: got %v, want ErrStillMounted", err)
		}
		if err := r.RemoveStaged(s); !errors.Is(err, ErrStillMounted) {
			t.Errorf("mounted staging path: got %v, want ErrStillMounted", err)
		}
		for _, path := range []string{p.TargetPath, filepath.Join(p.Dir, VolDataFileName), s.StagingPath, filepath.Join(s.Dir, VolDataFileName)} {
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s was touched while mounted: %v", path, err)
			}
		}

		// Unmounted but not empty: data the driver did not remove is kept.
		delete(mounts, p.TargetPath)
		if err := os.WriteFile(filepath.Join(p.TargetPath, "data"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := r.RemovePodVolume(p); err == nil {
			t.Error("a non-empty target was removed")
		}
		os.Remove(filepath.Join(p.TargetPath, "data"))
		if err := r.RemovePodVolume(p); err != nil {
			t.Fatal(err)
		}
		delete(mounts, s.StagingPath)
		if err := r.RemoveStaged(s); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{p.Dir, s.Dir} {
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s not removed: %v", path, err)
			}
		}
		// Idempotent.
		if err := r.RemovePodVolume(p); err != nil {
			t.Error(err)
		}
		if gone, err := r.RemovePodDirIfUnused("pod-a"); err != nil || !gone {
			t.Errorf("pod dir: gone=%v err=%v", gone, err)
		}
	})

	t.Run("block volume", func(t *testing.T) {
		n := node{t, New(t.TempDir())}
		l := n.l
		n.block(drv, "vol-3", "pv-3", "pod-d")
		// A file outside the layout that the pod's symlink points at must
		// survive: symlinks are removed, never followed.
		outside := filepath.Join(t.TempDir(), "device")
		if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Remove(l.PodDeviceMapPath("pod-d", "pv-3"))
		if err := os.Symlink(outside, l.PodDeviceMapPath("pod-d", "pv-3")); err != nil {
			t.Fatal(err)
		}

		dev := filepath.Join(l.BlockGlobalMapPath("pv-3"), "pod-d")
		mounts := fakeMounts{dev: true}
		r := Remover{Layout: l, Mounts: mounts}
		if err := r.RemoveBlockPod("pv-3", "pod-d"); !errors.Is(err, ErrStillMounted) {
			t.Errorf("bind-mounted device: got %v, want ErrStillMounted", err)
		}
		// With the publish path gone, the mounted device entry still stops
		// the removal of the volume directory.
		os.Remove(l.BlockPublishPath("pv-3", "pod-d"))
		if err := r.RemoveBlockVolume("pv-3"); !errors.Is(err, ErrStillMounted) {
			t.Errorf("volume dir with a mounted device: got %v, want ErrStillMounted", err)
		}
		if _, err := os.Stat(filepath.Join(l.BlockDataDir("pv-3"), VolDataFileName)); err != nil {
			t.Errorf("vol_data.json removed beside a mounted device: %v", err)
		}
		delete(mounts, dev)
		if err := r.RemoveBlockPod("pv-3", "pod-d"); err != nil {
			t.Fatal(err)
		}
		if err := r.RemoveBlockVolume("pv-3"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(outside); err != nil {
			t.Errorf("the symlink's target was removed: %v", err)
		}
		inv, err := l.Scan()
		if err != nil {
			t.Fatal(err)
		}
		if len(inv.Block) != 0 {
			t.Errorf("block leftovers remain: %v", blockNames(inv.Block))
		}
	})
}

func TestUniqueVolumeName(t *testing.T) {
	// The attach/detach controller's and the kubelet's name of a CSI
	// volume (pkg/volume/csi GetVolumeName, util.GetUniqueVolumeName).
	if got, want := UniqueVolumeName("hostpath.csi.k8s.io", "vol-1"), "kubernetes.io/csi/hostpath.csi.k8s.io^vol-1"; string(got) != want {
		t.Errorf("UniqueVolumeName = %q, want %q", got, want)
	}
}
