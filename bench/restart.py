"""Time to ready after a restart: Moldau vs Kafka on one broker.

Started by `bench/run.sh --restart` (through run.py). One broker at a time,
fresh each repetition, order alternating (common.interleaved). For each, one
topic of 1,000 partitions (replication factor 1) and two data sizes in turn,
SMALL then LARGE (100 MiB then 1 GiB with --quick; 1 GiB then 10 GiB without):

1. fill: 10 producer connections write 1 KiB records spread over all
   partitions (acks=1, linger.ms=5) until the topic holds the stage's size;
2. unclean: kill -9 right after the fill (the records since the last clean
   stop are in the page cache, not flushed by either broker: both flush only
   on segment roll and shutdown by default), start it again, time to ready;
3. 1,000 records more, one per partition, so every partition has something
   to flush, then clean: SIGTERM, time until the process exits ("stop";
   bounded, then SIGKILL and an error), start it again, time to ready.

"Ready", the same for both brokers from the client side: `moldau-bench
wait-ready`, started with the broker, returns once one ListOffsets (latest)
answers without error for every partition; the time is from spawning the
broker process to that answer. Beside it each broker's own signal: Moldau's
HTTP `/readyz` answering 200, Kafka's "Kafka Server started" in its log.
Moldau's recovery counters (`moldau_log_recovery_*` on /metrics) and
Kafka's "Loaded N logs in T ms" and count of "Recovering unflushed segment"
lines show how much each start re-read. The sum of the end offsets at ready
is checked against the records acknowledged (nothing lost by kill -9).

Kafka is started by e2e/clients/kafka-dist/kafka-up.sh in the foreground
(the script execs the JVM: its start is part of the time, a few ms), Moldau
as common.py starts it; each start on new loopback ports, the same data
directory. Every process started here is stopped and its data deleted at
the end, on errors and interrupts too.

Results: bench-results/<date>-restart/results.{md,json} (raw.json as taken).
For development only, MOLDAU_BENCH_PARTITIONS=N and MOLDAU_BENCH_RESTART_MIB=
SMALL,LARGE change the topic and the sizes.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import partitions
import report
from common import (KAFKA_DIST, BenchRunner, Moldau, free_port, log, proc_status_kib, repetition, run_reps, spawn,
                    stop_all)

TOPIC = "restart"
PARTITIONS = partitions.PARTITIONS
PRODUCERS = partitions.PRODUCERS
SIZE = 1024
MODES = {
    "quick": {"sizes_mib": [100, 1024], "fill_seconds": 900.0, "ready_seconds": 600.0,
              "stop_seconds": 300.0},
    "full": {"sizes_mib": [1024, 10240], "fill_seconds": 3600.0, "ready_seconds": 1200.0,
             "stop_seconds": 600.0},
}
if os.environ.get("MOLDAU_BENCH_RESTART_MIB"):
    for _m in MODES.values():
        _m["sizes_mib"] = [int(x) for x in os.environ["MOLDAU_BENCH_RESTART_MIB"].split(",")]


class RestartableMoldau(Moldau):
    """common.py's Moldau, started again on its data directory, killed or
    stopped with a timed SIGTERM."""

    def server_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/readyz", timeout=1) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def recovery(self) -> dict:
        """The last start's `moldau_log_recovery_*` and snapshot counters."""
        out = {}
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError as e:
            return {"error": str(e)}
        for line in text.splitlines():
            m = re.match(r"moldau_(log_recovery_\w+|log_producer_snapshots_loaded\w*) (\S+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out


class RestartableKafka:
    """A single Kafka node by kafka-up.sh in the foreground (the script
    execs the JVM, so the child's pid is the broker's)."""

    name = "kafka"

    def __init__(self, datadir: Path):
        self.datadir = datadir
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.starts = 0
        self._started_seen = 0
        self._log_offset = 0

    @property
    def pid(self) -> int:
        assert self.proc
        return self.proc.pid

    @property
    def logfile(self) -> Path:
        return self.datadir / f"start-{self.starts}.out"

    def spawn(self) -> None:
        self.port = free_port()
        self.starts += 1
        self._log_offset = 0
        self.datadir.mkdir(parents=True, exist_ok=True)
        self.proc = spawn([str(KAFKA_DIST / "kafka-up.sh"), str(self.port), str(self.datadir)],
                           self.logfile)

    def start(self) -> None:
        self.spawn()
        deadline = time.monotonic() + 240
        while not self.server_ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited with {self.proc.returncode} (see {self.logfile})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kafka not started after 240 s (see {self.logfile})")
            time.sleep(0.2)

    def server_ready(self) -> bool:
        """"Kafka Server started" in this start's log (read on from where
        the last call stopped: the log of 1,000 partitions is long)."""
        if self._started_seen == self.starts:
            return True
        try:
            with open(self.logfile, "rb") as f:
                f.seek(max(0, self._log_offset - 64))
                chunk = f.read()
                self._log_offset = f.tell()
        except OSError:
            return False
        if b"Kafka Server started" in chunk:
            self._started_seen = self.starts
        return self._started_seen == self.starts

    def recovery(self) -> dict:
        text = self.logfile.read_text(errors="replace")
        out = {"recovering_unflushed_segment_lines": text.count("Recovering unflushed segment")}
        m = re.search(r"Loaded (\d+) logs in (\d+)ms", text)
        if m:
            out["loaded_logs"], out["load_ms"] = int(m.group(1)), int(m.group(2))
        return out

    def stop(self) -> None:
        if self.proc:
            stop_all([self.proc], timeout=120)


def kill9(broker) -> None:
    broker.proc.kill()
    broker.proc.wait(60)


def sigterm(broker, timeout: float) -> float:
    """SIGTERM, then seconds until the process exited; SIGKILL and an
    error past `timeout`."""
    t0 = time.monotonic()
    broker.proc.send_signal(signal.SIGTERM)
    try:
        broker.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill9(broker)
        raise RuntimeError(f"{broker.name} still running {timeout:.0f} s after SIGTERM: killed") from None
    return time.monotonic() - t0


class Runner(BenchRunner):
    def __init__(self, args):
        super().__init__(args, MODES, kind="restart", partitions=PARTITIONS, producers=PRODUCERS, size=SIZE)

    def produce(self, broker, records: int, producers: int) -> dict:
        secs = self.mode["fill_seconds"]
        return self.tool("produce", "--bootstrap", f"127.0.0.1:{broker.port}", "--topic", TOPIC,
                         "--producers", str(producers), "--partitions", str(PARTITIONS),
                         "--size", str(SIZE), "--acks", "1", "--linger-ms", "5",
                         "--count", str(records), "--max-seconds", str(secs), timeout=secs + 180)

    def timed_start(self, broker, acked: int) -> dict:
        """Starts the broker on its data directory with `wait-ready` beside
        it; seconds from the spawn to the client's ready and to the broker's
        own signal."""
        limit = self.mode["ready_seconds"]
        t_spawn = time.time()
        mono0 = time.monotonic()
        broker.spawn()
        out = broker.datadir.parent / f"{broker.datadir.name}-wait-ready.out"
        waiter = spawn([str(self.bench), "wait-ready", "--bootstrap", f"127.0.0.1:{broker.port}",
                         "--topic", TOPIC, "--partitions", str(PARTITIONS), "--max-seconds", str(limit)], out)
        try:
            server_s = None
            while waiter.poll() is None or server_s is None:
                if server_s is None and broker.server_ready():
                    server_s = time.monotonic() - mono0
                if broker.proc.poll() is not None:
                    raise RuntimeError(f"{broker.name} exited with {broker.proc.returncode} while starting "
                                       f"(see {broker.logfile})")
                if time.monotonic() - mono0 > limit + 30:
                    raise RuntimeError(f"{broker.name}: not ready after {limit:.0f} s")
                time.sleep(0.02)
        finally:
            stop_all([waiter], timeout=5)
        text = out.read_text()
        line = next((ln for ln in reversed(text.splitlines()) if ln.startswith("{")), None)
        if waiter.returncode != 0 or line is None:
            raise RuntimeError(f"wait-ready: exit {waiter.returncode}: {text.strip()[-400:]}")
        result = json.loads(line)
        return {"client_ready_s": result["ready_unix"] - t_spawn, "server_ready_s": server_s,
                "end_offsets_sum": result["end_offsets_sum"], "records_acked": acked,
                "recovery": broker.recovery()}

    def run_broker(self, broker, rep: int) -> None:
        m = self.mode
        row = {"broker": broker.name, "rep": rep, "stages": []}
        acked = 0
        with repetition(self, broker, rep, row):
            broker.start()
            self.tool("create-topic", "--bootstrap", f"127.0.0.1:{broker.port}", "--topic", TOPIC,
                      "--partitions", str(PARTITIONS), timeout=180)
            for mib in m["sizes_mib"]:
                stage = {"size_mib": mib}
                row["stages"].append(stage)
                want = mib * (1 << 20) // SIZE
                fill = self.produce(broker, want - acked, PRODUCERS)
                acked += fill["acked"]
                stage["fill_mb_per_sec"] = fill["mb_per_sec"]
                if acked < want:
                    raise RuntimeError(f"fill stopped at {acked} of {want} records")
                stage["data_dir_allocated_bytes"] = partitions.disk_bytes(broker.datadir)
                stage["peak_rss_kib_before_kill"] = proc_status_kib(broker.pid, "VmHWM")
                kill9(broker)
                stage["unclean"] = self.timed_start(broker, acked)
                acked += self.produce(broker, PARTITIONS, 1)["acked"]
                stage["stop_s"] = sigterm(broker, m["stop_seconds"])
                stage["clean"] = self.timed_start(broker, acked)
                for kind in ("unclean", "clean"):
                    s = stage[kind]
                    if s["end_offsets_sum"] != s["records_acked"]:
                        self.raw["errors"].append(f"rep {rep} {broker.name} {mib} MiB {kind}: end offsets "
                                                  f"sum {s['end_offsets_sum']}, {s['records_acked']} records "
                                                  "acknowledged")
                u, c = stage["unclean"], stage["clean"]
                log(f"  {broker.name} {mib} MiB: kill -9 -> ready {u['client_ready_s']:.2f} s "
                    f"(own signal {u['server_ready_s']:.2f} s); SIGTERM stop {stage['stop_s']:.2f} s, "
                    f"start -> ready {c['client_ready_s']:.2f} s (own signal {c['server_ready_s']:.2f} s); "
                    f"recovery {u['recovery']} / {c['recovery']}")
                self.save()

    def report(self) -> None:
        raw = self.raw
        load = raw["load"]
        # One pseudo-run per (run, stage) so partitions.table takes the medians.
        md = [f"# Time to ready after a restart, {load['partitions']} partitions ({raw['mode']})", "",
              f"One broker of each kind, one topic of {load['partitions']} partitions (replication factor 1), "
              f"filled with {load['size']}-byte records by {load['producers']} producers to each size in turn. "
              "Unclean: kill -9 right after the fill, then start. Clean: 1 record more per partition, SIGTERM, "
              "wait for the exit (stop), then start. Ready (client): from spawning the broker until one "
              "ListOffsets answers for every partition (`moldau-bench wait-ready`, the same for both). "
              "Own signal: Moldau's `/readyz` 200, Kafka's \"Kafka Server started\" log line. "
              f"Medians of {raw['reps']} interleaved repetitions (range in brackets), started {raw['started']}; "
              f"Moldau at {raw['machine']['git']}, {raw['machine']['cpus']} CPUs, load average "
              f"{partitions.fmt_load(raw['machine'])}." + report.run_settings_line(raw["machine"]), ""]
        for mib in load["sizes_mib"]:
            runs = []
            for r in raw["runs"]:
                for s in r.get("stages", []):
                    if s["size_mib"] == mib and "unclean" in s and "clean" in s:
                        runs.append({"broker": r["broker"], **s})
            md += [f"## {mib:,} MiB", ""]
            md += partitions.table(runs, [
                ("kill -9, start → ready, client (s)", "unclean.client_ready_s", 1),
                ("kill -9, start → own signal (s)", "unclean.server_ready_s", 1),
                ("SIGTERM → exit (s)", "stop_s", 1),
                ("clean, start → ready, client (s)", "clean.client_ready_s", 1),
                ("clean, start → own signal (s)", "clean.server_ready_s", 1),
                ("Moldau: MiB re-read after kill -9", "unclean.recovery.log_recovery_bytes_read_total",
                 1 / (1 << 20)),
                ("Moldau: MiB re-read after SIGTERM", "clean.recovery.log_recovery_bytes_read_total",
                 1 / (1 << 20)),
                ("Kafka: segments recovered after kill -9", "unclean.recovery.recovering_unflushed_segment_lines",
                 1),
                ("Kafka: segments recovered after SIGTERM", "clean.recovery.recovering_unflushed_segment_lines", 1),
                ("fill throughput (MB/s)", "fill_mb_per_sec", 1),
                ("data directory, allocated (MiB)", "data_dir_allocated_bytes", 1 / (1 << 20)),
                ("peak RSS before the kill (MiB)", "peak_rss_kib_before_kill", 1 / 1024),
            ])
            md.append("")
        if raw["errors"]:
            md += ["Errors:", *[f"- {e}" for e in raw["errors"]], ""]
        (self.out / "results.md").write_text("\n".join(md))
        (self.out / "results.json").write_text(json.dumps(raw, indent=1))


def main(args) -> int:
    args.reps = args.reps or 3
    return run_reps(Runner(args), moldau=RestartableMoldau, kafka=RestartableKafka)
