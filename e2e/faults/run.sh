#!/usr/bin/env bash
# The fault checker (e2e/faults/checker.py), with the repo's .venv (made by
# scripts/install-test-deps.sh from e2e/clients/requirements.txt).
#   e2e/faults/run.sh [checker options]   one run, e.g. --duration 600 --fault-interval 10
#   e2e/faults/run.sh test [pytest args]  its tests: accounting, schedule and
#                                         stall units, the network cut, a 2-minute
#                                         run with controller pauses and kills
#                                         (stall bound 12 s, delivery latency) and a
#                                         1-minute run of the transactional mode
#   e2e/faults/run.sh --transactional ...  transactional producers, read_committed verdict
# Broker: $MOLDAU_BROKER_BIN or ${CARGO_TARGET_DIR:-<repo>/target}/release/moldau-broker.
# Network cuts need root and iptables (or nft); without them the run skips that kind.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export MOLDAU_BROKER_BIN="${MOLDAU_BROKER_BIN:-${CARGO_TARGET_DIR:-$repo/target}/release/moldau-broker}"
py="$repo/.venv/bin/python"
if ! "$py" -c 'import confluent_kafka' 2>/dev/null; then
  echo "run.sh: no $repo/.venv with confluent-kafka; run scripts/install-test-deps.sh first" >&2
  exit 2
fi
mkdir -p "$repo/e2e/.state"
if [ "${1:-}" = test ]; then
  shift
  cd "$here"
  exec "$py" -m pytest -p no:cacheprovider --junitxml="$repo/e2e/.state/faults-junit.xml" "$@"
fi
exec "$py" "$here/checker.py" "$@"
