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

# Adds the licence header to every Go file and shell script that lacks it
# (hack/lib/boilerplate.sh says which and where), with this year's date or
# BOILERPLATE_YEAR. Re-run it after merging a branch that adds files. A file
# that has a copyright line near its top but not the header (an edited or
# foreign header) is left alone and named: fix it by hand.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/boilerplate.sh
. "$repo/hack/lib/boilerplate.sh"

year=${BOILERPLATE_YEAR:-$(date +%Y)}
added=0
manual=()
while IFS= read -r f; do
	if boilerplate_ok "$f"; then
		continue
	fi
	if head -n 30 "$repo/$f" | grep -q 'Copyright'; then
		manual+=("$f")
		continue
	fi
	kind=$(boilerplate_kind "$f")
	tmp=$(mktemp "$repo/$f.XXXXXX")
	# The lines that must stay first (a #! line, build constraints), a blank
	# line, the header, a blank line, then the rest without its leading
	# blank lines.
	awk -v kind="$kind" -v year="$year" -v header="$repo/hack/boilerplate/boilerplate.$kind.txt" '
		function put_header(  line) {
			while ((getline line < header) > 0) {
				sub(/YEAR/, year, line)
				print line
			}
			print ""
			done = 1
		}
		!done && FNR == 1 && kind == "sh" && /^#!/ { print; print ""; next }
		!done && kind == "go" && (/^\/\/go:build / || /^\/\/ \+build /) { print; constraints = 1; next }
		!done && constraints && $0 == "" { next }
		!done && constraints { print ""; put_header() }
		!done && $0 == "" { next }
		!done { put_header() }
		{ print }
	' "$repo/$f" >"$tmp"
	chmod --reference="$repo/$f" "$tmp"
	mv "$tmp" "$repo/$f"
	added=$((added + 1))
done < <(boilerplate_files)

echo "update-boilerplate: added the header to $added files" >&2
if [ ${#manual[@]} -gt 0 ]; then
	echo "update-boilerplate: these have a copyright line but not the header; fix them by hand:" >&2
	printf '  %s\n' "${manual[@]}" >&2
	exit 1
fi
