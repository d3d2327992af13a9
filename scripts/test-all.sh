#!/usr/bin/env bash
# The project's one test command: every test, on a fresh machine too.
#
# Stages (each named, timed, and reported in the summary):
#   install      scripts/install-test-deps.sh (apt, .venv, Maven, cargo-fuzz)
#   fmt          cargo fmt --all -- --check
#   clippy       cargo clippy --workspace --all-targets -- -D warnings
#   build        cargo build --release -p moldau-broker
#   unit         cargo test --workspace (includes the bounded fuzz run:
#                fuzz-checks/tests/bounded.rs, every fuzz check on its corpus
#                and 15 s of seeded mutations, no coverage guidance)
#   fuzz         only when named in TEST_ALL_STAGES: scripts/fuzz.sh 30, the
#                coverage-guided cargo-fuzz run (its cold nightly build with
#                AddressSanitizer alone takes 15-25 minutes on 2 cores, which
#                the 90-minute CI budget cannot hold next to the rest)
#   clients      pytest e2e/clients: real Kafka clients against the built broker
#   faults       e2e/faults/run.sh test: the fault checker's units and a bounded
#                2-minute run of faults on a 3-broker cluster (0 acknowledged lost)
#   k8s-tools, k8s-up, k8s-e2e, k8s-down
#                the Kubernetes e2e stage, once e2e/scripts/build-tools.sh exists
#
# A stage whose prerequisite failed is skipped (and counted as failed).
# Exit status: 0 only if every stage passed. The last line is the summary.
#
# Environment:
#   TEST_ALL_STAGES    space-separated stages to run (default: all)
#   TEST_ALL_SKIP      space-separated stages not to run
#   TEST_ALL_BUDGET    seconds for the whole run (default 5100 = 85 min); a stage
#                      gets at most what is left, and is failed when it runs out
#   MOLDAU_TEST_TARGET broker for the clients stage: moldau (default) | kafka
#   PYTEST_ARGS        extra arguments for the clients stage's pytest
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

budget="${TEST_ALL_BUDGET:-5100}"
only="${TEST_ALL_STAGES:-}"
skip_list="${TEST_ALL_SKIP:-}"
start=$SECONDS
# One build of everything, no incremental caches: CI's disk is finite and each
# copy of the dependency tree costs gigabytes.
export CARGO_INCREMENTAL=0
# The test binaries that need the Kubernetes control plane (they return at once
# under MOLDAU_E2E=0); the k8s-e2e stage runs exactly these.
K8S_TEST_TARGETS=(store apiserver cluster_kubernetes cluster_kubernetes_clients helm lease
  packaging_chart packaging_helm packaging_images packaging_install_manifest podspec
  statefulset e2e_operator)
declare -A status=()
order=()
summary=()

want() {
  [[ " $skip_list " == *" $1 "* ]] && return 1
  [ -z "$only" ] || [[ " $only " == *" $1 "* ]]
}

# stage NAME LIMIT_SECONDS [needs=STAGE,...] -- COMMAND...
stage() {
  local name="$1" limit="$2"
  shift 2
  local needs=""
  if [[ "${1:-}" == needs=* ]]; then needs="${1#needs=}"; shift; fi
  [ "${1:-}" = "--" ] && shift
  want "$name" || return 0
  order+=("$name")
  local dep
  for dep in ${needs//,/ }; do
    if [ -n "${status[$dep]:-}" ] && [ "${status[$dep]}" != pass ]; then
      status[$name]=skip
      summary+=("$(printf '%-10s SKIPPED (needs %s)' "$name" "$dep")")
      echo "=== stage $name: skipped, $dep did not pass"
      return 0
    fi
  done
  local left=$((budget - (SECONDS - start)))
  if [ "$left" -le 30 ]; then
    status[$name]=fail
    summary+=("$(printf '%-10s FAILED (no time left of the %ss budget)' "$name" "$budget")")
    echo "=== stage $name: no time left"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo
  echo "=== stage $name (limit ${limit}s): $*"
  local t=$SECONDS rc=0
  timeout --kill-after=30 "$limit" "$@" || rc=$?
  local dt=$((SECONDS - t))
  if [ $rc -eq 0 ]; then
    status[$name]=pass
    summary+=("$(printf '%-10s passed  %5ss' "$name" "$dt")")
  else
    status[$name]=fail
    local why="exit $rc"
    [ $rc -eq 124 ] && why="timed out after ${limit}s"
    summary+=("$(printf '%-10s FAILED  %5ss  (%s)' "$name" "$dt" "$why")")
  fi
  # disk is a resource the suite can exhaust; say what each stage left
  echo "=== stage $name: ${status[$name]} in ${dt}s ($(df -h --output=avail . | tail -1 | tr -d ' ') free)"
}

stage install 1200 -- ./scripts/install-test-deps.sh
stage fmt 300 -- cargo fmt --all -- --check
stage clippy 1800 -- cargo clippy --workspace --all-targets -- -D warnings
# the operator too: the image tests package both release binaries
stage build 1800 -- cargo build --release -p moldau-broker -p moldau-operator
k8s=0
if [ -x e2e/scripts/build-tools.sh ] && want k8s-e2e; then k8s=1; fi
# The moldau-e2e crate's tests (a workspace member) need the control plane:
# when the k8s stages run them, the unit stage tells them to return at once.
if [ $k8s = 1 ]; then
  stage unit 1800 -- env MOLDAU_E2E=0 cargo test --workspace
else
  stage unit 1800 -- cargo test --workspace
fi
if [[ " $only " == *" fuzz "* ]]; then
  stage fuzz 1800 needs=install -- ./scripts/fuzz.sh 30
fi
# shellcheck disable=SC2086
stage clients 1800 needs=install,build -- e2e/clients/run.sh ${PYTEST_ARGS:-}
stage faults 900 needs=install,build -- e2e/faults/run.sh test

if [ -x e2e/scripts/build-tools.sh ]; then
  stage k8s-tools 1800 -- e2e/scripts/build-tools.sh
  stage k8s-up 600 needs=k8s-tools,build -- e2e/scripts/controlplane-up.sh
  # --workspace (not -p): the same feature set as the unit stage, so these
  # test binaries are the ones it already built, not a second copy of the tree.
  k8s_tests=""
  for t in "${K8S_TEST_TARGETS[@]}"; do k8s_tests+=" --test $t"; done
  # shellcheck disable=SC2086
  stage k8s-e2e 2400 needs=k8s-up -- cargo test --workspace --no-fail-fast $k8s_tests
  # tear down whenever bring-up was attempted, whatever the tests did
  if [ -x e2e/scripts/controlplane-down.sh ] && [ -n "${status[k8s-up]:-}" ] && [ "${status[k8s-up]}" != skip ]; then
    stage k8s-down 300 -- e2e/scripts/controlplane-down.sh
  fi
fi

echo
echo "=== summary (total $((SECONDS - start))s)"
passed=0 failed=0 skipped=0
for line in "${summary[@]}"; do echo "  $line"; done
for name in "${order[@]}"; do
  case "${status[$name]}" in
    pass) passed=$((passed + 1)) ;;
    skip) skipped=$((skipped + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
done
# skipped stages were skipped because another failed: they count as failed
echo "test-all: $passed passed, $((failed + skipped)) failed"
[ $((failed + skipped)) -eq 0 ]
