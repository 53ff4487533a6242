package v1alpha1

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
)

// Lister reads the FencingRequest of a node, usually from an informer's
// cache. It returns (nil, nil) when the node has none.
type Lister interface {
	Get(nodeName string) (*FencingRequest, error)
}

// NewLister adapts the lister of a dynamic FencingRequest informer
// (dynamicinformer, resource Resource).
func NewLister(l cache.GenericLister) Lister { return genericLister{l} }

type genericLister struct{ l cache.GenericLister }

func (g genericLister) Get(nodeName string) (*FencingRequest, error) {
	obj, err := g.l.Get(nodeName)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return FromUnstructured(obj)
}
