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

package podgc

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// When the taint manager should have evicted a pod, from when this process
// first saw each NoExecute taint, the pod's tolerations and the margin.
func TestEvictionDue(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	unreachable := v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}
	notReady := v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute}
	noSchedule := v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoSchedule}
	seen := map[string]time.Time{v1.TaintNodeUnreachable: t0, v1.TaintNodeNotReady: t0.Add(5 * time.Second)}
	tolerate := func(key string, seconds *int64) v1.Toleration {
		return v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: seconds}
	}
	tests := []struct {
		name        string
		taints      []v1.Taint
		tolerations []v1.Toleration
		mirror      bool
		want        time.Duration // after t0; -1: never
	}{
		{name: "no NoExecute taint", taints: []v1.Taint{noSchedule}, want: -1},
		{name: "not tolerated", taints: []v1.Taint{unreachable}, want: LostEvictionMargin},
		{name: "the default 300 s", taints: []v1.Taint{unreachable}, tolerations: []v1.Toleration{tolerate(v1.TaintNodeUnreachable, ptr.To[int64](300))},
			want: 300*time.Second + LostEvictionMargin},
		{name: "the shortest of two tolerations", taints: []v1.Taint{unreachable},
			tolerations: []v1.Toleration{tolerate(v1.TaintNodeUnreachable, ptr.To[int64](300)), tolerate("", ptr.To[int64](2))},
			want:        2*time.Second + LostEvictionMargin},
		{name: "a finite toleration beside a forever one", taints: []v1.Taint{unreachable},
			tolerations: []v1.Toleration{tolerate(v1.TaintNodeUnreachable, nil), tolerate(v1.TaintNodeUnreachable, ptr.To[int64](30))},
			want:        30*time.Second + LostEvictionMargin},
		{name: "tolerated forever (a DaemonSet's)", taints: []v1.Taint{unreachable}, tolerations: []v1.Toleration{tolerate(v1.TaintNodeUnreachable, nil)}, want: -1},
		{name: "a negative toleration counts as none", taints: []v1.Taint{unreachable}, tolerations: []v1.Toleration{tolerate(v1.TaintNodeUnreachable, ptr.To[int64](-5))},
			want: LostEvictionMargin},
		{name: "two taints: the later due", taints: []v1.Taint{unreachable, notReady},
			tolerations: []v1.Toleration{tolerate(v1.TaintNodeUnreachable, ptr.To[int64](20)), tolerate(v1.TaintNodeNotReady, ptr.To[int64](20))},
			want:        25*time.Second + LostEvictionMargin},
		{name: "a mirror pod", taints: []v1.Taint{unreachable}, mirror: true, want: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{Tolerations: tc.tolerations}}
			if tc.mirror {
				pod.Annotations = map[string]string{v1.MirrorPodAnnotationKey: "x"}
			}
			node := &v1.Node{Spec: v1.NodeSpec{Taints: tc.taints}}
			due, ok := EvictionDue(pod, node, func(taint v1.Taint) time.Time { return seen[taint.Key] })
			switch {
			case tc.want < 0 && ok:
				t.Errorf("due at t0+%s, want never", due.Sub(t0))
			case tc.want >= 0 && !ok:
				t.Errorf("never due, want t0+%s", tc.want)
			case tc.want >= 0 && due.Sub(t0) != tc.want:
				t.Errorf("due at t0+%s, want t0+%s", due.Sub(t0), tc.want)
			}
		})
	}
}
