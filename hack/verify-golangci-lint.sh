#!/usr/bin/env bash
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
