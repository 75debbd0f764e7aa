#!/usr/bin/env bash
# helm, built from source through the Go module proxy once per machine and cached.
#
#   scripts/helm.sh --path        build if missing, print the binary's path
#   scripts/helm.sh ARGS...       build if missing, run `helm ARGS...`
#
# No helm release binary can be downloaded here (only package registries are reachable), but
# helm is a Go module: `go install helm.sh/helm/v3/cmd/helm@<version>` builds it from the
# proxy. Cold, that takes about 5 minutes on 2 cores (downloads + compile); later calls
# reuse the binary. The build stamps the version and the default Kubernetes version the way
# helm's own Makefile does (without it, helm reports "v3.22" and assumes Kubernetes 1.20).
#
# Settings: ARES_HELM_VERSION (default below), ARES_CACHE_DIR (default
# ${XDG_CACHE_HOME:-~/.cache}/ares-mesh, shared with the dev environment's broker jars).
# Needs `go` >= the version in helm's go.mod (1.26 for v3.22), or GOTOOLCHAIN=auto.
set -euo pipefail

# The newest helm 3 on the proxy when this was written (3.20.x and 3.21.x build too).
HELM_VERSION="${ARES_HELM_VERSION:-v3.22.0}"
CACHE_DIR="${ARES_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ares-mesh}"
BIN_DIR="$CACHE_DIR/bin/helm-$HELM_VERSION"
HELM="$BIN_DIR/helm"

build() {
    command -v go >/dev/null 2>&1 || {
        echo "scripts/helm.sh: no 'go' on PATH: install Go >= 1.26 to build helm $HELM_VERSION" >&2
        exit 1
    }
    mkdir -p "$CACHE_DIR/bin"
    # One build at a time per machine; whoever waited finds the binary and returns.
    exec 9>"$CACHE_DIR/bin/.helm-$HELM_VERSION.lock"
    flock 9
    [[ -x "$HELM" ]] && return 0

    local gomod k8s_minor ldflags
    gomod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" \
        | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
    # helm's default Kubernetes version is that of the k8s.io modules it builds with.
    k8s_minor="$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")"
    ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    if [[ -n "$k8s_minor" ]]; then
        for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
            ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
        done
    fi

    echo "scripts/helm.sh: building helm $HELM_VERSION from the Go module proxy" \
         "(once per machine, a few minutes)..." >&2
    BUILD_DIR="$(mktemp -d "$CACHE_DIR/bin/.helm-build.XXXXXX")"
    trap 'rm -rf "$BUILD_DIR"' EXIT
    GOBIN="$BUILD_DIR" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
        go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    mkdir -p "$BIN_DIR"
    mv "$BUILD_DIR/helm" "$HELM"  # same filesystem: the binary appears whole or not at all
    echo "scripts/helm.sh: $("$HELM" version --short) -> $HELM" >&2
}

[[ -x "$HELM" ]] || build

if [[ "${1:-}" == "--path" ]]; then
    echo "$HELM"
else
    exec "$HELM" "$@"
fi
