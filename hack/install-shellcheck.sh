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

# Installs shellcheck (Debian package shellcheck), which make verify runs on
# the shell scripts (hack/verify-shellcheck.sh).
#
# Idempotent: does nothing when shellcheck is present. Non-interactive: runs
# from CI on a fresh Debian machine (as root, or with passwordless sudo).
# Prints nothing on stdout, progress on stderr.
set -euo pipefail

log() { echo "install-shellcheck: $*" >&2; }

# shellcheck source=lib/apt-install.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/apt-install.sh"

if have shellcheck; then
	exit 0
fi

start=$SECONDS
apt_install_packages shellcheck
have shellcheck || { log "shellcheck still missing after the install"; exit 1; }
log "installed shellcheck in $((SECONDS - start))s"
