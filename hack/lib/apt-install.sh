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

# shellcheck shell=bash
# Sourced by the hack/install-*.sh scripts: installs Debian packages the
# tests need, non-interactively, as root or with passwordless sudo, on a
# fresh machine too. The caller defines log().

# have reports whether a command is on the PATH, or in /usr/sbin or /sbin
# (which a non-root PATH often lacks).
have() { PATH=$PATH:/usr/sbin:/sbin command -v "$1" >/dev/null 2>&1; }

# apt_installer prints how apt_install_packages would install: "root" or
# "sudo" (passwordless); or it prints why it cannot, after "no: ", and fails.
apt_installer() {
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "no: apt-get not found"
		return 1
	fi
	if [ "$(id -u)" = 0 ]; then
		echo root
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		echo sudo
	else
		echo "no: not root and no passwordless sudo"
		return 1
	fi
}

# apt_install_packages installs its arguments (packages) with apt-get. A
# fresh machine may have no package lists at all (or stale ones whose
# versions the mirror no longer serves): update once, then install; and if an
# install from lists we did not refresh fails, refresh and try once more.
#
# make test's lanes install their packages at the same time, and a second
# apt-get fails on the first one's locks: one install at a time, the others
# waiting their turn.
apt_install_packages() {
	(
		flock 8
		apt_install_packages_unlocked "$@"
	) 8>>"${TMPDIR:-/tmp}/fence-attacher-apt.lock"
}

apt_install_packages_unlocked() {
	local how
	if ! how=$(apt_installer); then
		log "cannot install $* (${how#no: }): install them by hand"
		return 1
	fi
	local sudo=()
	if [ "$how" = sudo ]; then
		sudo=(sudo -n)
	fi
	local install=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@")
	if [ -z "$(find /var/lib/apt/lists -mindepth 1 -maxdepth 1 ! -name lock ! -name partial ! -name auxfiles -print -quit 2>/dev/null)" ]; then
		log "apt-get update"
		"${sudo[@]}" apt-get update -q >&2
		"${install[@]}" >&2
	elif ! "${install[@]}" >&2; then
		log "install failed; apt-get update and one more try"
		"${sudo[@]}" apt-get update -q >&2
		"${install[@]}" >&2
	fi
}
