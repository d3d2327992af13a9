#!/usr/bin/env bash
# Runs the client-compatibility suite (after scripts/install-test-deps.sh).
#   MOLDAU_TEST_TARGET=moldau (default): $MOLDAU_BROKER_BIN or
#       ${CARGO_TARGET_DIR:-target}/release/moldau-broker
#   MOLDAU_TEST_TARGET=kafka: Apache Kafka from e2e/clients/kafka-dist
# Extra arguments go to pytest, e.g. `e2e/clients/run.sh -k kcat -x`.
# The JUnit report goes to $MOLDAU_CLIENTS_JUNIT, by default
# e2e/.state/clients-junit-$MOLDAU_TEST_TARGET.xml.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export MOLDAU_TEST_TARGET="${MOLDAU_TEST_TARGET:-moldau}"
export MOLDAU_BROKER_BIN="${MOLDAU_BROKER_BIN:-${CARGO_TARGET_DIR:-$repo/target}/release/moldau-broker}"
junit="${MOLDAU_CLIENTS_JUNIT:-$repo/e2e/.state/clients-junit-$MOLDAU_TEST_TARGET.xml}"
mkdir -p "$repo/e2e/.state" "$(dirname "$junit")"
cd "$here"
exec "$repo/.venv/bin/python" -m pytest -p no:cacheprovider --junitxml="$junit" "$@"
