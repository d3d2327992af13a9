"""Many partitions, many connections: Moldau vs Kafka on one broker.

Started by `bench/run.sh --partitions` (through run.py). One broker at a time,
fresh each repetition, order alternating (common.interleaved). For each:

1. one topic of PARTITIONS partitions (replication factor 1) is created (the
   time CreateTopics takes until every partition has a leader is reported);
2. warm-up: the load below for WARMUP seconds, not recorded (a JVM's JIT and
   every broker's caches warm), into the same topic;
3. produce: 10 producer clients (`moldau-bench produce --producers 10`, one
   connection each, in one process), 1 KiB records, acks=1, linger.ms=5,
   each producer sending to all partitions in turn (so every Produce request
   carries batches for many partitions), until RECORDS or SECONDS; each
   producer has the client settings of every other bench producer (64 MiB
   buffer: up to 640 MiB queued, so the latency at this full load is mostly
   time in the clients' queues; splitting one 64 MiB among the ten halved
   both brokers' throughput in a trial with 200 partitions);
4. consume: 10 consumer clients (`moldau-bench consume --consumers 10`, one
   connection each) read every partition from the beginning, consumer k the
   partitions p with p mod 10 = k, everything the warm-up and the produce
   step wrote; then the wire load generator reads it all again the same way
   (`moldau-bench wire-consume --consumers 10`: full fetches, batches
   CRC-checked, no per-record client work), because on 2 cores the ten
   librdkafka consumers take most of the CPU and cap both brokers alike;
5. the broker's peak RSS (VmHWM) and CPU seconds.

Results: bench-results/<date>-partitions/results.{md,json} (raw.json as
taken). For development only, MOLDAU_BENCH_PARTITIONS=N uses N partitions
instead of 1,000.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from common import BenchRunner, dig, log, median, proc_cpu_seconds, proc_status_kib, repetition, run_reps
from report import client_ceiling, run_settings_line

TOPIC = "many"
PARTITIONS = int(os.environ.get("MOLDAU_BENCH_PARTITIONS", "1000"))
PRODUCERS = 10
CONSUMERS = 10
SIZE = 1024
ACKS = "1"
LINGER_MS = 5
MODES = {
    "quick": {"records": 1_000_000, "seconds": 15.0, "warmup": 3.0, "consume_seconds": 90.0},
    "full": {"records": 4_000_000, "seconds": 45.0, "warmup": 5.0, "consume_seconds": 240.0},
}


def disk_bytes(path: Path) -> int:
    """Bytes allocated under `path` (as du: Kafka's preallocated sparse
    index files count for what they use, not their length)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def fmt(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}g}" if abs(v) < 10 ** digits else f"{v:,.0f}"


def table(runs: list[dict], measures: list[tuple[str, str, float]]) -> list[str]:
    """The report's table: per measure (label, path in a run, scale) the
    median over the runs without error of each broker, the spread, and
    Moldau ÷ Kafka."""
    out = ["| measure | Moldau | Kafka | Moldau ÷ Kafka |", "| --- | --- | --- | --- |"]
    for label, path, scale in measures:
        cells, meds = [], []
        for name in ("moldau", "kafka"):
            vals = [dig(r, path) for r in runs if r["broker"] == name and "error" not in r]
            vals = [v * scale for v in vals if v is not None]
            m = median(vals)
            meds.append(m)
            spread = f" ({fmt(min(vals))}–{fmt(max(vals))})" if len(vals) > 1 else ""
            cells.append(fmt(m) + spread)
        mo, ka = meds
        ratio = f"{mo / ka:.3g}×" if mo is not None and ka else "-"
        out.append(f"| {label} | {cells[0]} | {cells[1]} | {ratio} |")
    return out


class Runner(BenchRunner):
    def __init__(self, args):
        super().__init__(args, MODES, kind="partitions", partitions=PARTITIONS, producers=PRODUCERS,
                         consumers=CONSUMERS, size=SIZE, acks=ACKS, linger_ms=LINGER_MS)

    def produce(self, bootstrap: str, records: int, seconds: float) -> dict:
        return self.tool("produce", "--bootstrap", bootstrap, "--topic", TOPIC,
                         "--producers", str(PRODUCERS), "--partitions", str(PARTITIONS),
                         "--size", str(SIZE), "--acks", ACKS, "--linger-ms", str(LINGER_MS),
                         "--count", str(records), "--max-seconds", str(seconds),
                         timeout=seconds + 180)

    def run_broker(self, broker, rep: int) -> None:
        m = self.mode
        row = {"broker": broker.name, "rep": rep}
        with repetition(self, broker, rep, row):
            t0 = time.monotonic()
            broker.start()
            row["startup_seconds"] = time.monotonic() - t0
            bootstrap = f"127.0.0.1:{broker.port}"
            cpu0 = proc_cpu_seconds(broker.pid)
            t0 = time.monotonic()
            self.tool("create-topic", "--bootstrap", bootstrap, "--topic", TOPIC,
                      "--partitions", str(PARTITIONS), timeout=180)
            row["create_topic_seconds"] = time.monotonic() - t0
            warm = self.produce(bootstrap, m["records"], m["warmup"])
            row["warmup_acked"] = warm["acked"]
            cpu1 = proc_cpu_seconds(broker.pid)
            row["produce"] = self.produce(bootstrap, m["records"], m["seconds"])
            cpu2 = proc_cpu_seconds(broker.pid)
            total = warm["acked"] + row["produce"]["acked"]
            row["consume"] = self.tool("consume", "--bootstrap", bootstrap, "--topic", TOPIC,
                                       "--consumers", str(CONSUMERS), "--partitions", str(PARTITIONS),
                                       "--count", str(total), "--max-seconds", str(m["consume_seconds"]),
                                       timeout=m["consume_seconds"] + 120)
            cpu3 = proc_cpu_seconds(broker.pid)
            row["wire_consume"] = self.tool("wire-consume", "--bootstrap", bootstrap, "--topic", TOPIC,
                                            "--consumers", str(CONSUMERS), "--partitions", str(PARTITIONS),
                                            "--size", str(SIZE), "--count", str(total),
                                            "--max-seconds", str(m["consume_seconds"]),
                                            timeout=m["consume_seconds"] + 120)
            cpu4 = proc_cpu_seconds(broker.pid)
            if None not in (cpu0, cpu1, cpu2, cpu3, cpu4):
                row["cpu_produce_s"] = cpu2 - cpu1
                row["cpu_consume_s"] = cpu3 - cpu2
                row["cpu_wire_consume_s"] = cpu4 - cpu3
                row["cpu_total_s"] = cpu4 - cpu0
            row["peak_rss_kib"] = proc_status_kib(broker.pid, "VmHWM")
            row["data_dir_allocated_bytes"] = disk_bytes(broker.datadir)
            p, c, w = row["produce"], row["consume"], row["wire_consume"]
            log(f"  {broker.name}: {PARTITIONS} partitions created in {row['create_topic_seconds']:.1f} s; "
                f"produce {p['mb_per_sec']:.1f} MB/s (p99 {p['lat_p99_ms']:.0f} ms), "
                f"consume {c['mb_per_sec']:.1f} MB/s ({c['records']} records), "
                f"wire consume {w['mb_per_sec']:.1f} MB/s ({w['records']} records), "
                f"peak RSS {(row['peak_rss_kib'] or 0) / 1024:.0f} MiB")

    def report(self) -> None:
        raw = self.raw
        load = raw["load"]
        rows = table(raw["runs"], [
            ("produce throughput (MB/s)", "produce.mb_per_sec", 1),
            ("consume throughput (MB/s)", "consume.mb_per_sec", 1),
            ("consume throughput, wire load generator (MB/s)", "wire_consume.mb_per_sec", 1),
            ("peak RSS (MiB)", "peak_rss_kib", 1 / 1024),
            ("produce latency p50, full load: mostly queued in the clients (ms)", "produce.lat_p50_ms", 1),
            ("produce latency p99, full load (ms)", "produce.lat_p99_ms", 1),
            ("consume: first record after (s)", "consume.first_record_after_s", 1),
            ("consume: the busiest client thread's share of the read",
             "consume.busiest_thread.busy", 1),
            ("broker CPU while producing (s)", "cpu_produce_s", 1),
            ("broker CPU while consuming (s)", "cpu_consume_s", 1),
            ("broker CPU while consuming, wire (s)", "cpu_wire_consume_s", 1),
            (f"CreateTopics, {load['partitions']} partitions (s)", "create_topic_seconds", 1),
            ("broker start until its port accepts (s)", "startup_seconds", 1),
        ])
        mach = raw["machine"]
        md = [f"# {load['partitions']} partitions, {load['producers']} producers, "
              f"{load['consumers']} consumers ({raw['mode']})", "",
              f"One broker of each kind, one topic of {load['partitions']} partitions (replication factor 1). "
              f"Produce: {load['producers']} producer connections, {load['size']}-byte records spread over all "
              f"partitions, acks={load['acks']}, linger.ms={load['linger_ms']}, up to {load['records']:,} "
              f"records or {load['seconds']:g} s (after an unrecorded {load['warmup']:g} s warm-up). "
              f"Consume: {load['consumers']} consumer connections, each assigned every "
              f"{load['consumers']}th partition from its log start offset (looked up, every consumer "
              f"connected, before any is assigned), reading everything written: librdkafka "
              f"consumers, then the same reads by the wire load generator (full fetches over "
              f"{load['consumers']} connections, the client's work per record left out, as in the matrix). "
              f"Medians of {raw['reps']} interleaved repetitions (range in brackets), started {raw['started']}; "
              f"Moldau at {mach['git']}, {mach['cpus']} CPUs, load average {fmt_load(mach)}."
              + run_settings_line(mach), "",
              *rows, ""]
        md += ceiling_section(raw["runs"], mach.get("cpus") or 1)
        if raw["errors"]:
            md += ["Errors:", *[f"- {e}" for e in raw["errors"]], ""]
        (self.out / "results.md").write_text("\n".join(md))
        (self.out / "results.json").write_text(json.dumps(raw, indent=1))


def ceiling(runs: list[dict], phase: str, cpus: int) -> dict | None:
    """The load generator's limit in `phase` (a run's "produce",
    "consume" or "wire_consume"): its CPU-seconds per GiB moved, measured
    against Moldau, the rate it could reach with all `cpus` cores to
    itself (report.client_ceiling, as the matrix's), Moldau's median rate
    as a share of that, and that rate over Kafka's median (the most any
    broker could show here)."""
    def med(name: str, f) -> float | None:
        return median([f(r[phase]) for r in runs
                       if r["broker"] == name and "error" not in r and isinstance(r.get(phase), dict)])
    per_gib = med("moldau", lambda p: p["client_cpu_s"] / (p["bytes"] / (1 << 30))
                  if p.get("client_cpu_s") and p.get("bytes") else None)
    limit = client_ceiling(cpus, {"median": per_gib})
    mo, ka = med("moldau", lambda p: p.get("mb_per_sec")), med("kafka", lambda p: p.get("mb_per_sec"))
    if limit is None or not mo:
        return None
    return {"cpu_s_per_gib": per_gib, "ceiling_mb_per_sec": limit, "moldau_share": mo / limit,
            "most_over_kafka": limit / ka if ka else None}


def ceiling_section(runs: list[dict], cpus: int) -> list[str]:
    """The report's "load generator's ceiling" table, as the matrix's:
    where the clients, not the brokers, set the rate."""
    out = ["## The load generator's ceiling", "",
           f"The client's CPU per GiB moved (user + system, measured against Moldau) gives the rate it could "
           f"reach with all {cpus} cores to itself; the broker under test shares those cores, so this bounds "
           f"any broker. \"Most ÷ Kafka\" is that ceiling over Kafka's median: the highest ratio any broker "
           f"could show here on this machine. The client's CPU is its whole process's (connecting, metadata) "
           f"while the rate is over the measured interval, so in a short read the ceiling is low and a share "
           f"above 100% is possible.", "",
           "| phase | client CPU per GiB (s) | ceiling (MB/s) | Moldau ÷ ceiling | most ÷ Kafka |",
           "| --- | --- | --- | --- | --- |"]
    for label, phase in (("produce (librdkafka)", "produce"), ("consume (librdkafka)", "consume"),
                         ("consume (wire)", "wire_consume")):
        c = ceiling(runs, phase, cpus)
        if c is None:
            out.append(f"| {label} | - | - | - | - |")
            continue
        most = f"{c['most_over_kafka']:.2f}×" if c["most_over_kafka"] else "-"
        out.append(f"| {label} | {c['cpu_s_per_gib']:.2f} | {fmt(c['ceiling_mb_per_sec'])} | "
                   f"{c['moldau_share']:.0%} | {most} |")
    return out + [""]


def fmt_load(machine: dict) -> str:
    start = machine.get("loadavg_start")
    end = machine.get("loadavg_end")
    s = f"{start[0]:.1f} at the start" if start else "?"
    return s + (f", {end[0]:.1f} at the end" if end else "")


def main(args) -> int:
    args.reps = args.reps or 3
    return run_reps(Runner(args))
