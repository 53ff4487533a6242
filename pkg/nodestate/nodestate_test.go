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

package nodestate

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestNodeState(t *testing.T) {
	node := func(conds []v1.NodeCondition, taints ...v1.Taint) *v1.Node {
		return &v1.Node{Spec: v1.NodeSpec{Taints: taints}, Status: v1.NodeStatus{Conditions: conds}}
	}
	tests := []struct {
		name      string
		node      *v1.Node
		ready     bool
		triaged   bool
		taintWant string
	}{
		{name: "no conditions", node: node(nil)},
		{name: "Ready", node: node([]v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}), ready: true},
		{name: "Ready Unknown", node: node([]v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}})},
		{name: "another condition True", node: node([]v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}, {Type: "FencingTriaged", Status: v1.ConditionTrue}}), triaged: true},
		{name: "taints", node: node(nil, v1.Taint{Key: "a"}, v1.Taint{Key: "b", Value: "x"}), taintWant: "b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ready(tc.node); got != tc.ready {
				t.Errorf("Ready = %v, want %v", got, tc.ready)
			}
			if got := ConditionTrue(tc.node, "FencingTriaged"); got != tc.triaged {
				t.Errorf("ConditionTrue(FencingTriaged) = %v, want %v", got, tc.triaged)
			}
			got := Taint(tc.node, "b")
			if (got != nil) != (tc.taintWant != "") || (got != nil && got.Value != "x") {
				t.Errorf("Taint(b) = %v, want key %q", got, tc.taintWant)
			}
			if got != nil {
				got.Value = "changed"
				if tc.node.Spec.Taints[1].Value != "changed" {
					t.Error("Taint returns a copy, want the node's own taint")
				}
			}
		})
	}
}
