#!/usr/bin/env bash
# Fails when the generated files (deep-copy code, CRDs) differ from what
# `make generate` produces from the current API types.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

generated=(api/v1alpha1/zz_generated.deepcopy.go api/v1alpha1/crd charts/plumb/crds)
checksum() { find "${generated[@]}" -type f -print0 | sort -z | xargs -0 sha256sum; }

before="$(checksum)"
make --no-print-directory generate >/dev/null
after="$(checksum)"
if [[ "$before" != "$after" ]]; then
	echo "generated files were stale; \`make generate\` has now rewritten them:" >&2
	diff <(echo "$before") <(echo "$after") >&2 || true
	echo "commit the regenerated files" >&2
	exit 1
fi
echo "generated files are current"
