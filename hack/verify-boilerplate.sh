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

# Fails naming every Go file and shell script without the licence header
# (hack/lib/boilerplate.sh says which files and where the header goes;
# hack/update-boilerplate.sh adds it).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/boilerplate.sh
. "$repo/hack/lib/boilerplate.sh"

missing=()
while IFS= read -r f; do
	boilerplate_ok "$f" || missing+=("$f")
done < <(boilerplate_files)

if [ ${#missing[@]} -gt 0 ]; then
	echo "licence header missing or not as in hack/boilerplate/boilerplate.<go|sh>.txt in ${#missing[@]} files:" >&2
	printf '  %s\n' "${missing[@]}" >&2
	echo "run hack/update-boilerplate.sh to add it" >&2
	exit 1
fi
echo "boilerplate: ok"
