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
