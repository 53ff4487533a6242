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
# Sourced by hack/verify-boilerplate.sh and hack/update-boilerplate.sh: which
# files carry the licence header, and whether one does. The headers are the
# templates hack/boilerplate/boilerplate.<kind>.txt, YEAR standing for the
# year the file was created (any year from 2000 is accepted), as in
# Kubernetes:
#   go  every Go file: the header first, or right after the build
#       constraints (//go:build, then a blank line), then a blank line;
#   sh  every shell script (*.sh, .ci/run): the header first, or after the
#       #! line and a blank line, then a blank line.
# Paths are relative to the repository's root.

boilerplate_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# boilerplate_files prints the files that need the header, one a line:
# tracked, or new and not ignored.
boilerplate_files() {
	git -C "$boilerplate_repo" ls-files --cached --others --exclude-standard -- '*.go' '*.sh' .ci/run | sort -u
}

# boilerplate_kind FILE prints the header kind FILE needs (go or sh).
boilerplate_kind() {
	case $1 in
	*.go) echo go ;;
	*) echo sh ;;
	esac
}

# boilerplate_ok FILE reports whether FILE starts with its
# header, in the right place.
boilerplate_ok() {
	local kind
	kind=$(boilerplate_kind "$1")
	awk -v kind="$kind" '
		FNR == NR { want[++n] = $0; next }
		state == 0 {
			if (FNR == 1 && kind == "sh" && /^#!/) next
			if (kind == "go" && (/^\/\/go:build / || /^\/\/ \+build /)) next
			if ($0 == "") next
			state = 1
		}
		{
			i++
			line = $0
			if (i > n) { bad = (line != ""); exit }
			if (want[i] ~ /YEAR/) sub(/Copyright 20[0-9][0-9] /, "Copyright YEAR ", line)
			if (line != want[i]) { bad = 1; exit }
		}
		END { exit (bad || i <= n) ? 1 : 0 }
	' "$boilerplate_repo/hack/boilerplate/boilerplate.$kind.txt" "$boilerplate_repo/$1"
}
