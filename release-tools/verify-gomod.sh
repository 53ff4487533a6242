#!/usr/bin/env bash
# Fails when `go mod tidy` would change go.mod or go.sum of the main module.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp go.mod go.sum "$tmp/"
go mod tidy
if ! diff -u "$tmp/go.mod" go.mod || ! diff -u "$tmp/go.sum" go.sum; then
	cp "$tmp/go.mod" "$tmp/go.sum" .
	echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit the result" >&2
	exit 1
fi
echo "go mod tidy: ok"
