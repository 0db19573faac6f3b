#!/usr/bin/env bash
# Checks the README's Layout claim: each layer of the product imports only
# packages of its own layer or of the layers below it (tests, e2e, charts,
# examples and hack are outside the layers). A package in no layer fails,
# so that a new one is placed on purpose, and so does one that the README's
# Layout table does not name.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
module=github.com/plumb-dev/plumb

# layer prints the layer of a package (0 is the top), or "none".
layer() {
	case "$1" in
	cmd/*) echo 0 ;;
	internal/controller | internal/controller/*) echo 1 ;;
	internal/ui | internal/preview | internal/preview/* | internal/appview | internal/syncrequest) echo 2 ;;
	internal/reconcile) echo 3 ;;
	internal/source | internal/source/* | informers | informers/* | internal/diff | ssa | internal/syncorder) echo 4 ;;
	queue | webhook | internal/shard) echo 5 ;;
	internal/health | internal/notify | internal/redact | internal/repourl | internal/revision | internal/metrics | internal/credentials | internal/impersonation | internal/destination | internal/clusterinfo | internal/digest | internal/egress) echo 6 ;;
	api | api/*) echo 7 ;;
	*) echo none ;;
	esac
}

# The README's Layout section, where each package must be named.
layout=$(awk '/^## Layout/ {on = 1; next} /^## / {on = 0} on' README.md)
[[ -n $layout ]] || { echo "hack/verify-layers.sh: README.md has no Layout section"; exit 1; }

failed=0
while read -r pkg imports; do
	pkg=${pkg#"$module"/}
	case "$pkg" in hack/* | e2e | e2e/* | charts/* | examples | examples/* | internal/testenv | */gittest) continue ;; esac
	mine=$(layer "$pkg")
	if [[ $mine == none ]]; then
		echo "hack/verify-layers.sh: package $pkg is in no layer; add it to the README's Layout and to this script"
		failed=1
		continue
	fi
	if ! grep -qF "\`$pkg\`" <<<"$layout"; then
		echo "hack/verify-layers.sh: package $pkg is not named in the README's Layout table"
		failed=1
	fi
	for imp in $imports; do
		[[ $imp == "$module"/* ]] || continue
		imp=${imp#"$module"/}
		case "$imp" in internal/testenv | */gittest | hack/* | e2e | e2e/*)
			echo "hack/verify-layers.sh: $pkg (the product) imports $imp (tests' or tooling's)"
			failed=1
			continue
			;;
		esac
		theirs=$(layer "$imp")
		if [[ $theirs != none && $theirs -lt $mine ]]; then
			echo "hack/verify-layers.sh: $pkg (layer $mine) imports $imp (layer $theirs, above it)"
			failed=1
		fi
	done
done < <(go list -f '{{.ImportPath}} {{join .Imports " "}}' ./...)
exit $failed
