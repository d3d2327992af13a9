#!/usr/bin/env bash
# Writes manifests/install.yaml: the chart rendered with `helm template` for
# namespace moldau-system (Namespace, CRDs from crds/, ServiceAccount, RBAC,
# operator Deployment, metrics Service), so `kubectl apply -f` installs the
# same operator as `helm install`.
#
#   scripts/gen-install-manifest.sh            # rewrite manifests/install.yaml
#   scripts/gen-install-manifest.sh --check    # exit 1 when it is out of date
#   scripts/gen-install-manifest.sh --stdout   # print it
#
# HELM: the helm binary (default: helm on PATH, else the one built by
# e2e/scripts/build-tools.sh in ~/.cache/moldau/bin).
set -euo pipefail
cd "$(dirname "$0")/.."

helm="${HELM:-}"
if [ -z "$helm" ]; then
  if command -v helm >/dev/null 2>&1; then helm=helm
  else helm="${MOLDAU_CACHE:-$HOME/.cache/moldau}/bin/helm"; fi
fi

out=manifests/install.yaml
render() {
  echo "# Moldau operator: one-file install, generated from charts/moldau by"
  echo "# scripts/gen-install-manifest.sh; do not edit. Apply with"
  echo "#   kubectl apply --server-side -f manifests/install.yaml"
  # The symlinked crds/ makes helm print a notice on stderr; keep real errors.
  "$helm" template moldau charts/moldau \
    --namespace moldau-system \
    --include-crds \
    --set createNamespace=true \
    2> >(grep -v 'found symbolic link in path' >&2)
}

case "${1:-}" in
  --stdout) render ;;
  --check)
    tmp="$(mktemp)"; trap 'rm -f "$tmp"' EXIT
    render > "$tmp"
    if ! diff -u "$out" "$tmp" >&2; then
      echo "$out is out of date: run scripts/gen-install-manifest.sh" >&2
      exit 1
    fi ;;
  "")
    tmp="$(mktemp)"; trap 'rm -f "$tmp"' EXIT
    render > "$tmp"
    mv "$tmp" "$out"; trap - EXIT
    chmod 644 "$out"
    echo "wrote $out" ;;
  *) echo "usage: $0 [--check|--stdout]" >&2; exit 2 ;;
esac
