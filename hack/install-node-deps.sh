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

# Installs the host parts a real e2e node runs beside the kubelet and
# containerd that hack/node-binaries.sh builds:
#   runc                         the OCI runtime containerd's runc shim calls
#   containernetworking-plugins  the CNI plugins (bridge, host-local,
#                                loopback) in /usr/lib/cni
#   iptables, iproute2           what the CNI bridge plugin and the node
#                                network setup (netns, veth, bridge) use
#
# Idempotent: does nothing when everything is present. Non-interactive: runs
# from CI on a fresh Debian machine (as root, or with passwordless sudo).
# Prints nothing on stdout, progress on stderr.
set -euo pipefail

log() { echo "install-node-deps: $*" >&2; }

. "$(dirname "${BASH_SOURCE[0]}")/lib/apt-install.sh"

if have runc && have iptables && have ip && [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ]; then
	exit 0
fi

start=$SECONDS
apt_install_packages runc containernetworking-plugins iptables iproute2

for b in runc iptables ip; do
	have "$b" || { log "$b still missing after the install"; exit 1; }
done
for p in bridge host-local loopback; do
	[ -x /usr/lib/cni/$p ] || { log "/usr/lib/cni/$p still missing after the install"; exit 1; }
done
log "installed runc, containernetworking-plugins, iptables and iproute2 in $((SECONDS - start))s"
