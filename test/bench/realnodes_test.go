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

package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// Lines as the real nodes' kubelet (1.36, --v=2) and containerd (2.4)
// logged them for a replacement pod; the kubelet logs its own zone's time
// (UTC here), containerd RFC 3339.
const (
	testUID     = "41666375-22fa-4163-bc54-5bce9ad37d2a"
	kubeletLine = `I1206 07:02:17.758605   28265 kubelet.go:2709] "SyncLoop ADD" source="api" pods=["default/bench-writer-0"]
I1206 07:02:04.914800   28151 operation_generator.go:1466] "Controller attach succeeded for volume \"bench-vol-0\" (UniqueName: \"kubernetes.io/csi/fence.csi-fence.io^bench-vol-0\") pod \"bench-writer-0\" (UID: \"0ld\") device path: \"\"" pod="default/bench-writer-0"
I1206 07:02:20.990127   28265 operation_generator.go:1466] "Controller attach succeeded for volume \"bench-vol-0\" (UniqueName: \"kubernetes.io/csi/fence.csi-fence.io^bench-vol-0\") pod \"bench-writer-0\" (UID: \"41666375-22fa-4163-bc54-5bce9ad37d2a\") device path: \"\"" pod="default/bench-writer-0"
I1206 07:02:21.117103   28265 operation_generator.go:558] "MountVolume.MountDevice succeeded for volume \"bench-vol-0\" (UniqueName: \"kubernetes.io/csi/fence.csi-fence.io^bench-vol-0\") pod \"bench-writer-0\" (UID: \"41666375-22fa-4163-bc54-5bce9ad37d2a\") device mount path \"/tmp/x/globalmount\"" pod="default/bench-writer-0"
I1206 07:02:21.132310   28265 operation_generator.go:617] "MountVolume.SetUp succeeded for volume \"bench-vol-0\" (UniqueName: \"kubernetes.io/csi/fence.csi-fence.io^bench-vol-0\") pod \"bench-writer-0\" (UID: \"41666375-22fa-4163-bc54-5bce9ad37d2a\") " pod="default/bench-writer-0"
`
	containerdLine = `time="2026-12-06T07:02:21.164495792Z" level=info msg="RunPodSandbox for name:\"bench-writer-0\"  uid:\"41666375-22fa-4163-bc54-5bce9ad37d2a\"  namespace:\"default\""
time="2026-12-06T07:02:21.385892684Z" level=info msg="RunPodSandbox for name:\"bench-writer-0\"  uid:\"41666375-22fa-4163-bc54-5bce9ad37d2a\"  namespace:\"default\" returns sandbox id \"f476321d\""
time="2026-12-06T07:02:21.391000000Z" level=info msg="CreateContainer within sandbox \"0ther\" for name:\"writer\"  attempt:0 returns container id \"0bad\""
time="2026-12-06T07:02:21.400573586Z" level=info msg="CreateContainer within sandbox \"f476321d\" for name:\"writer\"  attempt:0 returns container id \"70093d09\""
time="2026-12-06T07:02:21.401241541Z" level=info msg="StartContainer for \"70093d09\""
time="2026-12-06T07:02:21.476338027Z" level=info msg="StartContainer for \"70093d09\" returns successfully"
`
)

// The new node's steps of the replacement pod are read from its kubelet's
// and containerd's logs: those of that pod (by UID) after the node went
// down, each with the time the line says.
func TestNodeMilestones(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct {
		name  string
		since time.Time
		want  map[string]time.Time
	}{
		{name: "after the node went down", since: at("2026-12-06T07:02:05Z"), want: map[string]time.Time{
			AttachVerified:   at("2026-12-06T07:02:20.990127Z"),
			VolumeStaged:     at("2026-12-06T07:02:21.117103Z"),
			VolumeMounted:    at("2026-12-06T07:02:21.132310Z"),
			SandboxReady:     at("2026-12-06T07:02:21.385892684Z"),
			ContainerStarted: at("2026-12-06T07:02:21.476338027Z"),
		}},
		{name: "nothing after", since: at("2026-12-06T07:03:00Z"), want: map[string]time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]time.Time{}
			events := append(kubeletMilestones([]byte(strings.ReplaceAll(kubeletLine, `\"0ld\"`, `\"`+testUID[:8]+`\"`)), testUID, tc.since),
				containerdMilestones([]byte(containerdLine), testUID, tc.since)...)
			for _, e := range events {
				if _, dup := got[e.What]; dup {
					t.Errorf("%s twice", e.What)
				}
				got[e.What] = e.At
			}
			if len(got) != len(tc.want) {
				t.Errorf("milestones %v, want %v", got, tc.want)
			}
			for what, when := range tc.want {
				if !got[what].Equal(when) {
					t.Errorf("%s at %v, want %v", what, got[what], when)
				}
			}
		})
	}
}

// The real-node tables: both measures per path, the goal, and each path's
// steps from the node down, the kubelet's and the writer's included.
func TestRealTables(t *testing.T) {
	r := pathResult{path: "automatic", trials: 2, samples: []time.Duration{300 * time.Millisecond, 400 * time.Millisecond},
		recovery: []time.Duration{12500 * time.Millisecond, 13 * time.Second},
		timelines: [][]timeline.Event{trialAt(map[string]float64{timeline.NodeDown: 0, timeline.NodeNotReady: 9.5, timeline.PodEvicted: 11.5,
			timeline.PodReplaced: 11.6, timeline.AttachedElsewhere: 11.8, AttachVerified: 12.1, VolumeStaged: 12.2, VolumeMounted: 12.25,
			SandboxReady: 12.4, ContainerStarted: 12.48, ReplacementWriting: 12.5})}}
	got := realTables([]pathResult{r})
	expectLines(t, got,
		"eligible -> attached elsewhere (real nodes):",
		"automatic             2    0.30s    0.40s    0.30s    0.40s",
		"node down -> replacement writing (real nodes; goal 13.5s: grace period 10s + toleration 2s + 1.5s):",
		"automatic             2   12.50s   13.00s   12.50s   13.00s",
		"of which the cluster's own (node down -> replacement writing less eligible -> attached, trial by trial):",
		"automatic             2   12.20s   12.60s   12.20s   12.60s",
		"Where the time goes, automatic path (1 trials; from the node down):",
		"node NotReady                     9.50s    9.50s |    9.50s    9.50s",
		"pod evicted (Terminating)        11.50s   11.50s |    2.00s    2.00s",
		// From the later of the attach and the scheduling.
		"kubelet: attach verified         12.10s   12.10s |    0.30s    0.30s",
		"replacement writing              12.50s   12.50s |    0.10s    0.10s",
	)
}
