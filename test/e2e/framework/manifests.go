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
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ApplyOptions say how manifests are created.
type ApplyOptions struct {
	// Namespace moves namespaced objects, and the ServiceAccount subjects of
	// bindings, to this namespace when not empty.
	Namespace string
	// DryRun has the apiserver validate and admit every object without
	// storing it (server-side dry run): how the tests prove manifests of
	// workloads that run here as local processes, not as pods.
	DryRun bool
}

// ApplyManifest creates every object of a YAML file of deploy/ (path relative
// to the repository root) on the cluster, with namespaced objects moved to
// namespace when it is not empty. Fields are validated strictly: a manifest
// the apiserver rejects, or one with a field it does not know (a typo that
// would otherwise be dropped silently), fails here, so the tests prove the
// files users apply.
func (c *Cluster) ApplyManifest(ctx context.Context, path, namespace string) error {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), path))
	if err != nil {
		return err
	}
	objs, err := decodeManifests(b)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := c.createObjects(ctx, objs, ApplyOptions{Namespace: namespace}); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ApplyKustomization renders a kustomization of deploy/ (dir relative to
// the repository root) as `kubectl apply -k` would and creates the result,
// validated strictly (see ApplyManifest).
func (c *Cluster) ApplyKustomization(ctx context.Context, dir string, opts ApplyOptions) ([]*unstructured.Unstructured, error) {
	objs, err := RenderKustomization(dir)
	if err != nil {
		return nil, err
	}
	if err := c.createObjects(ctx, objs, opts); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return objs, nil
}

// RenderKustomization runs kustomize (the library kubectl embeds) on dir,
// relative to the repository root.
func RenderKustomization(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(RepoRoot(), dir))
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	b, err := res.AsYaml()
	if err != nil {
		return nil, err
	}
	return decodeManifests(b)
}

func decodeManifests(b []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj.Object) == 0 {
			continue
		}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" {
			return nil, fmt.Errorf("object %d has no kind or apiVersion", len(out)+1)
		}
		out = append(out, obj)
	}
}

func (c *Cluster) createObjects(ctx context.Context, objs []*unstructured.Unstructured, opts ApplyOptions) error {
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	create := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	if opts.DryRun {
		create.DryRun = []string{metav1.DryRunAll}
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %w", gvk, err)
		}
		res := c.Dynamic.Resource(mapping.Resource)
		if opts.Namespace != "" {
			fixSubjects(obj, opts.Namespace)
		}
		var created error
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := obj.GetNamespace()
			if opts.Namespace != "" {
				ns = opts.Namespace
				obj.SetNamespace(ns)
			}
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			_, created = res.Namespace(ns).Create(ctx, obj, create)
		} else {
			_, created = res.Create(ctx, obj, create)
		}
		// The apiserver validates before it looks for an existing object, so
		// AlreadyExists means this one passed validation too.
		if created != nil && !apierrors.IsAlreadyExists(created) {
			return fmt.Errorf("creating %s %s: %w", gvk.Kind, obj.GetName(), created)
		}
	}
	return nil
}

// fixSubjects points ServiceAccount subjects of bindings at namespace.
func fixSubjects(obj *unstructured.Unstructured, namespace string) {
	subjects, ok, _ := unstructured.NestedSlice(obj.Object, "subjects")
	if !ok {
		return
	}
	for i := range subjects {
		if s, ok := subjects[i].(map[string]interface{}); ok && s["kind"] == "ServiceAccount" {
			s["namespace"] = namespace
		}
	}
	_ = unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
}
