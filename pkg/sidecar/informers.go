package sidecar

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
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
// the pod cache (the attacher lists a node's pods live): its containers and
// their statuses, its scheduling constraints and its security context,
// about half of a pod in memory and most of the controller role's heap in
// a large cluster (1,000 nodes, 30,000 pods: 439 MiB RSS with whole pods).
// Of the volumes that live on the node (emptyDir, configMap, secret,
// downwardAPI, projected, hostPath, image) only the kind is read
// (podgc.NodeLocal): their contents go. What is kept: the object's
// metadata, the node, the volumes' claims and inline sources, the
// tolerations, and the status but for the containers'.
func trimPod(p *v1.Pod) {
	p.Spec.Containers, p.Spec.InitContainers, p.Spec.EphemeralContainers = nil, nil, nil
	p.Spec.Affinity, p.Spec.TopologySpreadConstraints, p.Spec.SecurityContext = nil, nil, nil
	p.Spec.NodeSelector, p.Spec.ReadinessGates, p.Spec.ImagePullSecrets = nil, nil, nil
	p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses = nil, nil, nil
	for i := range p.Spec.Volumes {
		s := &p.Spec.Volumes[i].VolumeSource
		switch {
		case s.EmptyDir != nil:
			s.EmptyDir = &v1.EmptyDirVolumeSource{}
		case s.ConfigMap != nil:
			s.ConfigMap = &v1.ConfigMapVolumeSource{}
		case s.Secret != nil:
			s.Secret = &v1.SecretVolumeSource{}
		case s.DownwardAPI != nil:
			s.DownwardAPI = &v1.DownwardAPIVolumeSource{}
		case s.Projected != nil:
			s.Projected = &v1.ProjectedVolumeSource{}
		case s.HostPath != nil:
			s.HostPath = &v1.HostPathVolumeSource{}
		case s.Image != nil:
			s.Image = &v1.ImageVolumeSource{}
		}
	}
}
