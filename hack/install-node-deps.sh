#!/usr/bin/env bash
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

have() { PATH=$PATH:/usr/sbin:/sbin command -v "$1" >/dev/null 2>&1; }

if have runc && have iptables && have ip && [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ]; then
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	log "apt-get not found: install runc, containernetworking-plugins (/usr/lib/cni), iptables and iproute2 by hand"
	exit 1
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		log "not root and no passwordless sudo: cannot install runc, containernetworking-plugins, iptables, iproute2"
		exit 1
	fi
fi

apt_install() {
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		runc containernetworking-plugins iptables iproute2 >&2
}

# A fresh machine may have no package lists (or stale ones): update once,
# then install; an install from lists we did not refresh gets one more try
# after an update.
start=$SECONDS
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' -e '^auxfiles$')" ]; then
	log "apt-get update"
	"${sudo[@]}" apt-get update -q >&2
	apt_install
elif ! apt_install; then
	log "install failed; apt-get update and one more try"
	"${sudo[@]}" apt-get update -q >&2
	apt_install
fi

for b in runc iptables ip; do
	have "$b" || { log "$b still missing after the install"; exit 1; }
done
for p in bridge host-local loopback; do
	[ -x /usr/lib/cni/$p ] || { log "/usr/lib/cni/$p still missing after the install"; exit 1; }
done
log "installed runc, containernetworking-plugins, iptables and iproute2 in $((SECONDS - start))s"
