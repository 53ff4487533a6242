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

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Terminate does what the seed's `kubectl delete pod NAME --reason=...`
// would: it records reason on the pod (ReasonAnnotation), then deletes it,
// both for the pod it read, never for a namesake created meanwhile. A pod
// already terminating is refused: its hooks may have run, and a reason
// written now would tell them nothing and the record a story it did not
// decide. gracePeriod < 0 keeps the pod's own.
func Terminate(ctx context.Context, client kubernetes.Interface, namespace, name, reason string, gracePeriod int64) error {
	if err := ValidReason(reason); err != nil {
		return err
	}
	pods := client.CoreV1().Pods(namespace)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pod.DeletionTimestamp != nil {
		return fmt.Errorf("pod %s/%s is already terminating", namespace, name)
	}
	// The uid in the patch is a precondition: the apiserver refuses to
	// change it, so the patch fails on a pod recreated under the name.
	patch, err := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"uid": pod.UID, "annotations": map[string]string{ReasonAnnotation: reason}}})
	if err != nil {
		return err
	}
	if _, err := pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("recording the reason on pod %s/%s: %w", namespace, name, err)
	}
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}
	if gracePeriod >= 0 {
		opts.GracePeriodSeconds = &gracePeriod
	}
	if err := pods.Delete(ctx, name, opts); err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", namespace, name, err)
	}
	return nil
}
