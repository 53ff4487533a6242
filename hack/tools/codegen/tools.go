//go:build tools

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

// Package tools records controller-gen, which hack/update-codegen.sh runs to
// generate the CRDs and DeepCopy of pkg/apis from their Go types.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
