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

# Builds what a real e2e node runs (test/e2e/framework, StartRealNodes):
#   kubelet                    from the same pinned k8s.io/kubernetes module
#                              as the control plane (test/e2e/tools/k8s),
#                              version-stamped like it
#   containerd, ctr,           from the pinned containerd v2 module
#   containerd-shim-runc-v2    (test/e2e/tools/containerd)
# into a cache outside the repository keyed by both versions. A warm cache
# builds nothing. runc and the CNI plugins come from Debian
# (hack/install-node-deps.sh).
#
# Prints the directory holding the binaries as its last line of stdout.
# Env: FENCE_NODE_CACHE (default ~/.cache/fence-attacher/node-bin).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=$repo/test/e2e/tools
# shellcheck source=lib/k8s-ldflags.sh
. "$repo/hack/lib/k8s-ldflags.sh"

k8s=$(version_of k8s.io/kubernetes "$tools/k8s/go.mod")
containerd=$(version_of github.com/containerd/containerd/v2 "$tools/containerd/go.mod")
if [ -z "$k8s" ] || [ -z "$containerd" ]; then
	echo "cannot read pinned versions under $tools" >&2
	exit 1
fi

cache=${FENCE_NODE_CACHE:-$HOME/.cache/fence-attacher/node-bin}
out=$cache/k8s-$k8s.containerd-$containerd
mkdir -p "$out"

log() { echo "node-binaries: $*" >&2; }

# Two runs starting on a cold cache at once: one builds, the other waits.
exec 9>"$out/.lock"
if ! flock -n 9; then
	log "another build of $out is running; waiting for it"
	flock 9
fi

build() { # name module-dir tags ldflags packages...
	local name=$1 dir=$2 tags=$3 ldflags=$4; shift 4
	local tmp=$out/.tmp-$name
	rm -rf "$tmp" && mkdir -p "$tmp"
	log "building $name (cold: kubelet ~3-10 min after the control plane, containerd ~2-4 min)"
	local start=$SECONDS
	(cd "$dir" && GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 \
		go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$tmp/" "$@")
	mv "$tmp"/* "$out/" && rmdir "$tmp"
	log "built $name in $((SECONDS - start))s"
}

if [ ! -x "$out/containerd" ] || [ ! -x "$out/ctr" ] || [ ! -x "$out/containerd-shim-runc-v2" ]; then
	# Without cgo the btrfs, devmapper and zfs snapshotters cannot build;
	# the nodes use overlayfs.
	ver="-X github.com/containerd/containerd/v2/version.Version=$containerd"
	ver="$ver -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"
	build containerd "$tools/containerd" "no_btrfs no_devmapper no_zfs" "-s -w $ver" \
		github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
fi
if [ ! -x "$out/kubelet" ]; then
	# The kubelet shares most of its compiled packages with the control
	# plane: build (or wait for) that first, so that the two builds do not
	# compile the same packages side by side.
	"$repo/hack/e2e-binaries.sh" >/dev/null
	build kubelet "$tools/k8s" "" "-s -w $(k8s_version_ldflags "$k8s")" k8s.io/kubernetes/cmd/kubelet
fi
echo "$out"
