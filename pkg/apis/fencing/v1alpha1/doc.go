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

// Package v1alpha1 is the FencingRequest API (group fencing.csi-fence.io): the
// Node Fencing KEP's request object, which is both the manual trigger an admin
// creates and the durable record of what was fenced on a node and whether it
// was cleaned up, so that a restart of any component loses nothing; and the
// FenceAgentConfig, which says how to power-fence nodes.
//
// The CRDs and zz_generated.deepcopy.go are generated from the types and
// their markers by hack/update-codegen.sh (controller-gen); make verify
// fails when they are stale.
//
// +kubebuilder:object:generate=true
// +groupName=fencing.csi-fence.io
package v1alpha1
