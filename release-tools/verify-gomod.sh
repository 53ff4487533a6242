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

# Fails when `go mod tidy` would change go.mod or go.sum of a module.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The main module, and the Helm chart's tests (a module of their own).
for mod in . deploy/helm; do
	cp "$mod/go.mod" "$mod/go.sum" "$tmp/"
	(cd "$mod" && go mod tidy)
	if ! diff -u "$tmp/go.mod" "$mod/go.mod" || ! diff -u "$tmp/go.sum" "$mod/go.sum"; then
		cp "$tmp/go.mod" "$tmp/go.sum" "$mod/"
		echo "$mod/go.mod, go.sum are not tidy: run 'go mod tidy' there and commit the result" >&2
		exit 1
	fi
done
echo "go mod tidy: ok"
