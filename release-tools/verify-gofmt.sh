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

# Fails when a Go file of the repository is not gofmt-clean.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
files=$(git ls-files --cached --others --exclude-standard '*.go' | xargs -r gofmt -l)
if [ -n "$files" ]; then
	echo "gofmt needed on:" >&2
	echo "$files" >&2
	mapfile -t list <<<"$files"
	gofmt -d "${list[@]}" >&2
	exit 1
fi
echo "gofmt: ok"
