#!/usr/bin/env bash
# Builds the e2e tools into ${MOLDAU_CACHE:-$HOME/.cache/moldau}/bin:
#   controlplane (multi-call: etcd, kube-apiserver, kube-controller-manager,
#   kube-scheduler, kubectl; symlinks with those names point at it), coredns
#   (the cluster DNS of the network-namespace plane, see controlplane-up.sh)
#   and helm.
# A build is skipped when the binary was built from the same inputs (go.mod,
# go.sum, sources, Go version); otherwise Go's build cache makes a rebuild
# mostly a link step.
set -euo pipefail
e2e="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${MOLDAU_CACHE:-$HOME/.cache/moldau}"
bin="$cache/bin"
mkdir -p "$bin"
# shellcheck source=../controlplane/versions.env
source "$e2e/controlplane/versions.env"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
gover="$(go env GOVERSION)"

stamp_of() { # dir -> hash of the build inputs
  (cd "$1" && cat go.mod go.sum $(ls ./*.go 2>/dev/null) && echo "$gover" && echo "$2") | sha256sum | cut -d' ' -f1
}

build() { # name dir pkg ldflags
  local name="$1" dir="$2" pkg="$3" ldflags="$4"
  local want; want="$(stamp_of "$dir" "$ldflags")"
  if [[ -x "$bin/$name" && -f "$bin/.$name.stamp" && "$(cat "$bin/.$name.stamp")" == "$want" ]]; then
    echo "build-tools: $name is up to date" >&2
    return
  fi
  echo "build-tools: building $name ($pkg) ..." >&2
  local t0=$SECONDS
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$bin/.$name.tmp" "$pkg")
  mv -f "$bin/.$name.tmp" "$bin/$name"
  echo "$want" > "$bin/.$name.stamp"
  echo "build-tools: built $name in $((SECONDS - t0))s" >&2
}

kminor="${KUBERNETES_VERSION#v1.}"; kminor="${kminor%%.*}"
kv=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kv+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$kminor"
  kv+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
build controlplane "$e2e/controlplane" . "-s -w$kv"
for c in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  ln -sfn controlplane "$bin/$c"
done

build coredns "$e2e/coredns" . "-s -w"

build helm "$e2e/helm" helm.sh/helm/v3/cmd/helm \
  "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"

echo "build-tools: tools in $bin" >&2
