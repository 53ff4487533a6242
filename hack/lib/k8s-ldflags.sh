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

# shellcheck shell=bash
# Sourced by hack/e2e-binaries.sh and hack/node-binaries.sh: what both need to
# build Kubernetes commands from the pinned modules alike.

# version_of MODULE GO.MOD prints the version GO.MOD requires of MODULE.
version_of() {
	awk -v m="$1" '$1 == m || ($1 == "require" && $2 == m) { print ($1 == "require") ? $3 : $2; exit }' "$2"
}

# k8s_version_ldflags VERSION prints the -X flags that stamp VERSION into a
# Kubernetes command, as its own build does (a kubelet reports it in its Node,
# the apiserver in /version).
k8s_version_ldflags() {
	local k8s=$1 minor
	minor=${k8s#v1.}; minor=${minor%%.*}
	echo "-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1" \
		"-X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
		"-X k8s.io/client-go/pkg/version.gitVersion=$k8s"
}
