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
)

// ApplyManifest creates every object of a YAML file of deploy/ (path relative
// to the repository root) on the cluster, with namespaced objects moved to
// namespace when it is not empty. A manifest the apiserver rejects fails here,
// so the tests prove the files users apply.
func (c *Cluster) ApplyManifest(ctx context.Context, path, namespace string) error {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), path))
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", path, gvk, err)
		}
		res := c.Dynamic.Resource(mapping.Resource)
		var created error
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := obj.GetNamespace()
			if namespace != "" {
				ns = namespace
				obj.SetNamespace(ns)
				fixSubjects(obj, namespace)
			}
			_, created = res.Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		} else {
			if namespace != "" {
				fixSubjects(obj, namespace)
			}
			_, created = res.Create(ctx, obj, metav1.CreateOptions{})
		}
		if created != nil && !apierrors.IsAlreadyExists(created) {
			return fmt.Errorf("%s: creating %s %s: %w", path, gvk.Kind, obj.GetName(), created)
		}
	}
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
