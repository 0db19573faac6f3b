#!/usr/bin/env bash
# Commit subjects are at most 72 characters (details go in the body), for
# every commit since the rule began: after SINCE (default 77fc62c, the last
# commit before it). A clone without that commit (a shallow one) checks
# HEAD only, and says so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
since="${SINCE:-77fc62c}"
max=72
range=("$since..HEAD")
if ! git cat-file -e "$since^{commit}" 2>/dev/null; then
	echo "verify-commit-subjects: $since is not in this clone (a shallow one?): checking HEAD only (git fetch --unshallow checks them all)"
	range=(-1 HEAD)
fi
# Characters, not bytes (awk may count bytes): bash under a UTF-8 locale.
export LC_ALL=C.UTF-8
long=""
while IFS= read -r line; do
	subject="${line#* }"
	if ((${#subject} > max)); then
		long+="${#subject} characters: $line"$'\n'
	fi
done < <(git log --format='%h %s' "${range[@]}")
if [[ -n "$long" ]]; then
	echo "commit subjects longer than $max characters (put the details in the body):"
	echo "$long" | cut -c1-160
	exit 1
fi
