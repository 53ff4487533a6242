#!/usr/bin/env bash
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
