"""What every benchmark runner shares; imports none of them.

The runners (run.py, the entry point of bench/run.sh, and the modes it
dispatches to: matrix.py, cluster.py, compaction.py, partitions.py,
restart.py, all.py; cluster_partitions.py on its own) import from here,
never the other way round, so that imports among bench/*.py go one way
(bench/check_imports.py fails on any import cycle). This module owns:

- the paths (`REPO`, `KAFKA_DIST`) and `log`;
- starting and stopping processes (`free_port`, `wait_port`, `spawn`,
  `stop_all`) and the two single brokers under test (`Moldau`, `Kafka`);
- what is read from /proc (CPU seconds, context switches, steal, RSS,
  memory) and what is done to the page cache before a measured load;
- the kernel settings held for a run (`hold_freed_memory`,
  `tcp_congestion_for_run`) and the machine record (`machine_info`);
- a runner's scaffolding: `call_tool` (one `moldau-bench` call),
  `BenchRunner` (mode, output directory, raw.json), `repetition`,
  `interleaved` (the brokers' order over the repetitions) and `run_reps`
  (the `main` of a runner that measures one broker at a time);
- the medians the reports take (`median`, `dig`).
"""
from __future__ import annotations

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
import statistics
import subprocess
import time
from pathlib import Path



REPO = Path(__file__).resolve().parent.parent
KAFKA_DIST = REPO / "e2e" / "clients" / "kafka-dist"
CLK_TCK = os.sysconf("SC_CLK_TCK")
GIB = float(1 << 30)


def log(msg: str) -> None:
    print(f"[{dt.datetime.now(dt.timezone.utc):%H:%M:%S}] {msg}", flush=True)


# --- processes ---------------------------------------------------------------
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


STOP_TIMEOUT = 45.0


def die_with_parent() -> None:
    """preexec_fn: the broker gets SIGKILL if this script dies without cleaning up."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


def spawn(cmd: list[str], logfile: Path) -> subprocess.Popen:
    with open(logfile, "wb") as out:
        # Own session: a Ctrl-C in the terminal reaches this script, which
        # stops the brokers itself (in order, then deletes their data).
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=die_with_parent)


def stop_all(procs: list[subprocess.Popen], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM to every process at once, wait, SIGKILL what is left."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        try:
            p.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for p in live:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in live:
        if p.poll() is None:
            p.kill()
            p.wait(30)


# --- what /proc says ---------------------------------------------------------
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


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


# --- memory before a measured load -------------------------------------------
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


# --- kernel settings held for the run, and the machine -----------------------
PAGE_REPORTING_DELAY = Path("/sys/module/page_reporting/parameters/min_free_ms")
FREED_MEMORY_HOLD_MS = 300_000


@contextlib.contextmanager
def kernel_setting_for_run(path: Path, value: str, env: str):
    """Writes `value` into the kernel parameter `path` for the run and
    restores what was there afterwards; records "before:value" in the
    environment variable `env` for the report (in the environment, which
    every module and child process of the run reads alike). On a machine
    without the parameter, or not root, nothing changes and nothing is
    recorded."""
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


def kafka_version() -> str:
    """The reference Apache Kafka's version: the one e2e/clients/kafka-dist
    resolved (its kafka-server jar's name), so a result names what it was
    compared with."""
    jars = sorted((KAFKA_DIST / "jars").glob("kafka-server-[0-9]*.jar"))
    return jars[-1].name.removeprefix("kafka-server-").removesuffix(".jar") if jars else "unknown"


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
        "kafka": kafka_version(),
        "loadavg_start": os.getloadavg(),
        "freed_memory_hold": hold_record(),
        "tcp_congestion": congestion_record(),
    }


# --- the single brokers under test -------------------------------------------
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


# --- a runner's scaffolding --------------------------------------------------
def call_tool(bench: Path, *argv: str, timeout: float, **run_kw) -> dict:
    """Runs `moldau-bench ARGV…` (`bench`, its path; `run_kw` go to
    `subprocess.run`) and returns the JSON object it printed last; an error
    names the command and ends with the tails of its output."""
    p = subprocess.run([str(bench), *argv], capture_output=True, text=True, timeout=timeout, **run_kw)
    line = next((ln for ln in reversed(p.stdout.splitlines()) if ln.startswith("{")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError(f"{' '.join(argv[:3])}: exit {p.returncode}: "
                           f"{p.stderr.strip()[-400:]} {p.stdout.strip()[-200:]}")
    return json.loads(line)


def write_raw(out: Path, raw: dict) -> None:
    """Writes a runner's raw record to OUT/raw.json atomically (a temporary
    file renamed over it), so an interrupted run leaves the last whole one."""
    tmp = out / "raw.json.tmp"
    tmp.write_text(json.dumps(raw, indent=1))
    tmp.replace(out / "raw.json")


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
        write_raw(self.out, self.raw)

    def tool(self, *argv: str, timeout: float) -> dict:
        # An error's message, not a backtrace, in the last lines of stderr.
        env = {**os.environ, "RUST_LIB_BACKTRACE": "0"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = call_tool(self.bench, *argv, timeout=timeout, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # The load generator's own CPU (user + system), from the rusage of
        # the children reaped meanwhile: only this one (a broker under test
        # is reaped when it stops, Kafka's JVM is not a child).
        out["client_cpu_s"] = round((after.ru_utime - before.ru_utime)
                                    + (after.ru_stime - before.ru_stime), 3)
        return out


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


def interleaved(args, run_broker, data: Path, moldau=Moldau, kafka=Kafka, reps: int | None = None,
                announce: bool = True) -> None:
    """Each of `reps` (default `args.reps`) repetitions runs a fresh broker
    (or cluster) of each kind, `moldau(binary, DATA/moldau-rN)` and
    `kafka(DATA/kafka-rN)`, Moldau first in odd repetitions and Kafka in
    even ones, leaving out the kind `--only` does not name; `announce` logs
    "rep N name" before each."""
    for rep in range(1, (reps if reps is not None else args.reps) + 1):
        brokers = [moldau(Path(args.moldau_bin), data / f"moldau-r{rep}"), kafka(data / f"kafka-r{rep}")]
        if rep % 2 == 0:
            brokers.reverse()
        for b in brokers:
            if args.only and b.name != args.only:
                continue
            if announce:
                log(f"rep {rep} {b.name}")
            run_broker(b, rep)


def run_reps(runner, moldau=Moldau, kafka=Kafka, tidy: bool = True) -> int:
    """The `main` of a runner that measures one broker at a time
    (`runner.run_broker(broker, rep)`, `runner.report()`): with
    --report-only, the report again from OUT/raw.json; otherwise the
    `interleaved` repetitions in OUT/data, and whatever happens the raw
    record saved and the report written. `tidy`: the load average at the
    end recorded and OUT/data removed (compaction's keeps the brokers' logs
    there)."""
    args = runner.args
    if args.report_only:
        runner.raw = json.loads((runner.out / "raw.json").read_text())
        runner.report()
        return 0
    data = runner.out / "data"
    try:
        interleaved(args, runner.run_broker, data, moldau=moldau, kafka=kafka)
    finally:
        if tidy:
            runner.raw["machine"]["loadavg_end"] = os.getloadavg()
        runner.save()
        runner.report()
        if tidy:
            shutil.rmtree(data, ignore_errors=True)
    log(f"results: {runner.out / 'results.md'}")
    return 0


# --- the reports' medians ----------------------------------------------------
def median(vals: list) -> float | None:
    """The median of the values that are not None, or None."""
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def dig(row: dict, path: str):
    """`row["a"]["b"]` for path "a.b", None where absent."""
    v = row
    for k in path.split("."):
        if not isinstance(v, dict) or v.get(k) is None:
            return None
        v = v[k]
    return v
