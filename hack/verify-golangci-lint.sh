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

# Runs golangci-lint, pinned and cached by hack/golangci-lint.sh, with
# .golangci.yml: over the main module with the e2e build tag (the config
# sets it), then over deploy/helm's module. Fails on any finding.
#
# Env: GOLANGCI_LINT_CONCURRENCY (default 2: make test's lanes share two
# cores).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
gcl=$("$repo/hack/golangci-lint.sh" | tail -n1)

failed=()
for mod in . deploy/helm; do
	if ! (cd "$repo/$mod" && "$gcl" run --config "$repo/.golangci.yml" \
		--concurrency "${GOLANGCI_LINT_CONCURRENCY:-2}" ./...); then
		failed+=("$mod")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "golangci-lint: findings (above) in module(s): ${failed[*]}; fix the code (.golangci.yml says what is checked and why)" >&2
	exit 1
fi
echo "golangci-lint: ok"
