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

package manifestcheck

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Release is one set of manifests installed as a unit: a Helm release's
// render, one -f of check-manifests.
type Release struct {
	Name    string
	Objects []*unstructured.Unstructured
}

// clusterScoped are the kinds a driver's or csi-fence's release renders
// that have no namespace.
var clusterScoped = map[string]bool{
	"CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true,
	"CSIDriver": true, "StorageClass": true, "VolumeSnapshotClass": true, "Namespace": true, "PriorityClass": true,
}

// CheckReleases says what goes wrong when the releases are installed side
// by side: an object rendered by two of them (Helm refuses the second
// install, or the two fight over it and the first uninstall deletes it
// under the other), and the FencingRequest CRD in a release with the
// driver's workloads, where uninstalling the driver deletes the CRD and
// with it every FencingRequest, the record of what is fenced where.
func CheckReleases(releases []Release, defaultNamespace string) []string {
	if len(releases) < 2 {
		return nil
	}
	owners := map[string][]string{}
	for _, r := range releases {
		for _, o := range r.Objects {
			ns := o.GetNamespace()
			if ns == "" && !clusterScoped[o.GetKind()] {
				ns = defaultNamespace
			}
			key := fmt.Sprintf("%s %s", o.GetKind(), strings.TrimPrefix(ns+"/"+o.GetName(), "/"))
			owners[key] = append(owners[key], r.Name)
		}
	}
	var errs []string
	var keys []string
	for k, names := range owners {
		if len(names) > 1 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		errs = append(errs, fmt.Sprintf("%s is in %s: one object cannot belong to two releases (Helm refuses the second, or uninstalling one deletes it under the other). "+
			"Fix: let the csi-fence chart's release own csi-fence's objects, and post-render the driver's release with deploy/kubernetes/attacher-image and the node agent's patches only, not deploy/kubernetes/sidecar (docs/drivers.md)",
			k, strings.Join(owners[k], " and ")))
	}
	for _, r := range releases {
		ws, _ := Workloads(r.Objects)
		if len(ws) == 0 {
			continue
		}
		for _, o := range r.Objects {
			if o.GetKind() == "CustomResourceDefinition" && strings.HasSuffix(o.GetName(), ".fencing.csi-fence.io") {
				errs = append(errs, fmt.Sprintf("CustomResourceDefinition %s is in %s with the driver's workloads: uninstalling the driver would delete it, and every FencingRequest (the record of what is fenced where) with it. "+
					"Fix: install the CRDs with the csi-fence chart (its crds/, which Helm never deletes) or kubectl apply --server-side -f deploy/helm/csi-fence/crds, not in the driver's release",
					o.GetName(), r.Name))
			}
		}
	}
	return errs
}
