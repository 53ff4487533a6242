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

# Installs golangci-lint, pinned, into a cache outside the repository keyed by
# its version (built from source with the Go module proxy, as kubernetes-csi's
# release-tools do: no binary download, no network beyond the proxy), and
# prints the binary's path as its last line of stdout. A warm cache builds
# nothing and returns at once.
#
# Env: FENCE_TOOLS_CACHE (default ~/.cache/fence-attacher/tools).
set -euo pipefail

version=v2.15.0
cache=${FENCE_TOOLS_CACHE:-$HOME/.cache/fence-attacher/tools}
out=$cache/golangci-lint-$version
bin=$out/golangci-lint

log() { echo "golangci-lint: $*" >&2; }

if [ ! -x "$bin" ]; then
	mkdir -p "$out"
	# make test's lanes may start on a cold cache together: one builds, the
	# others wait for it.
	exec 9>"$out/.lock"
	flock 9
	if [ ! -x "$bin" ]; then
		log "building golangci-lint $version (about a minute on 2 cores with an empty module cache)"
		start=$SECONDS
		rm -rf "$out/.tmp" && mkdir -p "$out/.tmp"
		# Outside the repository, so that its go.mod and GOFLAGS do not apply.
		(cd "$out/.tmp" && GOFLAGS='' GOBIN="$out/.tmp" CGO_ENABLED=0 \
			go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version")
		mv "$out/.tmp/golangci-lint" "$bin" && rmdir "$out/.tmp"
		log "built in $((SECONDS - start))s"
	fi
fi
echo "$bin"
