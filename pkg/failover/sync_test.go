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

package failover

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

func TestDecide(t *testing.T) {
	node := &v1.Node{}
	cand := triage{candidates: []candidate{{pod: &v1.Pod{}}}}
	now := metav1.Now()
	unsettledRecord := &fencingv1alpha1.FencingRequest{Status: fencingv1alpha1.FencingRequestStatus{
		Volumes: []fencingv1alpha1.FencedVolume{{Driver: "d", VolumeHandle: "v", StartedTime: &now}}}}
	settledRecord := &fencingv1alpha1.FencingRequest{Status: fencingv1alpha1.FencingRequestStatus{
		Volumes: []fencingv1alpha1.FencedVolume{{Driver: "d", VolumeHandle: "v", StartedTime: &now, FencedTime: &now}}}}
	tests := []struct {
		name string
		o    observation
		want phase
	}{
		{"Node gone, whatever else", observation{gate: true, manual: true, triage: cand}, phaseGone},
		{"Node gone, gate off", observation{}, phaseGone},
		{"Ready: back", observation{node: node, ready: true, gate: true, triage: cand}, phaseBack},
		{"Ready, gate off: back all the same", observation{node: node, ready: true}, phaseBack},
		{"Ready, maintenance: back", observation{node: node, ready: true, gate: true, maintenance: "cordoned"}, phaseBack},
		{"not Ready, gate off", observation{node: node, triage: cand}, phaseOff},
		{"requested, gate off", observation{node: node, ready: true, manual: true}, phaseOff},
		{"requested, Ready", observation{node: node, ready: true, manual: true, gate: true}, phaseRequested},
		{"requested under maintenance", observation{node: node, manual: true, gate: true, maintenance: "cordoned"}, phaseRequested},
		{"requested, control plane", observation{node: node, manual: true, gate: true, controlPlane: true}, phaseRequested},
		{"control plane", observation{node: node, gate: true, controlPlane: true, triage: cand}, phaseHeld},
		{"maintenance", observation{node: node, gate: true, maintenance: "cordoned", triage: cand}, phaseHeld},
		{"maintenance, fence unsettled", observation{node: node, gate: true, maintenance: "cordoned", fr: unsettledRecord}, phaseHeld},
		{"nothing to fail over", observation{node: node, gate: true}, phaseIdle},
		{"nothing to fail over, fences settled", observation{node: node, gate: true, fr: settledRecord}, phaseIdle},
		{"a fence unsettled", observation{node: node, gate: true, fr: unsettledRecord}, phaseFailing},
		{"a candidate", observation{node: node, gate: true, triage: cand}, phaseFailing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.o); got != tc.want {
				t.Errorf("decide = %s, want %s", got, tc.want)
			}
		})
	}
}
