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
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KAFKA_DIST = REPO / "e2e" / "clients" / "kafka-dist"
CLK_TCK = os.sysconf("SC_CLK_TCK")
GIB = float(1 << 30)

SIZES = [100, 1024]
ACKS = ["1", "all"]
CODECS = ["none", "lz4"]

# Per-mode load sizes. Every load is bounded by a record count and by time.
MODES = {
    "quick": {
        "produce_count": {100: 5_000_000, 1024: 1_000_000},
        "produce_seconds": 3.0,
        "consume_seconds": 20.0,
        # The wire load generator (moldau-bench wire-produce/wire-consume):
        # about 2 GB per configuration, so that the faster client still
        # measures over a second or more.
        "wire_count": {100: 20_000_000, 1024: 2_000_000},
        "e2e_rate": 1000,
        "e2e_seconds": 1.5,
        "dd_mib": 256,
        "tcp_seconds": 2.0,
    },
    "full": {
        "produce_count": {100: 15_000_000, 1024: 2_000_000},
        "produce_seconds": 15.0,
        "consume_seconds": 60.0,
        "wire_count": {100: 30_000_000, 1024: 3_000_000},
        "e2e_rate": 2000,
        "e2e_seconds": 8.0,
        "dd_mib": 1024,
        "tcp_seconds": 5.0,
    },
}


def log(msg: str) -> None:
    print(f"[{dt.datetime.now(dt.timezone.utc):%H:%M:%S}] {msg}", flush=True)


@contextlib.contextmanager
def repetition(runner, broker, rep: int, row: dict):
    """One broker's repetition in a runner (`raw` with `runs` and `errors`,
    `save()`): an error is written into `row` and the run's errors and the
    run goes on to the next; whatever happens the broker is stopped, its data
    directory removed and `row` recorded and saved."""
    try:
        yield row
    except Exception as e:  # noqa: BLE001 - recorded, run goes on
        row["error"] = str(e)
        runner.raw["errors"].append(f"rep {rep} {broker.name}: {e}")
        log(f"  {broker.name}: ERROR {e}")
    finally:
        broker.stop()
        shutil.rmtree(broker.datadir, ignore_errors=True)
        runner.raw["runs"].append(row)
        runner.save()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port: int, timeout: float, proc_alive) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc_alive():
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def proc_cpu_seconds(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime/stime are fields 14/15
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_context_switches(pid: int) -> dict[int, dict[str, int]]:
    """Per thread of process `pid`, its voluntary and involuntary context
    switches so far (`/proc/PID/task/*/status`). Differences between two
    calls leave out the threads that exited in between (a few idle
    blocking-pool threads at most)."""
    out: dict[int, dict[str, int]] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            lines = (task / "status").read_text().splitlines()
        except OSError:
            continue
        counts = {}
        for line in lines:
            name, _, value = line.partition(":")
            if name in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                counts["voluntary" if name.startswith("vol") else "involuntary"] = int(value)
        out[int(task.name)] = counts
    return out


def cpu_jiffies() -> tuple[int, int]:
    """(steal, total) CPU time of the whole machine so far, in clock ticks
    (`/proc/stat`): steal is the time the hypervisor ran something else
    while this machine's vCPUs wanted to run."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return (0, 0)
    # user nice system idle iowait irq softirq steal (guest time is in user)
    return (fields[7] if len(fields) > 7 else 0, sum(fields[:8]))


def steal_pct(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Percentage of CPU time stolen by the hypervisor between two
    `cpu_jiffies()` readings: on a shared virtual machine, stalls of the
    whole machine that no broker causes."""
    total = after[1] - before[1]
    return round(100.0 * (after[0] - before[0]) / total, 1) if total > 0 else None


def kib_field(path: str, key: str) -> int | None:
    """The kB value of `key:` in a /proc file of that form (status,
    meminfo), or None."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def proc_status_kib(pid: int, key: str) -> int | None:
    return kib_field(f"/proc/{pid}/status", key)


def meminfo_kib(key: str) -> int | None:
    return kib_field("/proc/meminfo", key)


def write_back_dirty_pages() -> float | None:
    """Writes the page cache's dirty pages back (sync) and returns how many
    MiB there were. Called before each configuration of the matrix, so none
    runs beside the kernel's writeback of an earlier one's data: the matrix
    writes several GiB per broker and repetition, past the background
    writeback threshold (10% of memory), and without this the late
    configurations paid for the early ones' writes, the faster-writing
    broker most."""
    dirty = meminfo_kib("Dirty")
    os.sync()
    return None if dirty is None else dirty / 1024


RECYCLE_DIR = Path("/dev/shm")


def recycle_free_memory(mib: int = 2048) -> dict | None:
    """Writes `mib` MiB into a file on tmpfs and deletes it, so that the
    configuration that follows finds that much free memory just freed.

    On this machine kind (a VM that gets its memory from the host as it
    first touches it, and gives free memory back) a page the guest has not
    used lately costs the host a fault when it is next written: writing a
    new 2 GiB file ran at 606 MB/s, over the pages of a file just deleted
    at 5.1-11 GB/s (dd, bs=1M). A broker's produce writes every byte into
    new page cache pages, so without this, each configuration's produce
    rate was set by how many recently freed pages the one before it had
    left (a profile of Moldau at 1 KiB had 69% of its CPU in the page
    cache copy of `pwrite`; the same runs after a 2 GiB recycle went from
    250-280 to 460-1,030 MB/s, Kafka's from 390-410 to 390-480). Writing
    and freeing the memory first gives both brokers the same start, as on
    a machine in service whose memory is all in use. Not timed; returns
    what was done, or None when tmpfs or memory is short."""
    avail = meminfo_kib("MemAvailable")
    try:
        st = os.statvfs(RECYCLE_DIR)
    except OSError:
        return None
    room_mib = st.f_bavail * st.f_frsize // (1 << 20)
    mib = min(mib, room_mib - 256, (avail or 0) // 1024 // 4)
    if mib < 256:
        return None
    path = RECYCLE_DIR / f"moldau-bench-recycle-{os.getpid()}"
    chunk = b"\1" * (1 << 20)
    t0 = time.monotonic()
    try:
        with open(path, "wb") as f:
            for _ in range(mib):
                f.write(chunk)
    finally:
        path.unlink(missing_ok=True)
    return {"mib": mib, "seconds": round(time.monotonic() - t0, 2)}


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_page_cache() -> dict | None:
    """Writes dirty pages back and drops the clean page cache (`sync`, then
    1 into /proc/sys/vm/drop_caches), so that the load that follows writes
    into memory just freed, whatever ran before it; falls back to
    `recycle_free_memory` where the file is not writable (not root).

    Why: on this machine kind memory the guest has not written lately costs
    the host a fault at its next write (see `recycle_free_memory`), and a
    broker's produce copies every byte into new page cache pages. With the
    page cache of earlier loads kept, the copy into fresh pages grew slower
    the more the cache held: Moldau's 1 KiB produce from pre-encoded batches
    (`wire-produce`, 1.5 GB per trial, a 2 GiB recycle before each) took
    0.78, 2.10, 2.81, 3.17 CPU-s per GiB in four trials in a row, 90% of it
    kernel time in `copy_folio_from_iter_atomic`; with the cache dropped
    before each, 0.54-0.78, and Kafka's the same way (1.44-1.75). The
    records a configuration consumes are its own, written after the drop,
    so reads still come from the page cache. Not timed; returns what was
    dropped, or what the fallback did."""
    os.sync()
    cached = meminfo_kib("Cached")
    try:
        DROP_CACHES.write_text("1\n")
    except OSError:
        recycled = recycle_free_memory()
        return {"dropped": False, "recycled": recycled}
    after = meminfo_kib("Cached")
    freed = None if None in (cached, after) else max(cached - after, 0) // 1024
    return {"dropped": True, "cache_mib_freed": freed}


PAGE_REPORTING_DELAY = Path("/sys/module/page_reporting/parameters/min_free_ms")
FREED_MEMORY_HOLD_MS = 300_000


@contextlib.contextmanager
def kernel_setting_for_run(path: Path, value: str, env: str):
    """Writes `value` into the kernel parameter `path` for the run and
    restores what was there afterwards; records "before:value" in the
    environment variable `env` for the report (in the environment, not a
    module global: the modes' modules import this file as `run` while it
    runs as `__main__`). On a machine without the parameter, or not root,
    nothing changes and nothing is recorded."""
    before = None
    try:
        before = path.read_text().strip()
        path.write_text(value)
        os.environ[env] = f"{before}:{value}"
    except OSError:
        before = None
    try:
        yield
    finally:
        os.environ.pop(env, None)
        if before is not None:
            try:
                path.write_text(before)
            except OSError:
                pass


def hold_freed_memory():
    """For the run, keeps the guest from handing freed memory back to the
    host at once (free page reporting's `min_free_ms`, 0 on this machine
    kind, set to 300 s; restored afterwards), and records what was done in
    the environment for the report (`hold_record`).

    With a delay of 0 a page freed by one configuration (a deleted data
    directory, the tmpfs file of `recycle_free_memory`) is returned to the
    host within seconds, so the next configuration's writes pay a host
    fault per page again, by an amount that depends on what ran before and
    how long the broker took to start. Held for 300 s, freed memory stays
    backed as on a machine that is not a VM, for both brokers alike. On a
    machine without the parameter (or not root) nothing changes."""
    return kernel_setting_for_run(PAGE_REPORTING_DELAY, str(FREED_MEMORY_HOLD_MS), HOLD_ENV)


TCP_CONGESTION = Path("/proc/sys/net/ipv4/tcp_congestion_control")
TCP_CONGESTION_ENV = "MOLDAU_BENCH_TCP_CONGESTION"
RUN_TCP_CONGESTION = "cubic"


def tcp_congestion_for_run(name: str):
    """For the run, new TCP connections use the congestion control `name`
    (`net.ipv4.tcp_congestion_control`; restored afterwards), brokers and
    load generators alike; "system" keeps the machine's. Recorded for the
    report (`congestion_record`).

    Why cubic by default: this machine kind uses BBR with no `fq` qdisc, so
    every connection is paced by the kernel at BBR's estimate of its
    bandwidth, taken in the connection's first round trips. On loopback
    there is no bottleneck to estimate, and a fresh connection's estimate
    landed either near 175 Gbit/s or at 23-52 Gbit/s (`ss -tin` during
    single-connection fetches of 1 KiB records, 2 GB, six trials), a coin
    toss per connection; on the low side pacing timers cut one consumer's
    rate from 3.5-4.1 to 2.0-2.3 GB/s and doubled Moldau's CPU per byte.
    With cubic Moldau served 3.75-4.15 GB/s in eight trials of eight, and
    Kafka's single consumer was the same under either (1.3-2.1 GB/s): the
    setting takes a lottery out of the measurement. It is not neutral
    everywhere: Kafka's ten consumers of 1,000 partitions (--partitions)
    read 1.8 GB/s under cubic against 1.5 under BBR, Moldau's 1.9 either
    way."""
    if name == "system":
        return contextlib.nullcontext()
    return kernel_setting_for_run(TCP_CONGESTION, name, TCP_CONGESTION_ENV)


def setting_record(env: str) -> tuple[str, str] | None:
    """What `kernel_setting_for_run` recorded in `env`: (before, during)."""
    before, sep, now = os.environ.get(env, "").partition(":")
    return (before, now) if sep else None


def congestion_record() -> dict | None:
    """What `tcp_congestion_for_run` did in this process, for the report."""
    record = setting_record(TCP_CONGESTION_ENV)
    return {"before": record[0], "now": record[1]} if record else None


HOLD_ENV = "MOLDAU_BENCH_FREED_MEMORY_HOLD"


def hold_record() -> dict | None:
    """What `hold_freed_memory` did in this process, for the report."""
    record = setting_record(HOLD_ENV)
    try:
        return {"min_free_ms_before": int(record[0]), "min_free_ms": int(record[1])} if record else None
    except ValueError:
        return None


class Moldau:
    name = "moldau"
    flush_policy = ("no fsync per write: acknowledged = in the page cache "
                    "(log.flush.interval.messages/ms = Long.MAX, Moldau's default)")

    def __init__(self, binary: Path, datadir: Path):
        self.binary = binary
        self.datadir = datadir
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.http_port = 0

    @property
    def logfile(self) -> Path:
        return self.datadir.parent / f"{self.datadir.name}.log"

    def spawn(self) -> None:
        """Starts the process on new ports without waiting for it (restart.py
        starts it again on the same data directory and times it)."""
        self.port = free_port()
        self.http_port = free_port()
        self.datadir.mkdir(parents=True, exist_ok=True)
        with open(self.logfile, "a") as out:
            self.proc = subprocess.Popen(
                [str(self.binary), "--listen", f"127.0.0.1:{self.port}",
                 "--http-listen", f"127.0.0.1:{self.http_port}", "--data-dir", str(self.datadir),
                 # MOLDAU_BENCH_LOG: e.g. "warn,moldau_broker::topics=debug"
                 # shows each compaction pass's lock holds
                 "--log", os.environ.get("MOLDAU_BENCH_LOG", "warn")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def start(self) -> None:
        self.spawn()
        if not wait_port(self.port, 60, lambda: self.proc.poll() is None):
            raise RuntimeError(f"moldau did not start (see {self.logfile})")

    @property
    def pid(self) -> int:
        assert self.proc
        return self.proc.pid

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Kafka:
    name = "kafka"
    flush_policy = ("no fsync per write: acknowledged = in the page cache "
                    "(Kafka's defaults log.flush.interval.messages/ms = Long.MAX)")

    def __init__(self, datadir: Path):
        self.datadir = datadir
        self.port = 0
        self._pid = 0

    def start(self) -> None:
        self.port = free_port()
        self.datadir.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(KAFKA_DIST / "kafka-up.sh"), "--daemon", "--wait", "240",
                        str(self.port), str(self.datadir)], check=True,
                       stdout=subprocess.DEVNULL, timeout=300)
        self._pid = int((self.datadir / "kafka.pid").read_text().strip())

    @property
    def pid(self) -> int:
        return self._pid

    def stop(self) -> None:
        subprocess.run([str(KAFKA_DIST / "kafka-down.sh"), str(self.datadir)],
                       check=False, timeout=120)


def config_order(rep: int) -> list[tuple]:
    """The matrix's configurations for repetition `rep` (1-based), the same
    for both brokers, rotated by three places per repetition (0, 3, 6, 1, 4,
    ...). In a fixed order Kafka's uncompressed acks=all runs, always third
    of their size, beat its own acks=1 runs in three runs on two machines
    (the same work on one broker): later configurations find a JVM further
    warmed up and the page cache in another state. Rotating spreads every
    configuration over the positions."""
    configs = [(size, acks, codec) for size in SIZES for acks in ACKS for codec in CODECS]
    k = ((rep - 1) * 3) % len(configs)
    return configs[k:] + configs[:k]


class BenchRunner:
    """What every runner shares: the mode's loads (MODES["quick"] or
    ["full"], recorded with `load_extra` as the run's load), the output
    directory, the raw record (`raw.json`, written atomically by `save`) and
    `tool`, one `moldau-bench` call."""

    def __init__(self, args, modes: dict, kind: str | None = None, **load_extra):
        self.args = args
        self.mode = modes["quick" if args.quick else "full"]
        self.bench = Path(args.bench_bin)
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        # JSON object keys are strings: record them so in memory too
        load = {k: ({str(a): b for a, b in v.items()} if isinstance(v, dict) else v)
                for k, v in dict(self.mode, **load_extra).items()}
        self.raw: dict = {
            **({"kind": kind} if kind else {}),
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "mode": "quick" if args.quick else "full",
            "reps": args.reps,
            "load": load,
            "machine": machine_info(self.out, getattr(args, "moldau_bin", None)),
            "runs": [],
            "errors": [],
        }

    def save(self) -> None:
        tmp = self.out / "raw.json.tmp"
        tmp.write_text(json.dumps(self.raw, indent=1))
        tmp.replace(self.out / "raw.json")

    def tool(self, *argv: str, timeout: float) -> dict:
        cmd = [str(self.bench), *argv]
        # An error's message, not a backtrace, in the last lines of stderr.
        env = {**os.environ, "RUST_LIB_BACKTRACE": "0"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        line = next((ln for ln in reversed(p.stdout.splitlines()) if ln.startswith("{")), None)
        if p.returncode != 0 or line is None:
            raise RuntimeError(f"{' '.join(argv[:3])}: exit {p.returncode}: "
                               f"{p.stderr.strip()[-400:]} {p.stdout.strip()[-200:]}")
        out = json.loads(line)
        # The load generator's own CPU (user + system), from the rusage of
        # the children reaped meanwhile: only this one (a broker under test
        # is reaped when it stops, Kafka's JVM is not a child).
        out["client_cpu_s"] = round((after.ru_utime - before.ru_utime)
                                    + (after.ru_stime - before.ru_stime), 3)
        return out


class Runner(BenchRunner):
    """The single-broker matrix."""

    def __init__(self, args):
        super().__init__(args, MODES)
        self.data = self.out / "data"
        self.raw["limits"] = {}
        self.raw["brokers"] = []

    # --- machine limits -------------------------------------------------
    def limits(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        disk, tcp, rtt = [], [], []
        for i in range(3):
            f = self.data / "dd-direct.tmp"
            mib = self.mode["dd_mib"]
            t0 = time.monotonic()
            p = subprocess.run(["dd", "if=/dev/zero", f"of={f}", "bs=1M", f"count={mib}",
                                "oflag=direct", "conv=fsync"],
                               capture_output=True, text=True, timeout=300)
            secs = time.monotonic() - t0
            f.unlink(missing_ok=True)
            m = re.search(r"copied, ([0-9.]+) s", p.stderr)
            if p.returncode == 0:
                secs = float(m.group(1)) if m else secs
                disk.append(mib * (1 << 20) / secs / 1e6)
            else:
                self.raw["errors"].append(f"dd: {p.stderr.strip()[-300:]}")
            try:
                tcp.append(self.tool("tcp", "--seconds", str(self.mode["tcp_seconds"]),
                                     timeout=60)["mb_per_sec"])
            except Exception as e:  # noqa: BLE001 - recorded, run goes on
                self.raw["errors"].append(f"tcp: {e}")
            try:
                rate = self.mode["e2e_rate"]
                rtt.append(self.tool("rtt", "--rate", str(rate), "--count", str(3 * rate),
                                     timeout=60)["p99_ms"])
            except Exception as e:  # noqa: BLE001 - recorded, run goes on
                self.raw["errors"].append(f"rtt: {e}")
        self.raw["limits"] = {
            "disk_direct_write_mb_per_sec": disk,
            "disk_method": f"dd if=/dev/zero bs=1M count={self.mode['dd_mib']} oflag=direct conv=fsync "
                           "into the benchmark data directory",
            "tcp_loopback_mb_per_sec": tcp,
            "tcp_method": "moldau-bench tcp: one connection on 127.0.0.1, 1 MiB writes",
            "rtt_p99_ms": rtt,
            "rtt_method": f"moldau-bench rtt: 100 B round trips on 127.0.0.1 to an echo thread, "
                          f"{self.mode['e2e_rate']}/s for 3 s (the fixed-rate steps' rate)",
        }
        log(f"limits: disk direct write {fmt_list(disk)} MB/s, loopback TCP {fmt_list(tcp)} MB/s, "
            f"round trip p99 {fmt_list(rtt, 2)} ms")
        self.save()

    # --- one broker, whole matrix ---------------------------------------
    def run_broker(self, broker, rep: int) -> None:
        t0 = time.monotonic()
        broker.start()
        startup = time.monotonic() - t0
        pid = broker.pid
        bootstrap = f"127.0.0.1:{broker.port}"
        cpu_start = proc_cpu_seconds(pid)
        log(f"rep {rep} {broker.name}: up in {startup:.1f}s (pid {pid}, port {broker.port})")
        info = {"broker": broker.name, "rep": rep, "startup_seconds": startup,
                "flush_policy": broker.flush_policy}
        try:
            self.warm_up(bootstrap)
            for size, acks, codec in config_order(rep):
                self.run_config(broker, bootstrap, pid, rep, size, acks, codec)
        finally:
            info["peak_rss_kib"] = proc_status_kib(pid, "VmHWM")
            info["rss_at_end_kib"] = proc_status_kib(pid, "VmRSS")
            cpu_end = proc_cpu_seconds(pid)
            if cpu_start is not None and cpu_end is not None:
                info["cpu_seconds_total"] = cpu_end - cpu_start
            broker.stop()
            du = dir_bytes(broker.datadir)
            info["data_dir_bytes"] = du
            shutil.rmtree(broker.datadir, ignore_errors=True)
            self.raw["brokers"].append(info)
            self.save()
            log(f"rep {rep} {broker.name}: peak RSS {(info['peak_rss_kib'] or 0) / 1024:.0f} MiB")

    def warm_up(self, bootstrap: str) -> None:
        """Unrecorded load first, so that a JVM's JIT and every broker's
        caches are warm before the first measured configuration."""
        try:
            self.tool("create-topic", "--bootstrap", bootstrap, "--topic", "bench-warmup", timeout=60)
            for size in SIZES:
                self.tool("produce", "--bootstrap", bootstrap, "--topic", "bench-warmup",
                              "--size", str(size), "--count", "500000", "--max-seconds", "1.5",
                              timeout=90)
            self.tool("consume", "--bootstrap", bootstrap, "--topic", "bench-warmup",
                      "--count", "100000", "--max-seconds", "10", timeout=60)
        except Exception as e:  # noqa: BLE001 - recorded, run goes on
            self.raw["errors"].append(f"warm-up: {e}")

    def run_config(self, broker, bootstrap, pid, rep, size, acks, codec) -> None:
        m = self.mode
        cfg = {"broker": broker.name, "rep": rep, "size": size, "acks": acks, "compression": codec}
        topic = f"bench-{size}-a{acks}-{codec}-r{rep}"
        row = dict(cfg)
        row["dirty_mib_written_back_before"] = write_back_dirty_pages()
        row["page_cache_before"] = drop_page_cache()
        steal_at_start = cpu_jiffies()
        try:
            self.tool("create-topic", "--bootstrap", bootstrap, "--topic", topic, timeout=60)
            prod, cons = self.produce_and_consume(row, bootstrap, pid, topic, size, acks, codec)
            e2e_topic = topic + "-e2e"
            self.tool("create-topic", "--bootstrap", bootstrap, "--topic", e2e_topic, timeout=60)
            row["e2e"] = self.tool("e2e", "--bootstrap", bootstrap, "--topic", e2e_topic,
                                   "--size", str(size), "--acks", acks, "--compression", codec,
                                   "--rate", str(m["e2e_rate"]),
                                   "--seconds", str(m["e2e_seconds"]),
                                   timeout=m["e2e_seconds"] + 90)
            self.run_wire(row, bootstrap, pid, topic + "-wire", size, acks, codec)
            row["steal_pct"] = steal_pct(steal_at_start, cpu_jiffies())
            log(f"  {broker.name} {size}B acks={acks} {codec}: "
                f"produce {prod['mb_per_sec']:.1f} MB/s p99 {prod['lat_p99_ms']:.1f} ms, "
                f"consume {cons['mb_per_sec']:.1f} MB/s, e2e p99 {row['e2e']['p99_ms']:.2f} ms; "
                f"wire produce {row['wire_produce']['mb_per_sec']:.1f} MB/s "
                f"p99 {row['wire_produce']['lat_p99_ms']:.1f} ms, "
                f"wire consume {row['wire_consume']['mb_per_sec']:.1f} MB/s, "
                f"wire ack p99 @ {m['e2e_rate']}/s {row['wire_fixed']['lat_p99_ms']:.2f} ms; "
                f"steal {row['steal_pct']}%")
        except Exception as e:  # noqa: BLE001 - recorded, run goes on
            row["error"] = str(e)
            self.raw["errors"].append(f"{cfg}: {e}")
            log(f"  {broker.name} {size}B acks={acks} {codec}: ERROR {e}")
        self.raw["runs"].append(row)
        self.save()

    def run_wire(self, row, bootstrap, pid, topic, size, acks, codec) -> None:
        """The same configuration with the wire load generator (bench/src/wire.rs):
        pre-encoded batches over the Kafka protocol, so that the client takes
        little of the machine and the broker sets the rate. Its own topic,
        written after the page cache is dropped again."""
        self.tool("create-topic", "--bootstrap", bootstrap, "--topic", topic, timeout=60)
        row["wire_page_cache_before"] = drop_page_cache()
        self.produce_and_consume(row, bootstrap, pid, topic, size, acks, codec, wire=True)
        # The ack latency at the e2e step's fixed rate, one record per
        # request, without librdkafka's threads between the paced sends and
        # the socket (its own topic).
        m = self.mode
        fixed = topic + "-fixed"
        self.tool("create-topic", "--bootstrap", bootstrap, "--topic", fixed, timeout=60)
        switches = thread_context_switches(pid)
        row["wire_fixed"] = self.tool(
            "wire-produce", "--bootstrap", bootstrap, "--topic", fixed, "--size", str(size),
            "--acks", acks, "--compression", codec, "--batch-bytes", "1",
            "--rate", str(m["e2e_rate"]), "--count", str(round(m["e2e_rate"] * m["e2e_seconds"])),
            "--max-seconds", str(m["e2e_seconds"] + 30), timeout=m["e2e_seconds"] + 90)
        # How often the broker's threads went to sleep (voluntary) or were
        # preempted per request answered: each sleep is a wake-up to pay
        # at the next request, on this machine's tail.
        after = thread_context_switches(pid)
        requests = row["wire_fixed"].get("acked") or 0
        if requests:
            for kind in ("voluntary", "involuntary"):
                moved = sum(counts.get(kind, 0) - switches.get(tid, {}).get(kind, 0)
                            for tid, counts in after.items())
                row["wire_fixed"][f"broker_{kind}_switches_per_request"] = moved / requests

    def produce_and_consume(self, row, bootstrap, pid, topic, size, acks, codec,
                            wire: bool = False) -> tuple[dict, dict]:
        """Produces the configuration's load into `topic` as fast as the load
        generator goes, then consumes every record acknowledged; records both
        outputs, the broker's CPU for each phase and per GiB moved, and the
        load generator's CPU per GiB in `row` (keys prefixed `wire_` for the
        wire load generator)."""
        m = self.mode
        prefix = "wire_" if wire else ""
        tool = "wire-" if wire else ""
        count = m["wire_count" if wire else "produce_count"][size]
        c0 = proc_cpu_seconds(pid)
        prod = self.tool(f"{tool}produce", "--bootstrap", bootstrap, "--topic", topic,
                         "--size", str(size), "--acks", acks, "--compression", codec,
                         "--count", str(count), "--max-seconds", str(m["produce_seconds"]),
                         timeout=m["produce_seconds"] + 120)
        c1 = proc_cpu_seconds(pid)
        cons = self.tool(f"{tool}consume", "--bootstrap", bootstrap, "--topic", topic,
                         *(["--size", str(size)] if wire else []),
                         "--count", str(prod["acked"]),
                         "--max-seconds", str(m["consume_seconds"]),
                         timeout=m["consume_seconds"] + 60)
        c2 = proc_cpu_seconds(pid)
        row[f"{prefix}produce"] = prod
        row[f"{prefix}consume"] = cons
        for phase, out in (("produce", prod), ("consume", cons)):
            if out.get("client_cpu_s") and out.get("bytes"):
                row[f"{prefix}{phase}_client_cpu_s_per_gib"] = out["client_cpu_s"] / (out["bytes"] / GIB)
        moved = prod["bytes"] + cons["bytes"]
        if None not in (c0, c1, c2):
            row[f"{prefix}cpu_produce_s"] = c1 - c0
            row[f"{prefix}cpu_consume_s"] = c2 - c1
            row[f"{prefix}cpu_s_per_gib"] = (c2 - c0) / (moved / GIB) if moved else None
        return prod, cons

    def run(self) -> None:
        log(f"benchmark ({self.raw['mode']}, {self.args.reps} repetitions) -> {self.out}")
        self.limits()
        for rep in range(1, self.args.reps + 1):
            brokers = [Moldau(Path(self.args.moldau_bin), self.data / f"moldau-r{rep}"),
                       Kafka(self.data / f"kafka-r{rep}")]
            if rep % 2 == 0:
                brokers.reverse()
            for b in brokers:
                if self.args.only and b.name != self.args.only:
                    continue
                try:
                    self.run_broker(b, rep)
                except Exception as e:  # noqa: BLE001
                    self.raw["errors"].append(f"rep {rep} {b.name}: {e}")
                    log(f"rep {rep} {b.name}: ERROR {e}")
                    b.stop()
        self.raw["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.raw["machine"]["loadavg_end"] = os.getloadavg()
        self.save()
        shutil.rmtree(self.data, ignore_errors=True)


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def fmt_list(xs, digits: int = 0) -> str:
    return "/".join(f"{x:.{digits}f}" for x in xs) or "n/a"


def binary_revision(binary) -> str | None:
    """The source revision a `moldau-broker` binary reports in `--version`
    ("moldau-broker 0.1.0 (revision <commit>)"), or None (an older binary,
    or "unknown": built without git)."""
    if binary is None:
        return None
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\(revision ([^)]+)\)", out)
    return m.group(1) if m and m.group(1) != "unknown" else None


def machine_info(out: Path, moldau_bin=None) -> dict:
    """The machine, and which Moldau is measured: the revision the broker
    binary was built from when it says (a `MOLDAU_BENCH_BINS_DIR` copy may
    be older than the checkout), else the checkout's."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = meminfo_kib("MemTotal") or 0
    df = subprocess.run(["df", "-hP", str(out)], capture_output=True, text=True).stdout.splitlines()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no",
                            "--", "broker/src", "broker/Cargo.toml"], capture_output=True, text=True).stdout.strip()
    built = binary_revision(moldau_bin)
    if built and not built.startswith(head):
        moldau = f"{built} (the broker binary's revision; checkout at {head})"
    else:
        moldau = (built or head) + (" + uncommitted broker changes" if dirty else "")
    return {
        "git": moldau,
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "mem_gib": round(mem_kib / (1 << 20), 1),
        "kernel": platform.release(),
        "disk": df[-1] if df else "",
        "java": java[0] if java else "",
        "loadavg_start": os.getloadavg(),
        "freed_memory_hold": hold_record(),
        "tcp_congestion": congestion_record(),
    }


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
                  else "-partitions" if args.partitions else "-restart" if args.restart else "")
        args.out = str(REPO / "bench-results" / (dt.date.today().isoformat() + suffix))
    if args.cluster:
        sys.path.insert(0, str(Path(__file__).parent))
        import cluster
        return cluster.main(args)
    if args.compaction:
        sys.path.insert(0, str(Path(__file__).parent))
        import compaction
        return compaction.main(args)
    if args.partitions:
        sys.path.insert(0, str(Path(__file__).parent))
        import partitions
        return partitions.main(args)
    if args.restart:
        sys.path.insert(0, str(Path(__file__).parent))
        import restart
        return restart.main(args)
    if args.all:
        sys.path.insert(0, str(Path(__file__).parent))
        import all as all_cases
        return all_cases.main(args)
    return run_matrix(args)


def run_matrix(args) -> int:
    """The matrix: every configuration on both brokers, --reps times."""
    if args.reps is None:
        args.reps = 3
    if args.report_only:
        import report
        report.render(Path(args.out))
        return 0
    r = Runner(args)
    try:
        r.run()
    finally:
        r.save()
        sys.path.insert(0, str(Path(__file__).parent))
        import report
        report.render(r.out)
    log(f"results: {r.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
