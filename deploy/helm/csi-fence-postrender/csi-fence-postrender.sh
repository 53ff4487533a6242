#!/bin/sh

# Copyright 2026 The fence-attacher Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# Helm post-renderer (Helm 3: --post-renderer; Helm 4: the plugin in this
# directory): reads the release's manifests on stdin and writes them out
# with the kustomize Component named by the one argument applied (a
# directory: your attacher image swap and node agent patches). Uses
# kustomize when installed, else kubectl kustomize.
set -eu
if [ "$#" -ne 1 ] || [ ! -f "$1/kustomization.yaml" ]; then
	echo "usage: csi-fence-postrender.sh COMPONENT_DIR < manifests (COMPONENT_DIR holds a kustomization.yaml of kind Component)" >&2
	exit 2
fi
component=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/release.yaml"
# Kustomize takes no absolute path: name the component from the work
# directory, up to / and down again.
up=$(printf '%s\n' "$work" | sed -e 's|[^/][^/]*|..|g' -e 's|^/||')
cat >"$work/kustomization.yaml" <<KUSTOMIZATION
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [release.yaml]
components: ["$up$component"]
KUSTOMIZATION
if command -v kustomize >/dev/null 2>&1; then
	kustomize build "$work"
else
	kubectl kustomize "$work"
fi
