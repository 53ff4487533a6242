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

package prestop

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// maxReviewBytes bounds a request body: an AdmissionReview of a pod is far
// smaller (the apiserver's own limit on objects is 3 MiB).
const maxReviewBytes = 4 << 20

// Handler serves the mutating admission webhook: AdmissionReview v1 of pod
// CREATE requests in, the patch of Mutate out, or a denial that says which
// rule the pod's delivery settings break. It never denies for its own
// trouble (a request it cannot decode is answered with an HTTP error, which
// the apiserver treats as the webhook failing: failurePolicy Ignore lets
// the pod through unmodified).
func Handler(opts MutateOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		req := review.Request
		rsp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
		var pod v1.Pod
		if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
			http.Error(w, fmt.Sprintf("not a pod: %v", err), http.StatusBadRequest)
			return
		}
		podRef := klog.KRef(req.Namespace, pod.Name+pod.GenerateName)
		patch, err := Mutate(&pod, opts)
		switch {
		case err != nil:
			// The pod asked for the reason and got its settings wrong: a
			// denial says so now, where a pod admitted unchanged would
			// learn it only when a termination comes without its reason.
			rsp.Allowed = false
			rsp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
				Message: "csi-fence-prestop: " + err.Error()}
			logger.Info("Denied pod: invalid termination reason delivery", "pod", podRef, "err", err)
		case patch != nil:
			b, err := json.Marshal(patch)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			pt := admissionv1.PatchTypeJSONPatch
			rsp.Patch, rsp.PatchType = b, &pt
			logger.V(2).Info("Rewrote the preStop hooks", "pod", podRef)
		}
		review.Response, review.Request = rsp, nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	})
}
