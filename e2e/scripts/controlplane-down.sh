#!/usr/bin/env bash
# Stops the e2e control plane (and any pod runner / pods recorded in the state
# dir) and removes the state directory.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Pod runners record their pid under pids/podrunner-*; they stop their pods.
if [[ -d "$STATE/pids" ]]; then
  for f in "$STATE"/pids/podrunner-*; do
    [[ -e "$f" ]] && stop_component "$(basename "$f")"
  done
fi
for ((i=${#COMPONENTS[@]}-1; i>=0; i--)); do stop_component "${COMPONENTS[i]}"; done
rm -rf "$STATE"
echo "controlplane-down: stopped, removed $STATE" >&2
