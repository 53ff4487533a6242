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
// managed fields and a node's list of container images are dropped.
func NewInformerFactory(client kubernetes.Interface, resync time.Duration) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(trimForCache))
}

// trimForCache drops from an object what no controller of this sidecar
// reads; it leaves anything that is not an API object (a tombstone) alone.
func trimForCache(obj interface{}) (interface{}, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	if n, ok := obj.(*v1.Node); ok {
		n.Status.Images = nil
	}
	return obj, nil
}
