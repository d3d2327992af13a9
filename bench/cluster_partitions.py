#!/usr/bin/env python3
"""Cost of many partitions in a three-broker cluster at a low, fixed rate.

    bench/.venv/bin/python bench/cluster_partitions.py --bins DIR [--kafka]
        [--partitions 1000] [--rate 500] [--seconds 10] [--trials 2]

Three brokers (bench/cluster.py's clusters: Moldau `--cluster dir`, or Kafka
with `--kafka`), one topic of `--partitions` partitions, 3 replicas,
min.insync.replicas 2; after the brokers have been idle for 10 s (their idle
CPU is reported), `moldau-bench produce` sends `--rate` 100 B records per
second (acks=all, linger.ms 0, one record per request) spread over all
partitions, for `--seconds`, `--trials` times. Each trial reports the
producer's throughput and latency and the CPU-seconds of the three broker
processes together: at a low rate that CPU is what the cluster spends per
partition and per fetch, not per byte. Every address is on 127.0.0.1; the
brokers and their data are removed at the end. `DIR` holds `moldau-broker`
and `moldau-bench` (a release build). A development tool, not part of
`bench/run.sh` yet: its results are in the README's replication section.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import cluster
from common import (RUN_TCP_CONGESTION, call_tool, drop_page_cache, hold_freed_memory, proc_cpu_seconds,
                    tcp_congestion_for_run)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bins", required=True, type=Path)
    ap.add_argument("--kafka", action="store_true", help="a Kafka cluster instead of Moldau")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=500, help="records per second")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=2)
    args = ap.parse_args()
    bench = args.bins / "moldau-bench"

    def tool(*argv: str, timeout: float = 300) -> dict:
        return call_tool(bench, *argv, timeout=timeout)

    work = Path(tempfile.mkdtemp(prefix="moldau-cluster-partitions-"))
    with hold_freed_memory(), tcp_congestion_for_run(RUN_TCP_CONGESTION):
        brokers = (cluster.KafkaCluster(work) if args.kafka
                   else cluster.MoldauCluster(args.bins / "moldau-broker", work))
        try:
            brokers.start()
            bootstrap = brokers.bootstrap
            tool("wait-cluster", "--bootstrap", bootstrap, "--brokers", "3", "--max-seconds", "120",
                 timeout=150)
            tool("create-topic", "--bootstrap", bootstrap, "--topic", "many",
                 "--partitions", str(args.partitions), "--replication-factor", "3",
                 "--config", "min.insync.replicas=2", timeout=120)

            def cpu() -> float:
                return sum(proc_cpu_seconds(pid) or 0.0 for pid in brokers.pids)

            time.sleep(5)
            c0 = cpu()
            time.sleep(10)
            print(f"{brokers.name}: idle {(cpu() - c0) / 10:.3f} CPU-s per second (3 brokers)",
                  flush=True)
            for trial in range(args.trials):
                drop_page_cache()
                c0 = cpu()
                r = tool("produce", "--bootstrap", bootstrap, "--topic", "many", "--size", "100",
                         "--acks", "all", "--linger-ms", "0", "--rate", str(args.rate),
                         "--partitions", str(args.partitions),
                         "--count", str(args.rate * args.seconds),
                         "--max-seconds", str(args.seconds), timeout=args.seconds + 120)
                used = cpu() - c0
                print(f"{brokers.name} trial {trial}: {r['acked']} records acknowledged, "
                      f"{r['records_per_sec']:.0f} records/s, p50 {r['lat_p50_ms']:.1f} ms, "
                      f"p99 {r['lat_p99_ms']:.1f} ms, brokers {used:.2f} CPU-s "
                      f"({1e3 * used / max(r['acked'], 1):.2f} CPU-ms per record)", flush=True)
        finally:
            brokers.stop()
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
