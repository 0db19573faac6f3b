#!/usr/bin/env bash
# Builds the local control plane's binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok) from the Go module
# proxy into a versioned cache folder outside the repository, so that every
# clone on this machine reuses them. A warm run builds nothing.
#
#   PLUMB_CONTROLPLANE_CACHE  root of the cache (default: the user cache
#                             directory's plumb/controlplane)
#
# Prints the folder holding the binaries on its last line.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../internal/testenv/versions.env
source "$repo/internal/testenv/versions.env"

cache_root="${PLUMB_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/plumb/controlplane}"
stamp="kubernetes-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
dir="$cache_root/$stamp"
bin="$dir/bin"
tools="$repo/hack/tools"

die() { echo "controlplane: $*" >&2; exit 1; }

# The tool modules must pin what versions.env says: it is the one source of truth.
staging="v0.${KUBERNETES_VERSION#v1.}"
check_pin() { # module-dir module version
	grep -qE "^(require)?[[:space:]]*$2 $3( |$)" "$tools/$1/go.mod" ||
		die "hack/tools/$1/go.mod does not require $2 $3 (internal/testenv/versions.env); fix one of them"
}
check_pin kubernetes k8s.io/kubernetes "$KUBERNETES_VERSION"
check_pin etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
check_pin kwok sigs.k8s.io/kwok "$KWOK_VERSION"
if grep -E '=> k8s.io/[a-z-]+ v' "$tools/kubernetes/go.mod" | grep -vq " $staging\$"; then
	die "hack/tools/kubernetes/go.mod replaces a staging module with a version other than $staging"
fi

mkdir -p "$bin"
exec 9>"$dir/.lock"
flock 9 # one builder per cache folder; a second one waits, then finds the binaries

k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	k8s_ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1"
	k8s_ldflags+=" -X $pkg.gitMinor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
	k8s_ldflags+=" -X $pkg.gitTreeState=clean"
done

build() { # name module-dir package ldflags
	local name=$1 module=$2 pkg=$3 ldflags=$4
	if [[ -x "$bin/$name" ]]; then
		echo "controlplane: $name is built (cached)"
		return
	fi
	echo "controlplane: building $name from $pkg ..."
	local start=$SECONDS
	(cd "$tools/$module" && go build -trimpath -ldflags "$ldflags" -o "$bin/$name.partial" "$pkg")
	mv "$bin/$name.partial" "$bin/$name"
	echo "controlplane: built $name in $((SECONDS - start))s"
}

total=$SECONDS
build kube-apiserver kubernetes k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build etcd etcd go.etcd.io/etcd/server/v3 "-s -w"
build kube-controller-manager kubernetes k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
build kube-scheduler kubernetes k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
build kubectl kubernetes k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
build kwok kwok sigs.k8s.io/kwok/cmd/kwok "-s -w"

# kwok runs no stage unless told: concatenate the fast node, heartbeat and fast
# pod stages that the kwok module ships.
if [[ ! -s "$dir/kwok-stages.yaml" ]]; then
	kwok_dir="$(cd "$tools/kwok" && go mod download sigs.k8s.io/kwok && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
	{
		for f in "$kwok_dir"/kustomize/stage/node/fast/*.yaml \
			"$kwok_dir"/kustomize/stage/node/heartbeat/*.yaml \
			"$kwok_dir"/kustomize/stage/pod/fast/*.yaml; do
			[[ "$(basename "$f")" == kustomization.yaml ]] && continue
			echo "---"
			cat "$f"
		done
	} >"$dir/kwok-stages.yaml.partial"
	mv "$dir/kwok-stages.yaml.partial" "$dir/kwok-stages.yaml"
	echo "controlplane: wrote kwok-stages.yaml"
fi

echo "controlplane: ready in $((SECONDS - total))s"
echo "$dir"
