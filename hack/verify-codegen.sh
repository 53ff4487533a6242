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

# Fails when a file hack/update-codegen.sh generates (the CRDs, both
# copies, and zz_generated.deepcopy.go) is not what it generates from the Go
# types now: it regenerates into a temporary directory and diffs, naming each
# stale or missing file. Changes nothing in the repository.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$repo/hack/update-codegen.sh" "$tmp/gen"

stale=()
while IFS= read -r f; do
	rel=${f#"$tmp/gen/"}
	if [ ! -f "$repo/$rel" ]; then
		stale+=("$rel (missing)")
	elif ! diff -u "$repo/$rel" "$f" >&2; then
		stale+=("$rel")
	fi
done < <(find "$tmp/gen" -type f | sort)

if [ ${#stale[@]} -gt 0 ]; then
	echo "codegen: ${#stale[@]} generated file(s) stale, not what the Go types of pkg/apis and their markers generate (diff above, - the repository, + generated):" >&2
	printf '  %s\n' "${stale[@]}" >&2
	echo "run hack/update-codegen.sh and commit the result; never edit these files by hand" >&2
	exit 1
fi
echo "codegen: ok"
