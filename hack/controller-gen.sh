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

# Builds controller-gen (sigs.k8s.io/controller-tools) at the version, and
# with the go.sum, pinned in hack/tools/codegen, into a cache outside the
# repository keyed by that version, and prints the binary's path as its last
# line of stdout. A warm cache builds nothing and returns at once.
#
# Env: FENCE_TOOLS_CACHE (default ~/.cache/fence-attacher/tools).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=$repo/hack/tools/codegen
# shellcheck source=lib/k8s-ldflags.sh
. "$repo/hack/lib/k8s-ldflags.sh"

version=$(version_of sigs.k8s.io/controller-tools "$tools/go.mod")
[ -n "$version" ] || { echo "cannot read the pinned sigs.k8s.io/controller-tools in $tools/go.mod" >&2; exit 1; }
cache=${FENCE_TOOLS_CACHE:-$HOME/.cache/fence-attacher/tools}
out=$cache/controller-gen-$version
bin=$out/controller-gen

log() { echo "controller-gen: $*" >&2; }

if [ ! -x "$bin" ]; then
	mkdir -p "$out"
	# Two verify runs may start on a cold cache together: one builds, the
	# other waits for it.
	exec 9>"$out/.lock"
	flock 9
	if [ ! -x "$bin" ]; then
		log "building controller-gen $version (under a minute with a warm module cache)"
		start=$SECONDS
		rm -f "$out/.controller-gen.tmp"
		(cd "$tools" && GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
			go build -trimpath -o "$out/.controller-gen.tmp" sigs.k8s.io/controller-tools/cmd/controller-gen)
		mv "$out/.controller-gen.tmp" "$bin"
		log "built in $((SECONDS - start))s"
	fi
fi
echo "$bin"
