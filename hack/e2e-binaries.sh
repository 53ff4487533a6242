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

# Builds the real control-plane binaries the e2e tests and the demo run
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) from
# the modules pinned under test/e2e/tools, into a cache outside the repository
# keyed by their versions. A warm cache builds nothing.
#
# Prints the directory holding the binaries as its last line of stdout.
# Env: FENCE_E2E_CACHE (default ~/.cache/fence-attacher/e2e-bin).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=$repo/test/e2e/tools
# shellcheck source=lib/k8s-ldflags.sh
. "$repo/hack/lib/k8s-ldflags.sh"

k8s=$(version_of k8s.io/kubernetes "$tools/k8s/go.mod")
etcd=$(version_of go.etcd.io/etcd/server/v3 "$tools/etcd/go.mod")
kwok=$(version_of sigs.k8s.io/kwok "$tools/kwok/go.mod")
if [ -z "$k8s" ] || [ -z "$etcd" ] || [ -z "$kwok" ]; then
	echo "cannot read pinned versions under $tools" >&2
	exit 1
fi

cache=${FENCE_E2E_CACHE:-$HOME/.cache/fence-attacher/e2e-bin}
out=$cache/k8s-$k8s.etcd-$etcd.kwok-$kwok
mkdir -p "$out"

log() { echo "e2e-binaries: $*" >&2; }

# Two test runs (or a test run and the demo) may start on a cold cache at the
# same time: one builds, the other waits for it instead of building into the
# same directory.
exec 9>"$out/.lock"
if ! flock -n 9; then
	log "another build of $out is running; waiting for it"
	flock 9
fi

build() { # name module-dir ldflags packages...
	local name=$1 dir=$2 ldflags=$3; shift 3
	local tmp=$out/.tmp-$name
	rm -rf "$tmp" && mkdir -p "$tmp"
	log "building $name (cold builds take minutes: Kubernetes ~7-14 min, etcd and kwok ~2 min each)"
	local start=$SECONDS
	(cd "$dir" && GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 \
		go build -trimpath -ldflags "$ldflags" -o "$tmp/" "$@")
	mv "$tmp"/* "$out/" && rmdir "$tmp"
	log "built $name in $((SECONDS - start))s"
}

if [ ! -x "$out/etcd" ]; then
	# The etcd server module's main package is its root, so go build names the
	# binary after the last path element of the module ("v3" or "server").
	build etcd "$tools/etcd" "-s -w" go.etcd.io/etcd/server/v3
	for n in v3 server; do [ -x "$out/$n" ] && mv "$out/$n" "$out/etcd"; done
fi
if [ ! -x "$out/kwok" ]; then
	build kwok "$tools/kwok" "-s -w" sigs.k8s.io/kwok/cmd/kwok
fi
if [ ! -x "$out/kube-apiserver" ] || [ ! -x "$out/kube-controller-manager" ] || [ ! -x "$out/kube-scheduler" ]; then
	build kubernetes "$tools/k8s" "-s -w $(k8s_version_ldflags "$k8s")" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
fi

# kwok ships its stage definitions in its module, not in its binary.
if [ ! -f "$out/kwok-stages/pod-create.yaml" ]; then
	rm -rf "$out/kwok-stages"
	moddir=$(cd "$tools/kwok" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
	rm -rf "$out/kwok-stages.tmp" && mkdir -p "$out/kwok-stages.tmp"
	# Stages of kwokctl's default set, by their paths in the kwok module.
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/general/pod-create.yaml pod/general/pod-ready.yaml pod/general/pod-complete.yaml pod/general/pod-delete.yaml; do
		cp "$moddir/kustomize/stage/$f" "$out/kwok-stages.tmp/"
	done
	chmod u+w "$out"/kwok-stages.tmp/*
	mv "$out/kwok-stages.tmp" "$out/kwok-stages"
fi
# Pods with init containers (the preStop webhook injects one) need the init
# container stages; a cache made before them gets them added, each file
# whole (cp to a temporary name, then mv), so that a run starting meanwhile
# reads either set.
for f in pod-init-container-running.yaml pod-init-container-completed.yaml; do
	if [ ! -f "$out/kwok-stages/$f" ]; then
		moddir=${moddir:-$(cd "$tools/kwok" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)}
		cp "$moddir/kustomize/stage/pod/general/$f" "$out/kwok-stages/.$f.tmp"
		chmod u+w "$out/kwok-stages/.$f.tmp"
		mv "$out/kwok-stages/.$f.tmp" "$out/kwok-stages/$f"
	fi
done
echo "$out"
