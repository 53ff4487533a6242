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

# Runs shellcheck (installed by hack/install-shellcheck.sh when missing) on
# every shell script of the repository (*.sh and .ci/run), following the
# files they source. Fails on any finding, style notes included.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/hack/install-shellcheck.sh"
cd "$repo"
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.sh' .ci/run | sort -u)
if ! shellcheck --external-sources --source-path=SCRIPTDIR "${files[@]}"; then
	echo "shellcheck: findings (above) in the shell scripts; fix them (or, for a finding that is wrong, a '# shellcheck disable=SCxxxx' with the reason on the line before)" >&2
	exit 1
fi
echo "shellcheck: ok (${#files[@]} scripts)"
