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

package framework

import (
	"bytes"
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// WriterStatefulSet is a StatefulSet of one writer whose volume comes from a claim
// template of class; its pod leaves a dead node 2 s after the taint. Its
// container (WriterImage) appends a numbered record naming its node to
// /data/writes.log every 200 ms and logs each write.
func WriterStatefulSet(name, class string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	toleration := func(key string) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](2)}
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Tolerations:                   []corev1.Toleration{toleration(corev1.TaintNodeNotReady), toleration(corev1.TaintNodeUnreachable)},
					Containers: []corev1.Container{{
						Name: "writer", Image: WriterImage, ImagePullPolicy: corev1.PullNever,
						Args: []string{"-path=/data/writes.log", "-interval=200ms"},
						// Each record names the node that wrote it.
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To(class),
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("4Mi")}},
				},
			}},
		},
	}
}

// BlockDevicePath is where a block writer's container has its volume.
const BlockDevicePath = "/dev/data"

// AsBlockWriter makes a WriterStatefulSet's pods write to a block volume:
// the claim asks for volumeMode Block, the container gets the volume as
// the device BlockDevicePath and writes its records in the device's slots
// (the writer's -block).
func AsBlockWriter(sts *appsv1.StatefulSet) *appsv1.StatefulSet {
	c := &sts.Spec.Template.Spec.Containers[0]
	c.Args = []string{"-path=" + BlockDevicePath, "-block", "-interval=200ms"}
	c.VolumeDevices = []corev1.VolumeDevice{{Name: "data", DevicePath: BlockDevicePath}}
	c.VolumeMounts = nil
	sts.Spec.VolumeClaimTemplates[0].Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	return sts
}

// SetUnschedulable cordons node (on) or uncordons it, so that a writer
// starts on the node a test or the demo chose.
func (c *Cluster) SetUnschedulable(ctx context.Context, node string, on bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	_, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// WaitWriterRunning waits for pod ns/name Running with a UID other than not
// (a replacement's), failing early when it ends.
func (c *Cluster) WaitWriterRunning(ctx context.Context, ns, name string, not types.UID, timeout time.Duration) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := WaitFor(ctx, timeout, "pod "+name+" Running", func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.UID == not {
			return false, fmt.Errorf("still the old pod, on %s, deletion %v", p.Spec.NodeName, p.DeletionTimestamp)
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod ended: %s %s", p.Status.Phase, p.Status.Message)
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s on %q, %v", p.Status.Phase, p.Spec.NodeName, p.Status.Conditions)
	})
	return pod, err
}

// WaitWrites waits for n successful writes in the writer pod's log (it
// numbers its records after those the volume holds, so a replacement's
// first write is not "write 1"), failing on a failed one.
func (c *Cluster) WaitWrites(ctx context.Context, ns, pod string, n int, timeout time.Duration) error {
	var log []byte
	err := WaitFor(ctx, timeout, fmt.Sprintf("%d successful writes in %s's log", n, pod), func(ctx context.Context) (bool, error) {
		var err error
		log, err = c.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		return bytes.Count(log, []byte(" ok\n")) >= n, nil
	})
	if err != nil {
		return fmt.Errorf("%w; log so far:\n%s", err, log)
	}
	if bytes.Contains(log, []byte("failed")) {
		return fmt.Errorf("%s logged failed writes:\n%s", pod, log)
	}
	return nil
}
