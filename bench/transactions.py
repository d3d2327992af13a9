"""Transactional produce on 3-broker clusters, RF=3, acks=all: Moldau against
Apache Kafka on this machine (`bench/run.sh --transactions`, issue 37).

The clusters are cluster.py's (three `moldau-broker` processes in cluster
mode `dir`; three KRaft broker+controller nodes of Kafka), with the same
broker settings, min.insync.replicas=2 and a replicated
`__transaction_state`. One cluster runs at a time; each repetition starts a
fresh cluster of each kind, order alternating.

The load: `moldau-bench txn-produce` (librdkafka's transactional API, the
same binary and settings for both), one producer with a `transactional.id`
(idempotent, acks=all) running transactions of 100 and of 1,000 records of
1 KiB, one after the other, on a topic of 3 partitions (RF=3), each
transaction writing to all three, for a bounded time or record count.
Records of 1 KiB, not 100 B: at 100 B the client's per-record work sets the
rate (see HISTORY.md on librdkafka's sending thread) and a transaction of
100 records is 10 KB, so the figure would be the client's and the round
trips'; at 1 KiB a transaction of 1,000 records is 1 MB, replicated three
times, and the brokers' work shows.

Measured: committed records/s and MB/s (first begin_transaction to the
last commit's return), and commit_transaction() latency (p50/p99/max; the
call as an application sees it: the wait for the transaction's last
acknowledgements, then EndTxn, both recorded too). Verified at the end of
each run, or it counts as an error: each partition's end offset at
read_committed (the LSO) and at read_uncommitted equals the records
committed to it plus one commit marker per transaction, and a
read_committed consumer reads every committed record.

Outputs (in --out, default bench-results/<date>-transactions/):
  raw.json      every measurement as taken (rewritten after each step)
  results.json  machine, load averages, medians/spread, ratios
  results.md    a table per transaction size, the ratios first
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import report
from cluster import (ACKS, COMMON_SETTINGS, KAFKA_ONLY_SETTINGS, MIN_ISR, NODES, RF, KafkaCluster,
                     MoldauCluster)
from common import (REPO, call_tool, die_with_parent, interleaved, log, machine_info, proc_cpu_seconds,
                    proc_status_kib, write_raw)

PARTITIONS = 3
SIZE = 1024
TXN_SIZES = [100, 1000]

MODES = {
    "quick": {
        "reps": 2,
        "txn_sizes": TXN_SIZES,
        "size": SIZE,
        "partitions": PARTITIONS,
        # The record cap only bounds a runaway: the time bound should end
        # both brokers' runs (at 200,000 the smoke run's Moldau stopped at
        # the cap after 2 s of 1,000-record transactions, Kafka at 5 s).
        "count": 2_000_000,
        "seconds": 5.0,
        "consume_seconds": 30.0,
    },
    "full": {
        "reps": 3,
        "txn_sizes": TXN_SIZES,
        "size": SIZE,
        "partitions": PARTITIONS,
        "count": 20_000_000,
        "seconds": 20.0,
        "consume_seconds": 60.0,
    },
}

BROKERS = ["moldau", "kafka"]

# (label, path into a run row, unit, higher is better)
METRICS = [
    ("committed records/s", ("txn", "records_per_sec"), "rec/s", True),
    ("committed MB/s", ("txn", "mb_per_sec"), "MB/s", True),
    ("transactions/s", ("txn", "transactions_per_sec"), "txn/s", True),
    ("commit p50", ("txn", "commit", "p50_ms"), "ms", False),
    ("commit p99", ("txn", "commit", "p99_ms"), "ms", False),
    ("commit max", ("txn", "commit", "max_ms"), "ms", False),
    ("  of which: last acks p99", ("txn", "ack_wait", "p99_ms"), "ms", False),
    ("  of which: EndTxn p99", ("txn", "end_txn", "p99_ms"), "ms", False),
    ("init_transactions()", ("txn", "init_seconds"), "s", False),
    ("cluster CPU per GB committed", ("cpu_s_per_gb",), "s/GB", False),
]

# The targets: (label, bound, higher is better).
TARGETS = [("committed records/s", 1.5, True), ("commit p99", 0.5, False)]


def log_tails(workdir: Path, chars: int = 1500) -> dict:
    """The last `chars` characters of each log of a cluster that failed
    (its directory is deleted right after), for raw.json."""
    out = {}
    for f in sorted(workdir.glob("**/*")):
        if f.is_file() and f.suffix in (".out", ".log"):
            try:
                out[str(f.relative_to(workdir))] = f.read_text(errors="replace")[-chars:]
            except OSError:
                pass
    return out


class TxnRunner:
    def __init__(self, args):
        self.args = args
        self.mode_name = "quick" if args.quick else "full"
        self.mode = MODES[self.mode_name]
        self.reps = args.reps if args.reps is not None else self.mode["reps"]
        self.bench = Path(args.bench_bin)
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.data = self.out / "data"
        self.raw: dict = {
            "kind": "transactions",
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "mode": self.mode_name,
            "reps": self.reps,
            "nodes": NODES,
            "replication_factor": RF,
            "min_insync_replicas": MIN_ISR,
            "acks": ACKS,
            "settings": {"common": COMMON_SETTINGS, "kafka_only": KAFKA_ONLY_SETTINGS},
            "load": dict(self.mode),
            "machine": machine_info(self.out, getattr(args, "moldau_bin", None)),
            "loadavg_samples": [],
            "runs": [],
            "clusters": [],
            "errors": [],
        }
        self.raw["machine"]["broker_source"] = subprocess.run(
            ["git", "-C", str(REPO), "log", "-1", "--format=%h", "--", "broker"],
            capture_output=True, text=True).stdout.strip()
        self.sample_load("start")

    def sample_load(self, what: str) -> None:
        self.raw["loadavg_samples"].append({
            "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "what": what, "loadavg": list(os.getloadavg())})

    def save(self) -> None:
        write_raw(self.out, self.raw)

    def tool(self, *argv: str, timeout: float) -> dict:
        return call_tool(self.bench, *argv, timeout=timeout, preexec_fn=die_with_parent,
                         env={**os.environ, "RUST_LIB_BACKTRACE": "0"})

    def cpu(self, pids: list[int]) -> float | None:
        vals = [proc_cpu_seconds(p) for p in pids]
        return None if None in vals else sum(vals)

    def create_topic(self, bootstrap: str, topic: str) -> None:
        self.tool("create-topic", "--bootstrap", bootstrap, "--topic", topic,
                  "--partitions", str(self.mode["partitions"]),
                  "--replication-factor", str(RF), "--config", f"min.insync.replicas={MIN_ISR}",
                  timeout=90)

    def txn_produce(self, bootstrap: str, topic: str, txn_id: str, txn_records: int, count: int,
                    seconds: float) -> dict:
        return self.tool("txn-produce", "--bootstrap", bootstrap, "--topic", topic,
                         "--partitions", str(self.mode["partitions"]), "--size", str(self.mode["size"]),
                         "--txn-records", str(txn_records), "--transactional-id", txn_id,
                         "--count", str(count), "--max-seconds", str(seconds),
                         timeout=seconds + 180)

    def warm_up(self, bootstrap: str) -> None:
        """Unrecorded: the first transactional producer makes the cluster
        create `__transaction_state` (50 partitions, RF=3), then a few
        seconds of both transaction sizes (JIT, connections, caches)."""
        try:
            self.create_topic(bootstrap, "bench-txn-warmup")
            for n in self.mode["txn_sizes"]:
                self.txn_produce(bootstrap, "bench-txn-warmup", f"bench-txn-warmup-{n}", n, 20 * n, 1.5)
        except Exception as e:  # noqa: BLE001 - recorded, run goes on
            self.raw["errors"].append(f"warm-up: {e}")
            log(f"  warm-up: ERROR {e}")

    def run_config(self, cluster, bootstrap: str, pids: list[int], rep: int, txn_records: int) -> None:
        m = self.mode
        row: dict = {"broker": cluster.name, "rep": rep, "txn_records": txn_records, "size": m["size"]}
        topic = f"bench-txn-{txn_records}-r{rep}"
        try:
            self.create_topic(bootstrap, topic)
            c0 = self.cpu(pids)
            t = self.txn_produce(bootstrap, topic, f"bench-txn-{txn_records}-r{rep}", txn_records,
                                 m["count"], m["seconds"])
            c1 = self.cpu(pids)
            row["txn"] = t
            if None not in (c0, c1) and t["bytes"]:
                row["cpu_s_per_gb"] = (c1 - c0) / (t["bytes"] / 1e9)
            # Every committed record readable at read_committed (the end
            # offsets were checked by txn-produce itself).
            cons = self.tool("consume", "--bootstrap", bootstrap, "--topic", topic,
                             "--partitions", str(m["partitions"]), "--count", str(t["committed_records"]),
                             "--max-seconds", str(m["consume_seconds"]), timeout=m["consume_seconds"] + 60)
            row["read_committed_check"] = {"records": cons.get("records"), "ok": True}
            c, a, e = t["commit"], t["ack_wait"], t["end_txn"]
            log(f"  {cluster.name} txn of {txn_records}: {t['transactions']} transactions, "
                f"{t['records_per_sec']:,.0f} rec/s ({t['mb_per_sec']:.1f} MB/s), commit p50 "
                f"{c['p50_ms']:.2f} p99 {c['p99_ms']:.2f} max {c['max_ms']:.2f} ms (acks p99 "
                f"{a['p99_ms']:.2f}, EndTxn p99 {e['p99_ms']:.2f}); verified: end offsets "
                f"{t['verify']['end_offsets']}, {cons.get('records')} records read at read_committed")
        except Exception as ex:  # noqa: BLE001 - recorded, run goes on
            row["error"] = str(ex)
            self.raw["errors"].append(f"rep {rep} {cluster.name} txn of {txn_records}: {ex}")
            log(f"  {cluster.name} txn of {txn_records}: ERROR {ex}")
        self.raw["runs"].append(row)
        self.save()

    def run_cluster(self, cluster, rep: int) -> None:
        self.sample_load(f"rep {rep} {cluster.name} start")
        info = {"broker": cluster.name, "rep": rep, "flush_policy": cluster.flush_policy}
        t0 = time.monotonic()
        failed = True
        try:
            cluster.start()
            bootstrap = cluster.bootstrap
            self.tool("wait-cluster", "--bootstrap", bootstrap, "--brokers", str(NODES),
                      "--max-seconds", "120", timeout=150)
            info["startup_seconds"] = time.monotonic() - t0
            pids = cluster.pids
            log(f"rep {rep} {cluster.name}: {NODES} nodes up in {info['startup_seconds']:.1f}s "
                f"(pids {pids}, {bootstrap})")
            self.warm_up(bootstrap)
            for n in self.mode["txn_sizes"]:
                self.run_config(cluster, bootstrap, pids, rep, n)
            failed = False
        finally:
            pids = cluster.pids
            hwm = [proc_status_kib(p, "VmHWM") for p in pids]
            info["peak_rss_kib_per_node"] = hwm
            info["peak_rss_kib"] = sum(hwm) if hwm and None not in hwm else None
            cluster.stop()
            if failed:
                info["log_tails"] = log_tails(cluster.workdir)
            shutil.rmtree(cluster.workdir, ignore_errors=True)
            self.raw["clusters"].append(info)
            self.sample_load(f"rep {rep} {cluster.name} end")
            self.save()

    def guarded(self, cluster, rep: int) -> None:
        try:
            self.run_cluster(cluster, rep)
        except Exception as e:  # noqa: BLE001 - recorded, next cluster
            self.raw["errors"].append(f"rep {rep} {cluster.name}: {e}")
            log(f"rep {rep} {cluster.name}: ERROR {e}")

    def run(self) -> None:
        log(f"transactions benchmark ({self.mode_name}, {self.reps} repetitions, {NODES} nodes, RF={RF}, "
            f"min.insync.replicas={MIN_ISR}, acks={ACKS}, transactions of "
            f"{' and '.join(str(n) for n in self.mode['txn_sizes'])} records of {self.mode['size']} B) "
            f"-> {self.out}")
        try:
            interleaved(self.args, self.guarded, self.data, moldau=MoldauCluster, kafka=KafkaCluster,
                        reps=self.reps, announce=False)
        finally:
            self.raw["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            self.raw["machine"]["loadavg_end"] = os.getloadavg()
            self.sample_load("end")
            self.save()
            shutil.rmtree(self.data, ignore_errors=True)


# --- report -----------------------------------------------------------------

def aggregate(raw: dict) -> dict:
    r = report
    agg: dict = {"configs": {}}
    for n in raw["load"]["txn_sizes"]:
        entry: dict = {}
        for b in BROKERS:
            rows = [x for x in raw["runs"] if x["broker"] == b and x["txn_records"] == n]
            ok = [x for x in rows if "error" not in x]
            entry[b] = {label: r.summary([r.dig(x, path) for x in ok]) for label, path, _, _ in METRICS}
            entry[b]["runs_ok"] = len(ok)
            entry[b]["runs"] = len(rows)
        entry["ratio"] = {label: r.ratio(entry["moldau"][label], entry["kafka"][label])
                          for label, _, _, _ in METRICS}
        agg["configs"][str(n)] = entry
    loads = [s["loadavg"][0] for s in raw.get("loadavg_samples", [])]
    agg["loadavg_1min"] = r.summary(loads)
    return agg


def _x(v) -> str:
    return "n/a" if v is None else f"{report.fmt(v)}×"


def target_rows(raw: dict, agg: dict) -> list[tuple[str, str, str, str, str]]:
    out = []
    units = {label: unit for label, _, unit, _ in METRICS}
    for n, c in agg["configs"].items():
        for label, bound, higher in TARGETS:
            q = c["ratio"][label]
            met = None if q is None else (q >= bound if higher else q <= bound)
            u = units[label]
            out.append((f"transactions of {int(n):,}: {label}", f"{'≥' if higher else '≤'} {bound}×", _x(q),
                        f"{report.fmt_s(c['moldau'][label], u)} vs {report.fmt_s(c['kafka'][label], u)} {u}",
                        "n/a" if met is None else "met" if met else "**not met**"))
    return out


def markdown(raw: dict, agg: dict) -> str:
    r = report
    m = raw["machine"]
    load = raw["load"]
    la = agg["loadavg_1min"]

    def la3(v) -> str:
        return ", ".join(f"{x:.1f}" for x in v)
    L = []
    L.append(f"# Transactional produce, Moldau vs Apache Kafka, {raw['nodes']}-broker clusters, "
             f"RF={raw['replication_factor']}, acks={raw['acks']} — {raw['started'][:10]} ({raw['mode']} mode)")
    L.append("")
    L.append(f"Same machine, same run, one cluster at a time: {m['cpus']} cores ({m['cpu_model']}), "
             f"{m['mem_gib']} GiB RAM, kernel {m['kernel']}, Moldau at {m.get('git', '?')}"
             + (f" (broker source as of {m['broker_source']})" if m.get("broker_source") else "")
             + f", {m.get('java', '')}. {raw['reps']} repetition(s) per cluster, interleaved (Moldau/Kafka "
             "order alternates); each repetition starts a fresh cluster. Figures are medians with the "
             "min–max spread in parentheses." + r.run_settings_line(m))
    L.append("")
    L.append(f"Machine load (load average, 1/5/15 min): {la3(m['loadavg_start'])} at the start, "
             + (f"{la3(m['loadavg_end'])} at the end" if m.get("loadavg_end") else "n/a at the end")
             + (f"; the 1-minute figure sampled at every cluster start and stop: {r.fmt(la['min'])}–"
                f"{r.fmt(la['max'])} (median {r.fmt(la['median'])})" if la else "")
             + f", on {m['cpus']} cores (the clusters under test count in it).")
    L.append("")
    L.append("## The issue's targets (Moldau ÷ Kafka)")
    L.append("")
    L.append("| measure | target | Moldau / Kafka | Moldau vs Kafka | |")
    L.append("| --- | --- | --- | --- | --- |")
    for t in target_rows(raw, agg):
        L.append("| " + " | ".join(t) + " |")
    L.append("")
    L.append("Throughput: a ratio above 1 favours Moldau; latency: below 1 favours Moldau.")
    for n, c in agg["configs"].items():
        L.append("")
        L.append(f"## Transactions of {int(n):,} records of {load['size']} B")
        L.append("")
        L.append("| metric | Moldau | Kafka | Moldau / Kafka |")
        L.append("| --- | --- | --- | --- |")
        for label, _, unit, _ in METRICS:
            L.append(f"| {label} ({unit}) | {r.fmt_s(c['moldau'][label], unit)} | "
                     f"{r.fmt_s(c['kafka'][label], unit)} | {_x(c['ratio'][label])} |")
        L.append(f"| runs verified (end offsets and read_committed read) | {c['moldau']['runs_ok']} of "
                 f"{c['moldau']['runs']} | {c['kafka']['runs_ok']} of {c['kafka']['runs']} | |")
    L.append("")
    L.append("## Method")
    L.append("")
    common = ", ".join(f"{k}={v}" for k, v in raw["settings"]["common"].items())
    L.append(
        f"- Clusters: as `bench/run.sh --cluster` (bench/cluster.py): {NODES} Moldau brokers (`--cluster dir`) "
        f"vs {NODES} Apache Kafka KRaft nodes (combined broker + controller); every listener on 127.0.0.1; "
        f"broker settings on both: {common}; Kafka's `__transaction_state` with replication factor "
        f"{RF} and min.isr {MIN_ISR} (Moldau's defaults are the same).\n"
        f"- Load: `moldau-bench txn-produce` (librdkafka's transactional API, the same binary and settings "
        f"for both): one producer with a `transactional.id` (idempotent, acks={raw['acks']}, linger.ms=5), "
        f"transactions of {' and '.join(f'{n:,}' for n in load['txn_sizes'])} records of {load['size']} B "
        f"one after the other, records round-robin over a topic of {load['partitions']} partitions "
        f"(RF={raw['replication_factor']}, min.insync.replicas={raw['min_insync_replicas']}), so each "
        f"transaction writes to every partition; each run at most {load['seconds']} s or "
        f"{load['count']:,} records (whole transactions; the time is checked between transactions). "
        "Every fresh cluster first gets an unrecorded warm-up (a transactional producer of each size for "
        "1.5 s, which also makes the cluster create `__transaction_state`).\n"
        "- Throughput: committed records (and their value bytes) from the first `begin_transaction` to the "
        "last commit's return. Commit latency: `commit_transaction()` from call to return as an application "
        "sees it: a flush of the transaction's records and the wait for their last acknowledgements "
        "(\"last acks\"; with librdkafka this includes adding the partitions to the transaction, "
        "AddPartitionsToTxn, and its retries), then EndTxn (\"EndTxn\"), measured apart too.\n"
        "- Verification (a run that fails it is an error and counts for nothing): each partition's end "
        "offset at read_committed (ListOffsets, the last stable offset) and at read_uncommitted equals the "
        "records committed to it plus one commit marker per transaction; then a read_committed consumer "
        "reads every committed record.\n"
        "- Cluster CPU: utime+stime of all the processes of the cluster during the transactional run, per "
        "GB of committed record values.")
    if raw.get("errors"):
        L.append("")
        L.append("## Errors during the run")
        L.append("")
        for e in raw["errors"][:30]:
            L.append(f"- {e}")
    L.append("")
    return "\n".join(L)


def render(out: Path) -> None:
    raw = json.loads((out / "raw.json").read_text())
    agg = aggregate(raw)
    (out / "results.json").write_text(json.dumps(
        {"kind": "transactions", "started": raw["started"], "mode": raw["mode"], "reps": raw["reps"],
         "machine": raw["machine"], "loadavg_samples": raw.get("loadavg_samples"), "summary": agg,
         "targets": [{"measure": t[0], "target": t[1], "ratio": t[2], "detail": t[3],
                      "verdict": t[4].replace("*", "")} for t in target_rows(raw, agg)]},
        indent=1))
    (out / "results.md").write_text(markdown(raw, agg))


def main(args) -> int:
    if args.report_only:
        render(Path(args.out))
        return 0
    r = TxnRunner(args)
    try:
        r.run()
    finally:
        r.save()
        render(r.out)
    log(f"results: {r.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit("run it as bench/run.sh --transactions")
