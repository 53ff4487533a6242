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

package termreason

// A pod force-deleted while its node was away has its preStop hooks run
// when the node is back, by a kubelet that still has it cached; but the pod
// is gone from the API, and the ServiceAccount token bound to it is
// rejected with it. Its reason is recorded in the node's FencingRequest
// before the delete, and the node's agent (csi-fence-attacher --role=node,
// which keeps its own credentials) serves it on its HTTP endpoint to the
// helper on the same node, by the pod's UID.

// ServedPath is the path of the node agent's HTTP endpoint that serves the
// reason of a pod force-deleted from its node: GET ServedPath?uid=UID.
// It answers 200 with a ServedReason, 404 when it has no reason for the
// UID, 503 when it cannot read the record, and 429 when it serves too many
// requests at once.
const ServedPath = "/termination-reason"

// ServedReason is the node agent's answer.
type ServedReason struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Reason    string `json:"reason"`
}
