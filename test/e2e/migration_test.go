//go:build e2e

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

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/csi-translation-lib/plugins"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// CSI migration, as external-attacher does it (csi-translation-lib): a
// PersistentVolume of the in-tree gcePersistentDisk plugin, on a node whose
// CSINode says the plugin migrated to pd.csi.storage.gke.io, is attached by
// the real attach/detach controller through a csi-fence-attacher of that
// driver, which publishes the translated volume handle; the pod is then
// force-deleted from its NotReady node, and the detach is fenced and
// recorded under the same translated handle.
func TestMigratedInTreePV(t *testing.T) {
	ctx := context.Background()
	const (
		driver = plugins.GCEPDDriverName
		node   = "mig-node-0"
		pdName = "mig-disk"
		// What csi-translation-lib makes of a zoneless gcePersistentDisk.
		handle = "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/" + pdName
	)
	if err := cluster.ApplyManifest(ctx, "test/e2e/testdata/attacher-only-rbac.yaml", ""); err != nil {
		t.Fatal(err)
	}
	// A ServiceAccount that may fence but not fail over: this driver's
	// sidecar runs no second failover controller beside the product's.
	// With ReleaseLeaderElectionOnExit, stopping it releases its Lease.
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, "default", "csi-fence-attacher-only")
	if err != nil {
		t.Fatal(err)
	}
	d, err := product.AddDriver(ctx, framework.DriverOptions{Name: driver,
		AttacherArgs: []string{"--kubeconfig=" + kubeconfig, "--feature-gates=ReleaseLeaderElectionOnExit=true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer product.RemoveDriver(d)

	if err := cluster.CreateNode(ctx, node, driver); err != nil {
		t.Fatal(err)
	}
	// A kubelet with CSI migration says so on its CSINode; the attach/detach
	// controller then attaches the in-tree volume through the CSI driver.
	patch := []byte(`{"metadata":{"annotations":{"storage.alpha.kubernetes.io/migrated-plugins":"` + plugins.GCEPDInTreePluginName + `"}}}`)
	if _, err := cluster.Client.StorageV1().CSINodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.Array.RegisterNode(node, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Array.AddVolume(handle, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitNodeReady(ctx, node, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "mig-pv"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              d.StorageClass,
			ClaimRef:                      &corev1.ObjectReference{Namespace: "default", Name: "mig-data"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{
				PDName: pdName, FSType: "ext4",
			}},
		},
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "mig-data", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(d.StorageClass),
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mig-app", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Containers:  []corev1.Container{{Name: "app", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes:     []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}},
			Tolerations: []corev1.Toleration{{Key: framework.KwokLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
	if _, err := cluster.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var va *storagev1.VolumeAttachment
	if err := framework.WaitFor(ctx, 60*time.Second, "the migrated volume attached through "+driver, func(ctx context.Context) (bool, error) {
		va, err = migratedVA(ctx, pv.Name, node)
		return va != nil && va.Status.Attached, err
	}); err != nil {
		t.Fatal(err)
	}
	if va.Spec.Attacher != driver {
		t.Fatalf("VolumeAttachment %s is for %q, want the migrated driver %q", va.Name, va.Spec.Attacher, driver)
	}
	s, _ := d.Array.Snapshot()
	if p := s.Volumes[handle].Publications[node]; p == nil || p.Access != "granted" {
		t.Fatalf("the array does not show the translated handle %s published to %s: %+v", handle, node, s.Volumes[handle])
	}

	// The node dies; its pod is force-deleted (as an operator or the pod GC
	// would) and the attach/detach controller detaches at once: the
	// attacher must fence, under the translated handle.
	if err := cluster.Node(node).Partition(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitNodeNotReady(ctx, node, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 90*time.Second, "the migrated volume detached", func(ctx context.Context) (bool, error) {
		va, err := migratedVA(ctx, pv.Name, node)
		return va == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	fr, err := frs.Get(ctx, node)
	if err != nil {
		t.Fatalf("no FencingRequest recorded for %s: %v", node, err)
	}
	if v := fencerecord.Find(fr, driver, handle); v == nil || v.FencedTime == nil || v.PersistentVolumeName != pv.Name {
		t.Fatalf("the fence of %s is not recorded under the translated handle: %+v", handle, fr.Status)
	}
	s, _ = d.Array.Snapshot()
	if p := s.Volumes[handle].Publications[node]; p == nil || p.Access == "granted" {
		t.Fatalf("the array still grants %s to %s after the fenced detach: %+v", handle, node, p)
	}
	expectNoViolations(t)

	// This driver has no node agent here: record the cleanup as its agent
	// would; the node comes back and the failover releases it (the request
	// completes, its finalizer and the storm guard's admission go), so that
	// nothing is left behind for the next tests.
	if err := fencerecord.RecordCleaned(ctx, frs, node, driver, handle); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Node(node).Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 90*time.Second, node+" released", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, node)
		return err == nil && fr.Status.Phase == fencingv1alpha1.PhaseComplete && len(fr.Finalizers) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// migratedVA returns the VolumeAttachment of the PV on node, nil if none.
func migratedVA(ctx context.Context, pvName, node string) (*storagev1.VolumeAttachment, error) {
	list, err := cluster.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		va := &list.Items[i]
		if va.Spec.NodeName == node && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pvName {
			return va, nil
		}
	}
	return nil, nil
}
