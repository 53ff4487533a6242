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

// Package nodestate reads what a Node object says of itself: its
// conditions and its taints. It reads only the object it is given; whether
// the node is alive is pkg/nodehealth's question, which reads it live.
package nodestate

import (
	v1 "k8s.io/api/core/v1"
	nodeutil "k8s.io/component-helpers/node/util"
)

// Ready reports the node's Ready condition.
func Ready(n *v1.Node) bool {
	return ConditionTrue(n, string(v1.NodeReady))
}

// ConditionTrue reports whether the node's condition t is True.
func ConditionTrue(n *v1.Node, t string) bool {
	_, c := nodeutil.GetNodeCondition(&n.Status, v1.NodeConditionType(t))
	return c != nil && c.Status == v1.ConditionTrue
}

// Taint returns the node's taint with key, or nil.
func Taint(n *v1.Node, key string) *v1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == key {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}
