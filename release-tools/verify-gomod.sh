#!/usr/bin/env bash
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
