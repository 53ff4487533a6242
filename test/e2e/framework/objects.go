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
