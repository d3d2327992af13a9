"""The single-broker matrix (`bench/run.sh` without a mode): machine limits
(direct-I/O disk write, loopback TCP, round trip), then for each repetition
every configuration (100 B / 1 KiB, acks=1/all, none/lz4) on Moldau and on
Kafka, one broker at a time, order alternating, with both load generators
(librdkafka's and the wire one). See run.py for the outputs.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import report
from common import (GIB, BenchRunner, cpu_jiffies, dir_bytes, drop_page_cache, interleaved, log, proc_cpu_seconds,
                    proc_status_kib, steal_pct, thread_context_switches, write_back_dirty_pages)

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

    def guarded(self, broker, rep: int) -> None:
        """`run_broker`, an error recorded and the broker stopped: the next
        one still runs."""
        try:
            self.run_broker(broker, rep)
        except Exception as e:  # noqa: BLE001
            self.raw["errors"].append(f"rep {rep} {broker.name}: {e}")
            log(f"rep {rep} {broker.name}: ERROR {e}")
            broker.stop()

    def run(self) -> None:
        log(f"benchmark ({self.raw['mode']}, {self.args.reps} repetitions) -> {self.out}")
        self.limits()
        interleaved(self.args, self.guarded, self.data, announce=False)
        self.raw["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.raw["machine"]["loadavg_end"] = os.getloadavg()
        self.save()
        shutil.rmtree(self.data, ignore_errors=True)


def fmt_list(xs, digits: int = 0) -> str:
    return "/".join(f"{x:.{digits}f}" for x in xs) or "n/a"


def main(args) -> int:
    """The matrix: every configuration on both brokers, --reps times."""
    if args.reps is None:
        args.reps = 3
    if args.report_only:
        report.render(Path(args.out))
        return 0
    r = Runner(args)
    try:
        r.run()
    finally:
        r.save()
        report.render(r.out)
    log(f"results: {r.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit("run through bench/run.sh")
