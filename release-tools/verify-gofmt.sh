#!/usr/bin/env bash
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
