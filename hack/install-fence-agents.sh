#!/usr/bin/env bash
# Installs the real parts the power-fencing tests run (test/bmcsim):
#   fence_ipmilan  ClusterLabs fence agent for IPMI (Debian package fence-agents;
#                  Debian ships no smaller package with it: fence-agents is one
#                  package for every agent)
#   ipmitool       the program fence_ipmilan drives; fence-agents does not
#                  depend on it (every agent would pull it), so it is named here
#   ipmi_sim       openipmi's IPMI BMC simulator (Debian package openipmi)
#
# Idempotent: does nothing when all three are present. Non-interactive: runs
# from .ci/run on a fresh Debian machine (as root, or with passwordless sudo).
# Prints nothing on stdout when it has nothing to do, progress on stderr.
set -euo pipefail

log() { echo "install-fence-agents: $*" >&2; }

# The agents live in /usr/sbin, which a non-root PATH often lacks.
have() { PATH=$PATH:/usr/sbin:/sbin command -v "$1" >/dev/null 2>&1; }

if have fence_ipmilan && have ipmitool && have ipmi_sim; then
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	log "apt-get not found: install fence-agents, ipmitool and openipmi (ipmi_sim) by hand"
	exit 1
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		log "not root and no passwordless sudo: cannot install fence-agents, ipmitool, openipmi"
		exit 1
	fi
fi

export DEBIAN_FRONTEND=noninteractive
apt_install() {
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		fence-agents ipmitool openipmi >&2
}

# A fresh machine may have no package lists at all (or stale ones whose
# versions the mirror no longer serves): update once, then install; and if an
# install from lists we did not refresh fails, refresh and try once more.
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

for b in fence_ipmilan ipmitool ipmi_sim; do
	have "$b" || { log "$b still missing after the install"; exit 1; }
done
log "installed fence-agents, ipmitool and openipmi in $((SECONDS - start))s"
