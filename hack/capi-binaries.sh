#!/usr/bin/env bash

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

# Builds Cluster API's core manager (sigs.k8s.io/cluster-api/core: the
# Cluster, Machine, MachineSet, MachineDeployment and MachineHealthCheck
# controllers) from the module pinned in hack/tools/capi, and copies its CRDs
# beside it, into a cache outside the repository keyed by the version, like
# hack/e2e-binaries.sh does for the control plane. A warm cache builds
# nothing. The Machine fencing backend's e2e tests run it
# (test/e2e/machinefence_test.go).
#
# Prints the directory holding capi-manager and crds/ as its last line.
# Env: FENCE_E2E_CACHE (default ~/.cache/fence-attacher/e2e-bin).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=$repo/hack/tools/capi
# shellcheck source=lib/k8s-ldflags.sh
. "$repo/hack/lib/k8s-ldflags.sh"

capi=$(version_of sigs.k8s.io/cluster-api "$tools/go.mod")
[ -n "$capi" ] || { echo "cannot read the pinned sigs.k8s.io/cluster-api in $tools/go.mod" >&2; exit 1; }

cache=${FENCE_E2E_CACHE:-$HOME/.cache/fence-attacher/e2e-bin}
out=$cache/capi-$capi
mkdir -p "$out"
log() { echo "capi-binaries: $*" >&2; }

exec 9>"$out/.lock"
if ! flock -n 9; then
	log "another build of $out is running; waiting for it"
	flock 9
fi

if [ ! -x "$out/capi-manager" ]; then
	log "building Cluster API $capi core manager (a cold build takes minutes)"
	start=$SECONDS
	rm -f "$out/.capi-manager.tmp"
	(cd "$tools" && GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 \
		go build -trimpath -ldflags "-s -w" -o "$out/.capi-manager.tmp" sigs.k8s.io/cluster-api/core)
	mv "$out/.capi-manager.tmp" "$out/capi-manager"
	log "built capi-manager in $((SECONDS - start))s"
fi
# Every CRD of the core manager, the addons' included: a controller whose
# kind is not served never syncs its cache, and the manager exits five
# minutes after its start (ClusterResourceSetBinding, seen in a trial run).
if [ ! -f "$out/crds/addons.cluster.x-k8s.io_clusterresourcesetbindings.yaml" ]; then
	moddir=$(cd "$tools" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
	rm -rf "$out/crds.tmp" && mkdir -p "$out/crds.tmp"
	cp "$moddir"/core/config/crd/bases/*.yaml "$out/crds.tmp/"
	chmod u+w "$out"/crds.tmp/*
	rm -rf "$out/crds" && mv "$out/crds.tmp" "$out/crds"
fi
echo "$out"
