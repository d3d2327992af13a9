#!/usr/bin/env bash
# One command: Moldau vs Apache Kafka on this machine, side by side.
#
#   bench/run.sh [--quick] [--reps N] [--out DIR] [--only moldau|kafka]
#   bench/run.sh --cluster [--quick] [--reps N] [--out DIR] [--only moldau|kafka]
#   bench/run.sh --compaction [--quick] [--reps N] [--out DIR] [--only moldau|kafka]
#   bench/run.sh --partitions [--quick] [--reps N] [--out DIR] [--only moldau|kafka]
#   bench/run.sh --restart [--quick] [--reps N] [--out DIR] [--only moldau|kafka]
#   bench/run.sh --transactions [--quick] [--reps N] [--out DIR] [--only moldau|kafka]
#   bench/run.sh --tls [--quick] [--reps N] [--out DIR] [--only moldau|kafka]
#   bench/run.sh --all [--quick] [--reps N] [--out DIR]
#   bench/run.sh [--cluster|--all] --report-only --out DIR   # re-render the tables
#
# Builds the broker and the load generator in release mode (CARGO_TARGET_DIR
# is honoured), makes bench/.venv with matplotlib, fetches the Kafka jars
# (e2e/clients/kafka-dist), then runs bench/run.py: machine limits (direct-I/O
# disk write, loopback TCP), then for each repetition the whole matrix
# (100 B / 1 KiB, acks=1/all, none/lz4) on Moldau and on Kafka, one broker at a
# time, order alternating. Results: bench-results/<date>/results.{md,json,png}.
# --quick takes about 10 minutes; the full run about 40. Not part of the tests.
#
# --cluster: three brokers of each kind instead of one (Moldau in cluster mode
# `dir`, Kafka as three KRaft broker+controller nodes), a topic with 3
# replicas and min.insync.replicas=2, acks=all, 100 B and 1 KiB records
# (uncompressed; lz4 too without --quick); bench/cluster.py. Results:
# bench-results/<date>-cluster/results.{md,json}. --quick: about 10 minutes.
#
# --compaction: produce p99 (paced, keyed) on a compacted partition of 256 MiB
# (--quick) or 1 GiB while the cleaner works on it, against the same without
# cleaning; bench/compaction.py. Results: bench-results/<date>-compaction/.
#
# --partitions: one topic of 1,000 partitions; produce throughput with 10
# producer connections (1 KiB records over all partitions, acks=1, linger 5 ms)
# and consume throughput with 10 consumer connections reading all partitions,
# peak RSS; bench/partitions.py. Results: bench-results/<date>-partitions/.
# --quick: about 7 minutes.
#
# --restart: 1,000 partitions filled with 100 MiB then 1 GiB (--quick) or 1 GiB
# then 10 GiB; at each size the time from start to ready after kill -9 and
# after SIGTERM (and the SIGTERM's stop time); bench/restart.py. Results:
# bench-results/<date>-restart/. --quick: about 12 minutes.
#
# --transactions: transactional produce on three brokers of each kind (the
# clusters of --cluster), RF=3, min.insync.replicas=2, acks=all: one producer
# with a transactional.id running transactions of 100 and of 1,000 records of
# 1 KiB over 3 partitions; committed records/s and MB/s, commit_transaction()
# p50/p99/max; each run verified (end offsets at read_committed and
# read_uncommitted = records + one marker per transaction, and a read_committed
# read of every record); bench/transactions.py. Results:
# bench-results/<date>-transactions/. --quick: about 10 minutes.
#
# --tls: produce and consume over an SSL listener, one broker of each kind,
# each also serving a PLAINTEXT listener measured in the same process (the
# cost of TLS on each side): 100 B and 1 KiB, acks=1 and all, uncompressed,
# librdkafka's load generator with security.protocol=SSL; certificates made
# with openssl; bench/tls.py. Results: bench-results/<date>-tls/. --quick: one
# repetition, about 8 minutes.
#
# --all: every row of the performance issue's table in one run: the matrix and
# the 1,000-partition case (--quick applies to both), the restart case at 10 GiB
# and the compaction case at 1 GiB (restart once, compaction three times unless --reps), each in
# its own directory under OUT, then OUT/issue-table.{md,json}: each row of the
# issue's table with this run's figure, its target and whether it is met;
# bench/all.py. --quick: about 40 minutes (the machine settles before each case).
#
# Every mode sets, for its duration, free page reporting's delay to 300 s and
# TCP congestion control to cubic (--tcp-congestion NAME|system), brokers and
# clients alike, and restores both afterwards (bench/run.py).
#
# MOLDAU_BENCH_BINS_DIR=DIR uses DIR/moldau-broker and DIR/moldau-bench as they
# are (no cargo build), e.g. private copies that a concurrent build sharing the
# target directory cannot replace in the middle of a run.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target="${CARGO_TARGET_DIR:-$repo/target}"
bins="${MOLDAU_BENCH_BINS_DIR:-}"

report_only=0
for a in "$@"; do [ "$a" = "--report-only" ] && report_only=1; done

venv="$repo/bench/.venv"
if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q matplotlib
fi

if [ "$report_only" = 0 ]; then
  if [ -n "$bins" ]; then
    for b in moldau-broker moldau-bench; do
      [ -x "$bins/$b" ] || { echo "run.sh: no executable $bins/$b (MOLDAU_BENCH_BINS_DIR)" >&2; exit 2; }
    done
  else
    cargo build --release -p moldau-broker -p moldau-bench
  fi
  e2e/clients/kafka-dist/fetch-jars.sh
fi
[ -n "$bins" ] || bins="$target/release"

exec "$venv/bin/python" "$repo/bench/run.py" \
  --moldau-bin "$bins/moldau-broker" \
  --bench-bin "$bins/moldau-bench" "$@"
