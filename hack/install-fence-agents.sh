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

. "$(dirname "${BASH_SOURCE[0]}")/lib/apt-install.sh"

if have fence_ipmilan && have ipmitool && have ipmi_sim; then
	exit 0
fi

start=$SECONDS
apt_install_packages fence-agents ipmitool openipmi

for b in fence_ipmilan ipmitool ipmi_sim; do
	have "$b" || { log "$b still missing after the install"; exit 1; }
done
log "installed fence-agents, ipmitool and openipmi in $((SECONDS - start))s"
