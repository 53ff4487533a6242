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

package v1alpha1

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
)

// Lister reads the FencingRequest of a node, usually from an informer's
// cache. It returns (nil, nil) when the node has none.
//
// +kubebuilder:object:generate=false
type Lister interface {
	Get(nodeName string) (*FencingRequest, error)
}

// NewLister adapts the lister of a dynamic FencingRequest informer
// (dynamicinformer, resource Resource).
func NewLister(l cache.GenericLister) Lister { return genericLister{l} }

// +kubebuilder:object:generate=false
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
