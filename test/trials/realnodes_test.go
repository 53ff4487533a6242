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

package trials

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/images/writer/records"
)

// volumeOf returns the records of nodes, numbered from 1 in that order.
func volumeOf(nodes ...string) []byte {
	var b strings.Builder
	at := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	for i, n := range nodes {
		b.WriteString(records.Record{Seq: int64(i + 1), Node: n, Time: at.Add(time.Duration(i) * 200 * time.Millisecond)}.Line())
	}
	return []byte(b.String())
}

func TestRecordProblems(t *testing.T) {
	tests := []struct {
		name             string
		data             []byte
		old, replacement string
		want             []string // substrings, one per problem
	}{
		{name: "failed over", data: volumeOf("a", "a", "a", "b", "b"), old: "a", replacement: "b"},
		{name: "old node after the replacement", data: volumeOf("a", "a", "b", "a", "b"), old: "a", replacement: "b",
			want: []string{"record 4 from the failed node a after the replacement's first (3)"}},
		{name: "no replacement record", data: volumeOf("a", "a"), old: "a", replacement: "b",
			want: []string{"none from the replacement on b"}},
		{name: "same node again", data: volumeOf("a", "a", "a"), old: "a", replacement: "a"},
		{name: "gap", data: append(volumeOf("a"), []byte(records.Record{Seq: 3, Node: "b"}.Line())...), old: "a", replacement: "b",
			want: []string{"records on v:", "none from the replacement"}},
		{name: "torn", data: volumeOf("a", "b")[:80], old: "a", replacement: "b",
			want: []string{"records on v:", "none from the replacement"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := recordProblems("v", tt.data, tt.old, tt.replacement)
			if len(got) != len(tt.want) {
				t.Fatalf("problems %q, want %d like %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d is %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}

func TestScheduleOn(t *testing.T) {
	tests := []struct {
		name    string
		real    bool
		wantErr string
	}{
		{name: "power-off", real: true},
		{name: "power-off", real: false},
		{name: "partition+skewed-kubelet", real: true, wantErr: "KWOK nodes only"},
		{name: "power-off+two-drivers", real: true},
		{name: "power-off+node-plugin-crash-during-cleanup", real: false, wantErr: "real nodes only"},
		{name: "power-off+node-plugin-crash-during-cleanup", real: true},
		{name: "no-such", real: true, wantErr: "unknown schedule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ScheduleOn(tt.name, tt.real)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatal(err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
			case tt.wantErr == "" && s.Name != tt.name:
				t.Fatalf("got schedule %q", s.Name)
			}
		})
	}
}

// TestSchedulesOn checks that the schedules of each node kind are those
// ScheduleOn accepts, and that the real-node schedules are there.
func TestSchedulesOn(t *testing.T) {
	for _, real := range []bool{false, true} {
		names := map[string]bool{}
		for _, s := range SchedulesOn(real) {
			names[s.Name] = true
			if _, err := ScheduleOn(s.Name, real); err != nil {
				t.Errorf("real=%t: %v", real, err)
			}
		}
		for _, s := range Schedules {
			if _, err := ScheduleOn(s.Name, real); err == nil && !names[s.Name] {
				t.Errorf("real=%t: %s accepted but not listed", real, s.Name)
			}
		}
	}
	for _, want := range []string{"power-off", "partition", "power-off+kill-controller", "partition+leader-loss",
		"power-off+return-mid-fence", "power-off+reboot-during-cleanup", "two-nodes", "power-off+rolling-update",
		"power-off+two-drivers", "power-off+node-plugin-crash-during-cleanup"} {
		if s, err := ScheduleOn(want, true); err != nil || s.Real == nil {
			t.Errorf("%s does not run on real nodes: %v", want, err)
		}
	}
}

// The second driver's volume is a claim template and a mount of its own,
// of its own class; the records' volume is left as it was.
func TestWithSecondVolume(t *testing.T) {
	sts := framework.WriterStatefulSet("w0", realClass)
	withSecondVolume(sts)
	var claims []string
	for _, c := range sts.Spec.VolumeClaimTemplates {
		claims = append(claims, c.Name+"="+ptr.Deref(c.Spec.StorageClassName, ""))
	}
	if want := []string{"data=" + realClass, realClaim2 + "=" + realClass2}; !slices.Equal(claims, want) {
		t.Errorf("claim templates %v, want %v", claims, want)
	}
	var mounts []string
	for _, m := range sts.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts = append(mounts, m.Name+"@"+m.MountPath)
	}
	if want := []string{"data@/data", realClaim2 + "@/" + realClaim2}; !slices.Equal(mounts, want) {
		t.Errorf("writer mounts %v, want %v", mounts, want)
	}
}

// A delete is judged on the node of the pod it removed: the first of that
// name seen gone after it, not an earlier pod of the same name, nor a
// replacement that still exists.
func TestNodeOfDeleted(t *testing.T) {
	at := time.Date(2026, 12, 6, 11, 12, 57, 210_000_000, time.UTC)
	var p podNodes
	p.bound("w0-0", "first", "trial-1")
	p.deleted("w0-0", "first", "", at.Add(-20*time.Second))
	p.bound("w0-0", "second", "trial-0")
	p.deleted("w0-0", "second", "trial-0", at.Add(30*time.Millisecond))
	p.bound("w0-0", "third", "trial-1")
	for _, tc := range []struct {
		name string
		pod  string
		at   time.Time
		want string
	}{
		{name: "the pod deleted then", pod: "w0-0", at: at, want: "trial-0"},
		{name: "the first pod's delete", pod: "w0-0", at: at.Add(-20*time.Second - time.Millisecond), want: "trial-1"},
		{name: "after every delete seen", pod: "w0-0", at: at.Add(time.Second), want: "fallback"},
		{name: "a pod never seen", pod: "w1-0", at: at, want: "fallback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.nodeOfDeleted(tc.pod, tc.at, "fallback"); got != tc.want {
				t.Errorf("nodeOfDeleted(%s, %s) = %s, want %s", tc.pod, tc.at.Format("15:04:05.000"), got, tc.want)
			}
		})
	}
}

// TestLeaderPod: the controller pod a leader-loss or rolling-update trial
// takes down is the node-fencing Lease's holder when this driver's
// controller holds it (handedOverLeases keeps it only then), else
// external-attacher's Lease's holder, whose identity is the pod alone
// (seed 14022: the second driver's controller held the node-fencing Lease).
func TestLeaderPod(t *testing.T) {
	attacher := "default/" + contract.AttacherLeaseName(framework.DriverName)
	fencing := sidecar.DefaultStormGuardNamespace + "/" + contract.NodeFencingLeaseName
	for _, tc := range []struct {
		name string
		held map[string]string
		want string // "": an error
	}{
		{name: "both Leases of this driver's controller", held: map[string]string{attacher: "ctrl-a", fencing: "ctrl-a_fence-csi-fence-io"}, want: "ctrl-a"},
		{name: "the node-fencing Lease another driver's", held: map[string]string{attacher: "ctrl-a"}, want: "ctrl-a"},
		{name: "no Lease held", held: map[string]string{attacher: ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := (&Trial{}).leaderPod(tc.held)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("leaderPod = %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("leaderPod = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
