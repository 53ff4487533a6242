#!/usr/bin/env bash
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
