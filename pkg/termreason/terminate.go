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

	v1 "k8s.io/api/core/v1"
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
	_, err := TerminatePod(ctx, client, namespace, name, reason, gracePeriod, nil)
	return err
}

// Check is what Terminate decides before it writes: the reason is valid,
// the pod exists and is not terminating yet. It returns the pod as read,
// for a caller that only says what Terminate would do (a client dry run).
func Check(ctx context.Context, client kubernetes.Interface, namespace, name, reason string) (*v1.Pod, error) {
	if err := ValidReason(reason); err != nil {
		return nil, err
	}
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if pod.DeletionTimestamp != nil {
		return nil, fmt.Errorf("pod %s/%s is already terminating", namespace, name)
	}
	return pod, nil
}

// TerminatePod is Terminate with the writes' DryRun (nil, or
// metav1.DryRunAll: the apiserver checks the patch and the delete, its
// admission included, and persists neither). It returns the pod with the
// reason recorded, as the apiserver answered the patch.
func TerminatePod(ctx context.Context, client kubernetes.Interface, namespace, name, reason string, gracePeriod int64, dryRun []string) (*v1.Pod, error) {
	pod, err := Check(ctx, client, namespace, name, reason)
	if err != nil {
		return nil, err
	}
	pods := client.CoreV1().Pods(namespace)
	// The uid in the patch is a precondition: the apiserver refuses to
	// change it, so the patch fails on a pod recreated under the name.
	patch, err := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
		"uid": pod.UID, "annotations": map[string]string{ReasonAnnotation: reason}}})
	if err != nil {
		return nil, err
	}
	recorded, err := pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{DryRun: dryRun})
	if err != nil {
		return nil, fmt.Errorf("recording the reason on pod %s/%s: %w", namespace, name, err)
	}
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}, DryRun: dryRun}
	if gracePeriod >= 0 {
		opts.GracePeriodSeconds = &gracePeriod
	}
	if err := pods.Delete(ctx, name, opts); err != nil {
		return nil, fmt.Errorf("deleting pod %s/%s: %w", namespace, name, err)
	}
	return recorded, nil
}
