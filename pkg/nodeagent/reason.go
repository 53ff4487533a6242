package nodeagent

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// RecordGetter reads a node's FencingRequest.
type RecordGetter interface {
	Get(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error)
}

// reasonReadTimeout bounds the record read of one request: the helper that
// asks has a few seconds of the pod's grace period for everything.
const reasonReadTimeout = 2 * time.Second

// ReasonHandler serves termreason.ServedPath: the termination reason of a
// pod that this system force-deleted from nodeName while the node was away,
// from the node's FencingRequest (status.forceDeletedPods), read live; the
// pod's preStop helper asks when its own pod can no longer be read. Only the
// pods of this node are served, by UID, which only the pod itself knows; a
// reason says why a pod that no longer exists was stopped, nothing more.
func ReasonHandler(ctx context.Context, records RecordGetter, nodeName string) http.Handler {
	logger := klog.FromContext(ctx).WithValues("node", nodeName)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "only GET", http.StatusMethodNotAllowed)
			return
		}
		uid := r.URL.Query().Get("uid")
		if uid == "" {
			http.Error(w, "the pod's uid is required (?uid=)", http.StatusBadRequest)
			return
		}
		rctx, cancel := context.WithTimeout(r.Context(), reasonReadTimeout)
		defer cancel()
		fr, err := records.Get(rctx, nodeName)
		if err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Cannot read the fencing record for a termination reason", "uid", uid)
			http.Error(w, "cannot read the FencingRequest of node "+nodeName, http.StatusServiceUnavailable)
			return
		}
		p, ok := fencerecord.ForceDeletedPodReason(fr, types.UID(uid))
		if !ok {
			logger.V(4).Info("No termination reason recorded", "uid", uid)
			http.Error(w, "no termination reason recorded for this pod on node "+nodeName, http.StatusNotFound)
			return
		}
		logger.V(2).Info("Served the termination reason of a force-deleted pod", "pod", klog.KRef(p.Namespace, p.Name), "uid", uid, "reason", p.TerminationReason)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(termreason.ServedReason{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Reason: p.TerminationReason})
	})
}
