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

# Installs the real parts the power-fencing tests and fence-bench's power path
# run (test/bmcsim):
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
#
# --check installs nothing: it prints what is missing and whether this
# script could install it, as two lines on stdout, and exits 0 either way
# (test/e2e/framework.CheckFenceAgents reads them):
#   missing: fence_ipmilan ipmi_sim     (empty when nothing is)
#   install: root | sudo | no: <why not>
set -euo pipefail

log() { echo "install-fence-agents: $*" >&2; }

. "$(dirname "${BASH_SOURCE[0]}")/lib/apt-install.sh"

tools=(fence_ipmilan ipmitool ipmi_sim)
missing=()
for b in "${tools[@]}"; do
	have "$b" || missing+=("$b")
done

if [ "${1:-}" = --check ]; then
	echo "missing: ${missing[*]}"
	echo "install: $(apt_installer || true)"
	exit 0
fi

if [ ${#missing[@]} = 0 ]; then
	exit 0
fi

start=$SECONDS
apt_install_packages fence-agents ipmitool openipmi

for b in "${tools[@]}"; do
	have "$b" || { log "$b still missing after the install"; exit 1; }
done
log "installed fence-agents, ipmitool and openipmi in $((SECONDS - start))s"
