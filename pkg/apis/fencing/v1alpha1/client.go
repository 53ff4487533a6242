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
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// Client is a typed client for FencingRequests over the dynamic client, so
// that unit tests can use client-go's dynamic fake and no code generation is
// needed.
//
// +kubebuilder:object:generate=false
type Client struct {
	res dynamic.NamespaceableResourceInterface
}

// NewClient returns a FencingRequest client.
func NewClient(dyn dynamic.Interface) *Client {
	return &Client{res: dyn.Resource(Resource)}
}

// Get returns the named FencingRequest.
func (c *Client) Get(ctx context.Context, name string) (*FencingRequest, error) {
	u, err := c.res.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(u)
}

// List returns all FencingRequests.
func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*FencingRequestList, error) {
	ul, err := c.res.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	list := &FencingRequestList{ListMeta: metav1.ListMeta{ResourceVersion: ul.GetResourceVersion()}}
	for i := range ul.Items {
		fr, err := FromUnstructured(&ul.Items[i])
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *fr)
	}
	return list, nil
}

// Watch watches FencingRequests; events carry *unstructured.Unstructured.
func (c *Client) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return c.res.Watch(ctx, opts)
}

// Create creates fr.
func (c *Client) Create(ctx context.Context, fr *FencingRequest) (*FencingRequest, error) {
	u, err := ToUnstructured(fr)
	if err != nil {
		return nil, err
	}
	out, err := c.res.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// Update updates fr's metadata and spec.
func (c *Client) Update(ctx context.Context, fr *FencingRequest) (*FencingRequest, error) {
	u, err := ToUnstructured(fr)
	if err != nil {
		return nil, err
	}
	out, err := c.res.Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// UpdateStatus updates fr's status subresource. It fails with a Conflict when
// fr is stale, so concurrent writers (one failover controller per driver, the
// node agents) never lose each other's entries.
func (c *Client) UpdateStatus(ctx context.Context, fr *FencingRequest) (*FencingRequest, error) {
	u, err := ToUnstructured(fr)
	if err != nil {
		return nil, err
	}
	out, err := c.res.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// Delete deletes the named FencingRequest.
func (c *Client) Delete(ctx context.Context, name string) error {
	return c.res.Delete(ctx, name, metav1.DeleteOptions{})
}

// FromUnstructured converts an object from the dynamic client or a dynamic
// informer (including a cache.DeletedFinalStateUnknown's Obj) into a
// FencingRequest.
func FromUnstructured(obj interface{}) (*FencingRequest, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("expected *unstructured.Unstructured, got %T", obj)
	}
	fr := &FencingRequest{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), fr); err != nil {
		return nil, fmt.Errorf("malformed FencingRequest %q: %w", u.GetName(), err)
	}
	return fr, nil
}

// ToUnstructured converts fr for the dynamic client, filling in its kind.
func ToUnstructured(fr *FencingRequest) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(fr)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(SchemeGroupVersion.String())
	u.SetKind("FencingRequest")
	return u, nil
}
