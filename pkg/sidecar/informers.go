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

package sidecar

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// NewInformerFactory is the one informer factory of the controller role,
// shared by the attacher and the failover controller, so that each kind is
// watched and cached once. Its caches hold what the two use and no more:
// managed fields, a node's list of container images and most of a pod
// (trimPod) are dropped.
func NewInformerFactory(client kubernetes.Interface, resync time.Duration) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(trimForCache))
}

// trimForCache drops from an object what no controller of this sidecar
// reads; it leaves anything that is not an API object (a tombstone) alone.
func trimForCache(obj interface{}) (interface{}, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *v1.Node:
		o.Status.Images = nil
	case *v1.Pod:
		trimPod(o)
	}
	return obj, nil
}

// trimPod drops what the failover never reads of a pod, the only reader of
// the pod cache (the attacher lists a node's pods live). At 1,000 nodes and
// 30,000 pods the cache is most of the controller role's heap: measured by
// fence-bench --mode=scale (KWOK nodes, the mock driver), 439 MiB RSS with
// whole pods (but their managed fields), 332 MiB without containers, 283 MiB
// trimmed as here.
//
// Kept: the object's metadata, the node, the tolerations, the volumes that
// are not on the node (claims, ephemeral and inline network volumes: what
// podgc.Volumes and its kin read), the phase and the DisruptionTarget
// conditions (podgc.TerminationReason). Dropped: the containers and their
// statuses, the scheduling constraints, the node-local volumes (emptyDir,
// configMap, secret, downwardAPI, projected, hostPath, image: every reader
// skips them, podgc.NodeLocal), the other conditions and the addresses.
func trimPod(p *v1.Pod) {
	p.Spec.Containers, p.Spec.InitContainers, p.Spec.EphemeralContainers = nil, nil, nil
	p.Spec.Affinity, p.Spec.TopologySpreadConstraints, p.Spec.SecurityContext = nil, nil, nil
	p.Spec.NodeSelector, p.Spec.ReadinessGates, p.Spec.ImagePullSecrets = nil, nil, nil
	p.Spec.DNSConfig, p.Spec.HostAliases, p.Spec.Overhead, p.Spec.SchedulingGates = nil, nil, nil, nil
	p.Spec.Volumes = slices.DeleteFunc(p.Spec.Volumes, podgc.NodeLocal)
	if len(p.Spec.Volumes) == 0 {
		p.Spec.Volumes = nil
	}
	p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses = nil, nil, nil
	p.Status.HostIPs, p.Status.PodIPs, p.Status.ResourceClaimStatuses = nil, nil, nil
	p.Status.Conditions = slices.DeleteFunc(p.Status.Conditions, func(c v1.PodCondition) bool { return c.Type != v1.DisruptionTarget })
	if len(p.Status.Conditions) == 0 {
		p.Status.Conditions = nil
	}
}
