#!/usr/bin/env python3
"""Side-by-side benchmark of Moldau and Apache Kafka on this machine.

Started by bench/run.sh (which builds the binaries, the venv and the Kafka
jars first). One broker runs at a time; every repetition runs the whole
matrix on Moldau and on Kafka, alternating which goes first, so slow drift of
a shared machine hits both alike. The same load generator (`moldau-bench`,
librdkafka) with the same settings drives both.

Outputs (in --out, default bench-results/<date>/):
  raw.json     every measurement as taken (rewritten after each step)
  results.json machine, limits, medians/spread, ratios
  results.md   the tables, targets first
  results.png  throughput and latency side by side

With --cluster, bench/cluster.py runs instead: three brokers of each kind,
a topic with 3 replicas and min.insync.replicas=2, acks=all (see there).
With --compaction, bench/compaction.py: produce latency while a compacted
partition is cleaned, against the same without cleaning (see there).
With --partitions, bench/partitions.py: produce and consume throughput on one
topic of 1,000 partitions with 10 producer and 10 consumer connections.
With --restart, bench/restart.py: time from start to ready after a clean stop
and after kill -9, with 1,000 partitions holding a small and a large amount of
data.
With --transactions, bench/transactions.py: transactional produce (transactions
of 100 and of 1,000 records, acks=all) on 3-broker clusters, RF=3.
"""
from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys

# The runner of each mode (without one, matrix.py's); this file only parses
# the arguments, holds the run's kernel settings and dispatches.
import all as all_cases
import cluster
import compaction
import matrix
import partitions
import restart
import tls
import transactions
from common import REPO, RUN_TCP_CONGESTION, hold_freed_memory, tcp_congestion_for_run


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    # Even when started with SIGINT ignored (a background job of a script),
    # an interrupt stops the run and, through the finally blocks, its brokers.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller loads (about 10 minutes)")
    ap.add_argument("--cluster", action="store_true",
                    help="3-broker clusters, RF=3, min.insync.replicas=2, acks=all (bench/cluster.py)")
    ap.add_argument("--compaction", action="store_true",
                    help="produce latency while a compacted partition is cleaned (bench/compaction.py)")
    ap.add_argument("--partitions", action="store_true",
                    help="throughput on 1,000 partitions, 10 producers and 10 consumers (bench/partitions.py)")
    ap.add_argument("--restart", action="store_true",
                    help="time to ready after SIGTERM and after kill -9, 1,000 partitions (bench/restart.py)")
    ap.add_argument("--transactions", action="store_true",
                    help="transactional produce on 3-broker clusters, RF=3, acks=all: transactions of 100 "
                         "and 1,000 records, throughput and commit latency (bench/transactions.py)")
    ap.add_argument("--tls", action="store_true",
                    help="produce and consume over an SSL listener, with each broker's PLAINTEXT listener "
                         "beside it (bench/tls.py)")
    ap.add_argument("--all", action="store_true",
                    help="every row of the performance issue's table in one run: the matrix, 1,000 "
                         "partitions, restart (10 GiB) and compaction (1 GiB), then issue-table.md (bench/all.py)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per broker (default 3)")
    ap.add_argument("--out", default=None,
                    help="output directory (default bench-results/<date>, or <date>-cluster with --cluster)")
    ap.add_argument("--only", choices=["moldau", "kafka"], help="run one broker only (debugging)")
    ap.add_argument("--moldau-bin", required=True)
    ap.add_argument("--bench-bin", required=True)
    ap.add_argument("--report-only", action="store_true", help="re-render from an existing raw.json")
    ap.add_argument("--tcp-congestion", default=RUN_TCP_CONGESTION,
                    help="TCP congestion control for the run's connections, or 'system' to keep "
                         f"the machine's (default {RUN_TCP_CONGESTION}; see tcp_congestion_for_run)")
    args = ap.parse_args()
    if args.report_only:
        return run_mode(args)
    with hold_freed_memory(), tcp_congestion_for_run(args.tcp_congestion):
        return run_mode(args)


def run_mode(args) -> int:
    if args.out is None:
        suffix = ("-all" if args.all else "-cluster" if args.cluster else "-compaction" if args.compaction
                  else "-partitions" if args.partitions else "-restart" if args.restart
                  else "-transactions" if args.transactions else "-tls" if args.tls else "")
        args.out = str(REPO / "bench-results" / (dt.date.today().isoformat() + suffix))
    if args.cluster:
        return cluster.main(args)
    if args.compaction:
        return compaction.main(args)
    if args.partitions:
        return partitions.main(args)
    if args.restart:
        return restart.main(args)
    if args.transactions:
        return transactions.main(args)
    if args.tls:
        return tls.main(args)
    if args.all:
        return all_cases.main(args)
    return matrix.main(args)


if __name__ == "__main__":
    sys.exit(main())
