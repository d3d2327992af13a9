#!/usr/bin/env bash
# One command: Moldau vs Apache Kafka on this machine, side by side.
#
#   bench/run.sh [--quick] [--reps N] [--out DIR] [--only moldau|kafka]
#   bench/run.sh --report-only --out bench-results/DATE   # re-render tables/chart
#
# Builds the broker and the load generator in release mode (CARGO_TARGET_DIR
# is honoured), makes bench/.venv with matplotlib, fetches the Kafka jars
# (e2e/clients/kafka-dist), then runs bench/run.py: machine limits (direct-I/O
# disk write, loopback TCP), then for each repetition the whole matrix
# (100 B / 1 KiB, acks=1/all, none/lz4) on Moldau and on Kafka, one broker at a
# time, order alternating. Results: bench-results/<date>/results.{md,json,png}.
# --quick takes about 10 minutes; the full run about 40. Not part of the tests.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target="${CARGO_TARGET_DIR:-$repo/target}"

report_only=0
for a in "$@"; do [ "$a" = "--report-only" ] && report_only=1; done

venv="$repo/bench/.venv"
if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q matplotlib
fi

if [ "$report_only" = 0 ]; then
  cargo build --release -p moldau-broker -p moldau-bench
  e2e/clients/kafka-dist/fetch-jars.sh
fi

exec "$venv/bin/python" "$repo/bench/run.py" \
  --moldau-bin "$target/release/moldau-broker" \
  --bench-bin "$target/release/moldau-bench" "$@"
