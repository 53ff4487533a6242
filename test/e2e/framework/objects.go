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
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// DecodeManifests reads the objects of a multi-document YAML stream.
func DecodeManifests(b []byte) ([]*unstructured.Unstructured, error) {
	return decodeManifests(b)
}

// CreateObjects creates objs on the cluster as ApplyManifest does
// (strict field validation; an object that exists already passed
// validation too), or only validates and admits them with opts.DryRun.
// For objects rendered elsewhere, e.g. by Helm.
func (c *Cluster) CreateObjects(ctx context.Context, objs []*unstructured.Unstructured, opts ApplyOptions) error {
	return c.createObjects(ctx, objs, opts)
}
