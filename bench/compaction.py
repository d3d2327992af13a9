"""Produce latency while a compacted partition is cleaned: Moldau vs Kafka.

Started by `bench/run.sh --compaction` (through run.py). One broker at a time,
fresh each repetition, order alternating; both with their default cleaner
settings (`log.cleaner.backoff.ms` 15 s, no I/O limit). For each:

1. a compacted topic (1 partition, `segment.bytes` 16 MiB,
   `min.compaction.lag.ms` one day so nothing is cleanable yet) is filled with
   FILL MiB of 1000-byte records over KEYS keys (acks=1, as fast as possible),
   and the fill's dirty pages are written back (`sync`, untimed): left to the
   kernel, that writeback starts ~30 s later (its dirty expiry), inside the
   cleaning window, and would be counted against the cleaner;
2. baseline: a paced producer (RATE records/s, one record per request,
   linger.ms=0, acks=1, the same keys) for SECONDS: produce latency p50/p99;
3. cleaning: `min.compaction.lag.ms` set to 0 with Kafka's `kafka-configs`,
   and at once the same paced producer for WINDOW seconds while the script
   watches the partition directory every 50 ms: a pass is in progress
   while Moldau's `cleaner-staging/` or Kafka's `*.cleaned` / `*.swap` files
   exist. The latency percentiles of the records *sent while a pass was in
   progress* are compared with the baseline's. (Kafka's files appear only
   once its cleaner has built the key map, so Kafka's window leaves out that
   first, read-only phase; Moldau's includes it.)

The issue's target: Moldau's p99 while cleaning at most 1.5x its p99 without.
Results: bench-results/<date>-compaction/results.{json,md}.
"""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import threading
import time
from pathlib import Path

from common import (KAFKA_DIST, BenchRunner, cpu_jiffies, dir_bytes, log, proc_status_kib, repetition, run_reps,
                    steal_pct, write_back_dirty_pages)

TOPIC = "compacted"
MODES = {
    "quick": {"fill_mib": 256, "keys": 20_000, "rate": 1000, "seconds": 15, "window": 60},
    "full": {"fill_mib": 1024, "keys": 100_000, "rate": 1000, "seconds": 30, "window": 120},
}
SIZE = 1000


def percentile(sorted_us: list[int], p: float) -> float | None:
    if not sorted_us:
        return None
    rank = max(1, min(len(sorted_us), math.ceil(p / 100.0 * len(sorted_us))))
    return sorted_us[rank - 1] / 1000.0


def samples(path: Path) -> list[tuple[float, int]]:
    out = []
    for line in path.read_text().splitlines():
        t, us = line.split()
        out.append((float(t), int(us)))
    return out


def intervals(seen_ms: list[float], gap_ms: float = 200.0) -> list[tuple[float, float]]:
    """The observation times (50 ms apart while a pass runs) merged into
    the passes they saw: `(first, last)` each, widened by one poll."""
    out: list[list[float]] = []
    for t in seen_ms:
        if out and t - out[-1][1] <= gap_ms:
            out[-1][1] = t
        else:
            out.append([t, t])
    return [(a - 50.0, b + 50.0) for a, b in out]


def partition_dir(datadir: Path) -> Path | None:
    found = [p for p in datadir.rglob(f"{TOPIC}-0") if p.is_dir()]
    return found[0] if found else None


def cleaning(part: Path) -> bool:
    if (part / "cleaner-staging").exists():
        return True
    return any(f.name.endswith((".cleaned", ".swap")) for f in part.iterdir())


class Runner(BenchRunner):
    def __init__(self, args):
        super().__init__(args, MODES, size=SIZE)

    def alter_lag(self, bootstrap: str) -> None:
        cmd = ["java", "-Xmx256m", f"-Dlog4j2.configurationFile={KAFKA_DIST / 'tools-log4j2.properties'}",
               "-cp", str(KAFKA_DIST / "jars" / "*"), "org.apache.kafka.tools.ConfigCommand",
               "--bootstrap-server", bootstrap, "--alter", "--entity-type", "topics",
               "--entity-name", TOPIC, "--add-config", "min.compaction.lag.ms=0"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"kafka-configs: {p.stderr.strip()[-400:]}")

    def paced(self, bootstrap: str, seconds: float, out: Path) -> list:
        m = self.mode
        return ["produce", "--bootstrap", bootstrap, "--topic", TOPIC, "--size", str(SIZE),
                "--keys", str(m["keys"]), "--rate", str(m["rate"]), "--linger-ms", "0",
                "--count", str(int(m["rate"] * seconds) + 1), "--max-seconds", str(seconds),
                "--samples-out", str(out)]

    def run_broker(self, broker, rep: int) -> None:
        m = self.mode
        broker.start()
        bootstrap = f"127.0.0.1:{broker.port}"
        row = {"broker": broker.name, "rep": rep}
        with repetition(self, broker, rep, row):
            self.tool("create-topic", "--bootstrap", bootstrap, "--topic", TOPIC,
                      "--config", "cleanup.policy=compact", "--config", "segment.bytes=16777216",
                      "--config", "min.compaction.lag.ms=86400000", timeout=60)
            fill = m["fill_mib"] * (1 << 20) // SIZE
            row["fill"] = self.tool("produce", "--bootstrap", bootstrap, "--topic", TOPIC,
                                    "--size", str(SIZE), "--keys", str(m["keys"]),
                                    "--count", str(fill), "--max-seconds", "600", timeout=700)
            part = partition_dir(broker.datadir)
            if part is None:
                raise RuntimeError(f"no {TOPIC}-0 under {broker.datadir}")
            row["bytes_before"] = dir_bytes(part)
            # the fill's writeback (untimed) happens here, not ~30 s later
            # (the kernel's dirty expiry) in the middle of the cleaning window
            row["dirty_mib_written_back_before"] = write_back_dirty_pages()
            steal_at = cpu_jiffies()
            base = self.tool(*self.paced(bootstrap, m["seconds"], self.out / "base.txt"),
                             timeout=m["seconds"] + 120)
            row["baseline"] = {k: base[k] for k in ("acked", "lat_p50_ms", "lat_p99_ms", "lat_max_ms")}
            row["baseline"]["steal_pct"] = steal_pct(steal_at, steal_at := cpu_jiffies())
            self.alter_lag(bootstrap)
            during_file = self.out / "during.txt"
            result = {}
            producer = threading.Thread(target=lambda: result.update(self.tool(
                *self.paced(bootstrap, m["window"], during_file), timeout=m["window"] + 120)))
            producer.start()
            seen = []
            while producer.is_alive():
                if cleaning(part):
                    seen.append(time.time() * 1e3)
                time.sleep(0.05)
            producer.join()
            steal_during = steal_pct(steal_at, cpu_jiffies())
            if not seen:
                raise RuntimeError(f"no clean observed within {m['window']} s")
            passes = intervals(seen)
            window = sorted(us for t, us in samples(during_file)
                            if any(a <= t <= b for a, b in passes))
            row["cleaning_passes"] = len(passes)
            row["cleaning_seconds"] = sum(b - a for a, b in passes) / 1e3
            row["during"] = {"acked_in_window": len(window), "lat_p50_ms": percentile(window, 50),
                             "lat_p99_ms": percentile(window, 99),
                             "lat_max_ms": window[-1] / 1000.0 if window else None,
                             # over the whole paced run, passes and the time between them
                             "steal_pct": steal_during}
            row["bytes_after"] = dir_bytes(part)
            row["p99_ratio"] = (row["during"]["lat_p99_ms"] / base["lat_p99_ms"]
                                if row["during"]["lat_p99_ms"] and base["lat_p99_ms"] else None)
            row["peak_rss_kib"] = proc_status_kib(broker.pid, "VmHWM")
            log(f"  {broker.name}: baseline p99 {base['lat_p99_ms']:.2f} ms, while cleaning "
                f"({row['cleaning_passes']} passes, {row['cleaning_seconds']:.1f} s, {len(window)} records) p99 "
                f"{row['during']['lat_p99_ms']} ms; {row['bytes_before'] >> 20} -> {row['bytes_after'] >> 20} MiB; "
                f"steal {row['baseline']['steal_pct']}% / {steal_during}%")

    def report(self) -> None:
        def med(name, key, sub=None):
            vals = [r[key].get(sub) if sub else r[key] for r in self.raw["runs"]
                    if r["broker"] == name and "error" not in r]
            vals = [v for v in vals if v is not None]
            return statistics.median(vals) if vals else None
        rows = []
        for label, key, sub in [("produce p99 without cleaning (ms)", "baseline", "lat_p99_ms"),
                                ("produce p99 while cleaning (ms)", "during", "lat_p99_ms"),
                                ("p99 while cleaning / p99 without", "p99_ratio", None),
                                ("cleaning took (s)", "cleaning_seconds", None),
                                ("CPU stolen by the hypervisor without cleaning (%)", "baseline", "steal_pct"),
                                ("CPU stolen by the hypervisor, cleaning run (%)", "during", "steal_pct"),
                                ("peak RSS (MiB)", "peak_rss_kib", None)]:
            mo, ka = med("moldau", key, sub), med("kafka", key, sub)
            if key == "peak_rss_kib":
                mo, ka = (mo / 1024 if mo else None), (ka / 1024 if ka else None)
            ratio = f"{mo / ka:.3g}x" if mo and ka and "stolen" not in label else "-"
            rows.append(f"| {label} | {mo if mo is None else round(mo, 2)} | {ka if ka is None else round(ka, 2)} | {ratio} |")
        m = self.mode
        md = [f"# Produce latency while a compacted partition is cleaned ({self.raw['mode']})", "",
              f"{m['fill_mib']} MiB of {SIZE}-byte records over {m['keys']} keys in one compacted partition; "
              f"paced producer {m['rate']} records/s (acks=1, linger.ms=0); medians of {self.args.reps} "
              f"repetitions, started {self.raw['started']}.", "",
              "| measure | Moldau | Kafka | Moldau ÷ Kafka |", "| --- | --- | --- | --- |", *rows, ""]
        if self.raw["errors"]:
            md += ["Errors:", *[f"- {e}" for e in self.raw["errors"]], ""]
        (self.out / "results.md").write_text("\n".join(md))
        (self.out / "results.json").write_text(json.dumps(self.raw, indent=1))


def main(args) -> int:
    args.reps = args.reps or 1
    return run_reps(Runner(args), tidy=False)
