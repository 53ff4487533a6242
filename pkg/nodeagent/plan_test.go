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

package nodeagent

import (
	"reflect"
	"testing"

	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

func TestPlanCleanup(t *testing.T) {
	l := kubeletlayout.New("/k")
	vol := kubeletlayout.Volume{Driver: "d", VolumeHandle: "h", PVName: "pv"}
	data := &kubeletlayout.VolumeData{DriverName: "d", VolumeHandle: "h"}
	pod := func(uid string) kubeletlayout.PodVolume {
		return kubeletlayout.PodVolume{PodUID: uid, SpecName: "pv", Dir: l.PodVolumeDir(uid, "pv"), TargetPath: l.PublishPath(uid, "pv"), Data: data}
	}
	staged := kubeletlayout.StagedVolume{Dir: "/k/plugins/kubernetes.io/csi/d/" + kubeletlayout.VolumeHandleHash("h"), StagingPath: l.StagingPath("d", "h"), Driver: "d", Data: data}
	block := kubeletlayout.BlockVolume{SpecName: "pv", Data: data, PodUIDs: []string{"u1", "u2"}}

	tests := []struct {
		name     string
		match    kubeletlayout.Match
		canStage bool
		want     []string
	}{
		{
			name:     "staged and published to two pods: unpublish each, then unstage",
			match:    kubeletlayout.Match{PodVolumes: []kubeletlayout.PodVolume{pod("u1"), pod("u2")}, Staged: []kubeletlayout.StagedVolume{staged}},
			canStage: true,
			want: []string{
				"NodeUnpublishVolume /k/pods/u1/volumes/kubernetes.io~csi/pv/mount",
				"remove /k/pods/u1/volumes/kubernetes.io~csi/pv",
				"NodeUnpublishVolume /k/pods/u2/volumes/kubernetes.io~csi/pv/mount",
				"remove /k/pods/u2/volumes/kubernetes.io~csi/pv",
				"NodeUnstageVolume " + l.StagingPath("d", "h"),
				"remove " + staged.Dir,
			},
		},
		{
			name:  "published only, plugin without staging",
			match: kubeletlayout.Match{PodVolumes: []kubeletlayout.PodVolume{pod("u1")}},
			want: []string{
				"NodeUnpublishVolume /k/pods/u1/volumes/kubernetes.io~csi/pv/mount",
				"remove /k/pods/u1/volumes/kubernetes.io~csi/pv",
			},
		},
		{
			name:     "nothing left on disk: unstage at the kubelet's path for the volume",
			canStage: true,
			want:     []string{"NodeUnstageVolume " + l.StagingPath("d", "h")},
		},
		{
			name: "nothing left on disk, plugin without staging: nothing to do",
		},
		{
			name:     "block: unpublish each pod's publish path, unstage the block staging path",
			match:    kubeletlayout.Match{Block: []kubeletlayout.BlockVolume{block}},
			canStage: true,
			want: []string{
				"NodeUnpublishVolume /k/plugins/kubernetes.io/csi/volumeDevices/publish/pv/u1",
				"remove block leftovers of pv for pod u1",
				"NodeUnpublishVolume /k/plugins/kubernetes.io/csi/volumeDevices/publish/pv/u2",
				"remove block leftovers of pv for pod u2",
				"NodeUnstageVolume /k/plugins/kubernetes.io/csi/volumeDevices/staging/pv",
				"remove block volume pv",
			},
		},
		{
			name: "publish dir without metadata: no CSI call, removal only",
			match: kubeletlayout.Match{UnverifiedPodVolumes: []kubeletlayout.PodVolume{
				{PodUID: "u3", SpecName: "pv", Dir: l.PodVolumeDir("u3", "pv"), TargetPath: l.PublishPath("u3", "pv")},
			}},
			canStage: true,
			want: []string{
				"remove /k/pods/u3/volumes/kubernetes.io~csi/pv",
				"NodeUnstageVolume " + l.StagingPath("d", "h"),
			},
		},
		{
			name:  "staging dir of a plugin without staging is only removed",
			match: kubeletlayout.Match{Staged: []kubeletlayout.StagedVolume{staged}},
			want:  []string{"remove " + staged.Dir},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range planCleanup(l, vol, tc.match, tc.canStage) {
				got = append(got, s.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
