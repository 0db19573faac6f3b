#!/usr/bin/env bash
# Builds the tools that tests run (promtool, for the alert rules' unit tests,
# Alertmanager, for the notification tests, CNCF Distribution's registry,
# for the OCI source tests, cosign, which signs artifacts in them, and versitygw,
# the S3 server of the bucket source tests) from the Go module
# proxy into a versioned cache folder outside the repository, so that every
# clone on this machine reuses them. A warm run builds nothing.
#
#   PLUMB_TOOLS_CACHE  root of the cache (default: the user cache directory's
#                      plumb/tools)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../internal/testenv/tools.env
source "$repo/internal/testenv/tools.env"

cache_root="${PLUMB_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/plumb/tools}"
dir="$cache_root/prometheus-${PROMETHEUS_VERSION}_alertmanager-${ALERTMANAGER_VERSION}_distribution-${DISTRIBUTION_VERSION}"
bin="$dir/bin"
tools="$repo/hack/tools"

die() { echo "tools: $*" >&2; exit 1; }
grep -qE "^(require)?[[:space:]]*github.com/prometheus/prometheus $PROMETHEUS_VERSION( |$)" "$tools/prometheus/go.mod" ||
	die "hack/tools/prometheus/go.mod does not require prometheus $PROMETHEUS_VERSION (internal/testenv/tools.env); fix one of them"
grep -qE "^(require)?[[:space:]]*github.com/prometheus/alertmanager $ALERTMANAGER_VERSION( |$)" "$tools/alertmanager/go.mod" ||
	die "hack/tools/alertmanager/go.mod does not require alertmanager $ALERTMANAGER_VERSION (internal/testenv/tools.env); fix one of them"
grep -qE "^(require)?[[:space:]]*github.com/distribution/distribution/v3 $DISTRIBUTION_VERSION( |$)" "$tools/registry/go.mod" ||
	die "hack/tools/registry/go.mod does not require distribution $DISTRIBUTION_VERSION (internal/testenv/tools.env); fix one of them"
grep -qE "^(require)?[[:space:]]*github.com/sigstore/cosign/v2 $COSIGN_VERSION( |$)" "$tools/cosign/go.mod" ||
	die "hack/tools/cosign/go.mod does not require cosign $COSIGN_VERSION (internal/testenv/tools.env); fix one of them"
grep -qE "^(require)?[[:space:]]*github.com/versity/versitygw $VERSITYGW_VERSION( |$)" "$tools/versitygw/go.mod" ||
	die "hack/tools/versitygw/go.mod does not require versitygw $VERSITYGW_VERSION (internal/testenv/tools.env); fix one of them"
cosign_bin="$cache_root/cosign-${COSIGN_VERSION}/bin"
versitygw_bin="$cache_root/versitygw-${VERSITYGW_VERSION}/bin"

mkdir -p "$bin" "$cosign_bin" "$versitygw_bin"
exec 9>"$dir/.lock"
flock 9 # one builder per cache folder; a second one waits, then finds the binaries

build() { # name module-dir package [bin-dir]
	local name=$1 module=$2 pkg=$3 bin=${4:-$bin}
	if [[ -x "$bin/$name" ]]; then
		echo "tools: $name is built (cached)"
		return
	fi
	echo "tools: building $name from $pkg ..."
	local start=$SECONDS
	(cd "$tools/$module" && go build -trimpath -ldflags "-s -w" -tags "${tags:-}" -o "$bin/$name.partial" "$pkg")
	mv "$bin/$name.partial" "$bin/$name"
	echo "tools: built $name in $((SECONDS - start))s"
}

# promtool only tests rules: without Prometheus's service discovery plugins
# (their cloud SDKs) it builds in half the time (~4 instead of ~8 minutes).
tags=remove_all_sd build promtool prometheus github.com/prometheus/prometheus/cmd/promtool
build alertmanager alertmanager github.com/prometheus/alertmanager/cmd/alertmanager
build registry registry github.com/distribution/distribution/v3/cmd/registry
# cosign's folder is shared by every prometheus/alertmanager/distribution
# stamp, so it has a lock of its own.
exec 8>"$cosign_bin/../.lock"
flock 8
build cosign cosign github.com/sigstore/cosign/v2/cmd/cosign "$cosign_bin"
# versitygw's folder is its own too, with its own lock.
exec 7>"$versitygw_bin/../.lock"
flock 7
build versitygw versitygw github.com/versity/versitygw/cmd/versitygw "$versitygw_bin"
