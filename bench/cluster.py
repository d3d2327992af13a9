"""RF=3, acks=all cluster comparison: three Moldau brokers against a
three-node Apache Kafka cluster on this machine (`bench/run.sh --cluster`).

- Moldau: three `moldau-broker` processes in cluster mode `dir` (one shared
  cluster directory, the controller elected by a lock on it).
- Kafka: three KRaft nodes, each a combined broker + controller, one
  three-voter quorum, the jars of e2e/clients/kafka-dist and the JVM settings
  of its kafka-up.sh.

Both clusters get the same broker settings (min.insync.replicas=2,
replicated internal topics) and the same load: one topic per configuration
with 1 partition, 3 replicas and min.insync.replicas=2, driven by
`moldau-bench` with acks=all. One cluster runs at a time; each repetition
starts a fresh cluster of each kind, order alternating. Every address is on
127.0.0.1, each broker has its own data directory under the run's output
directory, and every process started here is stopped (SIGTERM, then SIGKILL)
and its data deleted on the way out, errors and interrupts included.

Outputs (in --out, default bench-results/<date>-cluster/):
  raw.json      every measurement as taken (rewritten after each step)
  results.json  machine, load averages, medians/spread, ratios
  results.md    the tables, the ratio summary first
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import report
from common import (GIB, KAFKA_DIST, REPO, call_tool, die_with_parent, dir_bytes, free_port, interleaved, log,
                    machine_info, proc_cpu_seconds, proc_status_kib, spawn, stop_all, wait_port, write_raw)

NODES = 3
RF = 3
MIN_ISR = 2
ACKS = "all"

MODES = {
    "quick": {
        "reps": 3,
        "sizes": [100, 1024],
        "codecs": ["none"],
        "produce_count": {100: 5_000_000, 1024: 1_000_000},
        "produce_seconds": 3.0,
        "consume_seconds": 20.0,
        "e2e_rates": [100, 1000],
        "e2e_seconds": 4.0,
    },
    "full": {
        "reps": 3,
        "sizes": [100, 1024],
        "codecs": ["none", "lz4"],
        "produce_count": {100: 15_000_000, 1024: 2_000_000},
        "produce_seconds": 15.0,
        "consume_seconds": 60.0,
        "e2e_rates": [100, 1000],
        "e2e_seconds": 10.0,
    },
}

# Broker settings both clusters share (Kafka names; Moldau gets them as --set).
COMMON_SETTINGS = {
    "min.insync.replicas": str(MIN_ISR),
    "default.replication.factor": str(RF),
    "num.partitions": "1",
    "offsets.topic.replication.factor": str(RF),
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "true",
}
KAFKA_ONLY_SETTINGS = {
    "transaction.state.log.replication.factor": str(RF),
    "transaction.state.log.min.isr": str(MIN_ISR),
    "share.coordinator.state.topic.replication.factor": str(RF),
    "share.coordinator.state.topic.min.isr": str(MIN_ISR),
    "log.retention.check.interval.ms": "300000",
}

# A paced run whose acknowledgements came at less than this fraction of the
# offered rate (acked records / first send → last ack) fell behind: the
# cluster was saturated at that rate and its latency is queueing time.
SATURATED_BELOW = 0.9


class MoldauCluster:
    name = "moldau"
    flush_policy = "no fsync per write (Moldau's default): acknowledged = in every in-sync replica's page cache"

    def __init__(self, binary: Path, workdir: Path):
        self.binary = binary
        self.workdir = workdir
        self.procs: list[subprocess.Popen] = []
        self.ports: list[int] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> None:
        shared = self.workdir / "shared"
        shared.mkdir(parents=True, exist_ok=True)
        https = []
        for n in range(NODES):
            port, http, ctrl = free_port(), free_port(), free_port()
            self.ports.append(port)
            https.append(http)
            data = self.workdir / f"node-{n}"
            data.mkdir(parents=True, exist_ok=True)
            cmd = [str(self.binary),
                   "--cluster", "dir", "--cluster-dir", str(shared),
                   "--node-id", str(n),
                   "--listen", f"127.0.0.1:{port}",
                   "--advertised-listener", f"127.0.0.1:{port}",
                   "--http-listen", f"127.0.0.1:{http}",
                   "--controller-listen", f"127.0.0.1:{ctrl}",
                   "--controller-advertised", f"127.0.0.1:{ctrl}",
                   "--data-dir", str(data),
                   "--log", "warn"]
            for k, v in COMMON_SETTINGS.items():
                cmd += ["--set", f"{k}={v}"]
            self.procs.append(spawn(cmd, self.workdir / f"node-{n}.log"))
        for n, port in enumerate(self.ports):
            if not wait_port(port, 60, lambda p=self.procs[n]: p.poll() is None):
                raise RuntimeError(f"moldau node {n} did not start (see {self.workdir}/node-{n}.log)")

    def stop(self) -> None:
        stop_all(self.procs)


class KafkaCluster:
    name = "kafka"
    flush_policy = ("no fsync per write (Kafka's default, log.flush.interval.messages/ms = Long.MAX): "
                    "acknowledged = in every in-sync replica's page cache")

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.procs: list[subprocess.Popen] = []
        self.ports: list[int] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _java(self) -> str:
        return os.environ.get("KAFKA_JAVA", "java")

    def start(self) -> None:
        java = self._java()
        cp = str(KAFKA_DIST / "jars" / "*")
        log4j = f"-Dlog4j2.configurationFile={KAFKA_DIST / 'log4j2.properties'}"
        self.ports = [free_port() for _ in range(NODES)]
        ctrl = [free_port() for _ in range(NODES)]
        voters = ",".join(f"{n}@127.0.0.1:{ctrl[n]}" for n in range(NODES))
        # A cluster id: 16 random bytes, URL-safe base64 without padding, not
        # starting with "-" (1 in 64 do: the storage tool then reads it as an
        # option, "argument --cluster-id/-t: expected one argument", and the
        # cluster never starts; Kafka's own random ids skip those too).
        cluster_id = "-"
        while cluster_id.startswith("-"):
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        props_files = []
        for n in range(NODES):
            d = self.workdir / f"node-{n}"
            d.mkdir(parents=True, exist_ok=True)
            props = {
                "process.roles": "broker,controller",
                "node.id": str(n),
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://127.0.0.1:{self.ports[n]},CONTROLLER://127.0.0.1:{ctrl[n]}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.ports[n]}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "log.dirs": str(d / "logs"),
                "metadata.log.dir": str(d / "metadata"),
                "delete.topic.enable": "true",
                **COMMON_SETTINGS,
                **KAFKA_ONLY_SETTINGS,
            }
            f = d / "server.properties"
            f.write_text("# generated by bench/cluster.py\n"
                         + "".join(f"{k}={v}\n" for k, v in props.items()))
            props_files.append(f)
        # Format the three storage directories with the one cluster id (in parallel).
        fmt = [spawn([java, "-cp", cp, log4j, "kafka.tools.StorageTool", "format",
                       "-t", cluster_id, "-c", str(f), "--ignore-formatted"], f.parent / "format.out")
               for f in props_files]
        try:
            for p, f in zip(fmt, props_files):
                if p.wait(180) != 0:
                    raise RuntimeError(f"kafka storage format failed: see {f.parent / 'format.out'}")
        finally:
            stop_all(fmt, timeout=5)
        heap = os.environ.get("KAFKA_HEAP_OPTS", "-Xms256m -Xmx768m").split()
        for n, f in enumerate(props_files):
            cmd = [java, *heap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                   "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true", log4j,
                   f"-Dkafka.logs.dir={f.parent}", "-cp", cp, "kafka.Kafka", str(f)]
            self.procs.append(spawn(cmd, f.parent / "kafka.out"))
        deadline = time.monotonic() + 240
        for n, p in enumerate(self.procs):
            out = self.workdir / f"node-{n}" / "kafka.out"
            while True:
                if p.poll() is not None:
                    raise RuntimeError(f"kafka node {n} exited with {p.returncode} (see {out})")
                if b"Kafka Server started" in out.read_bytes():
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kafka node {n} not started after 240 s (see {out})")
                time.sleep(0.3)
            if not wait_port(self.ports[n], max(1.0, deadline - time.monotonic()),
                                  lambda p=p: p.poll() is None):
                raise RuntimeError(f"kafka node {n}: port {self.ports[n]} not accepting (see {out})")

    def stop(self) -> None:
        stop_all(self.procs)


class ClusterRunner:
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
            "kind": "cluster",
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "mode": self.mode_name,
            "reps": self.reps,
            "nodes": NODES,
            "replication_factor": RF,
            "min_insync_replicas": MIN_ISR,
            "acks": ACKS,
            "settings": {"common": COMMON_SETTINGS, "kafka_only": KAFKA_ONLY_SETTINGS},
            "load": {k: (v if not isinstance(v, dict) else {str(a): b for a, b in v.items()})
                     for k, v in self.mode.items()},
            "machine": machine_info(self.out, getattr(self.args, "moldau_bin", None)),
            "loadavg_samples": [],
            "runs": [],
            "clusters": [],
            "errors": [],
        }
        # The broker's source: the last commit that touched broker/ (HEAD may
        # be a later commit of the benchmark only).
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
        """Runs `moldau-bench ARGV…` (killed with this script if it dies) and
        returns the JSON object it printed last."""
        return call_tool(self.bench, *argv, timeout=timeout, preexec_fn=die_with_parent)

    def cpu(self, pids: list[int]) -> float | None:
        vals = [proc_cpu_seconds(p) for p in pids]
        return None if None in vals else sum(vals)

    def create_topic(self, bootstrap: str, topic: str) -> None:
        self.tool("create-topic", "--bootstrap", bootstrap, "--topic", topic,
                  "--replication-factor", str(RF), "--config", f"min.insync.replicas={MIN_ISR}",
                  timeout=90)

    def run_cluster(self, cluster, rep: int) -> None:
        self.sample_load(f"rep {rep} {cluster.name} start")
        info = {"broker": cluster.name, "rep": rep, "flush_policy": cluster.flush_policy}
        t0 = time.monotonic()
        try:
            cluster.start()
            bootstrap = cluster.bootstrap
            self.tool("wait-cluster", "--bootstrap", bootstrap, "--brokers", str(NODES),
                      "--max-seconds", "120", timeout=150)
            info["startup_seconds"] = time.monotonic() - t0
            pids = cluster.pids
            log(f"rep {rep} {cluster.name}: {NODES} nodes up in {info['startup_seconds']:.1f}s "
                 f"(pids {pids}, {bootstrap})")
            cpu_start = self.cpu(pids)
            self.warm_up(bootstrap)
            for size in self.mode["sizes"]:
                for codec in self.mode["codecs"]:
                    self.run_config(cluster, bootstrap, pids, rep, size, codec)
            cpu_end = self.cpu(pids)
            if cpu_start is not None and cpu_end is not None:
                info["cpu_seconds_total"] = cpu_end - cpu_start
        finally:
            pids = cluster.pids
            hwm = [proc_status_kib(p, "VmHWM") for p in pids]
            info["peak_rss_kib_per_node"] = hwm
            info["peak_rss_kib"] = sum(hwm) if hwm and None not in hwm else None
            info["rss_at_end_kib_per_node"] = [proc_status_kib(p, "VmRSS") for p in pids]
            cluster.stop()
            info["data_dir_bytes"] = dir_bytes(cluster.workdir)
            shutil.rmtree(cluster.workdir, ignore_errors=True)
            self.raw["clusters"].append(info)
            self.sample_load(f"rep {rep} {cluster.name} end")
            self.save()
            if info["peak_rss_kib"]:
                log(f"rep {rep} {cluster.name}: peak RSS summed over {NODES} nodes "
                     f"{info['peak_rss_kib'] / 1024:.0f} MiB "
                     f"({', '.join(f'{(k or 0) / 1024:.0f}' for k in hwm)})")

    def warm_up(self, bootstrap: str) -> None:
        """Unrecorded load first (JIT, caches, followers' connections): bulk
        produce of both sizes, a consume, and a paced one-record-per-request
        run (the path the fixed-rate latency takes)."""
        try:
            self.create_topic(bootstrap, "bench-warmup")
            for size in self.mode["sizes"]:
                self.tool("produce", "--bootstrap", bootstrap, "--topic", "bench-warmup",
                          "--size", str(size), "--acks", ACKS, "--count", "300000",
                          "--max-seconds", "1.5", timeout=90)
            self.tool("consume", "--bootstrap", bootstrap, "--topic", "bench-warmup",
                      "--count", "100000", "--max-seconds", "10", timeout=60)
            self.create_topic(bootstrap, "bench-warmup-paced")
            self.tool("e2e", "--bootstrap", bootstrap, "--topic", "bench-warmup-paced",
                      "--size", "100", "--acks", ACKS, "--rate", str(min(self.mode["e2e_rates"])),
                      "--seconds", "2", timeout=90)
        except Exception as e:  # noqa: BLE001 - recorded, run goes on
            self.raw["errors"].append(f"warm-up: {e}")

    def run_config(self, cluster, bootstrap, pids, rep, size, codec) -> None:
        m = self.mode
        cfg = {"broker": cluster.name, "rep": rep, "size": size, "acks": ACKS, "compression": codec}
        topic = f"bench-rf{RF}-{size}-{codec}-r{rep}"
        row = dict(cfg)
        try:
            self.create_topic(bootstrap, topic)
            c0 = self.cpu(pids)
            prod = self.tool("produce", "--bootstrap", bootstrap, "--topic", topic,
                             "--size", str(size), "--acks", ACKS, "--compression", codec,
                             "--count", str(m["produce_count"][size]),
                             "--max-seconds", str(m["produce_seconds"]),
                             timeout=m["produce_seconds"] + 120)
            c1 = self.cpu(pids)
            cons = self.tool("consume", "--bootstrap", bootstrap, "--topic", topic,
                             "--count", str(prod["acked"]),
                             "--max-seconds", str(m["consume_seconds"]),
                             timeout=m["consume_seconds"] + 60)
            c2 = self.cpu(pids)
            row["produce"] = prod
            row["consume"] = cons
            # Bytes the cluster moved for clients: produced + consumed
            # (replication traffic is the same for both and not counted).
            moved = prod["bytes"] + cons["bytes"]
            if None not in (c0, c1, c2):
                row["cpu_produce_s"] = c1 - c0
                row["cpu_consume_s"] = c2 - c1
                row["cpu_s_per_gib"] = (c2 - c0) / (moved / GIB) if moved else None
            log(f"  {cluster.name} {size}B acks={ACKS} {codec}: produce {prod['mb_per_sec']:.1f} MB/s, "
                 f"consume {cons['mb_per_sec']:.1f} MB/s")
        except Exception as e:  # noqa: BLE001 - recorded, run goes on
            row["error"] = str(e)
            self.raw["errors"].append(f"{cfg}: {e}")
            log(f"  {cluster.name} {size}B {codec}: ERROR {e}")
        # Fixed-rate latency, one run per rate (an error in one loses only it).
        for rate in m["e2e_rates"]:
            try:
                e2e_topic = f"{topic}-e2e{rate}"
                self.create_topic(bootstrap, e2e_topic)
                e = self.tool("e2e", "--bootstrap", bootstrap, "--topic", e2e_topic,
                              "--size", str(size), "--acks", ACKS, "--compression", codec,
                              "--rate", str(rate), "--seconds", str(m["e2e_seconds"]),
                              timeout=m["e2e_seconds"] + 120)
                e["saturated"] = e.get("ack_rate", 0) < SATURATED_BELOW * rate
                row[f"e2e_{rate}"] = e
                log(f"  {cluster.name} {size}B acks={ACKS} {codec} @ {rate} rec/s: "
                     f"ack p50 {e['ack_p50_ms']:.2f} ms p99 {e['ack_p99_ms']:.2f} ms, "
                     f"e2e p99 {e['p99_ms']:.2f} ms, acked at {e['ack_rate']:.0f} rec/s"
                     + (" (SATURATED)" if e["saturated"] else ""))
            except Exception as ex:  # noqa: BLE001 - recorded, run goes on
                row[f"e2e_{rate}_error"] = str(ex)
                self.raw["errors"].append(f"{cfg} e2e @ {rate}/s: {ex}")
                log(f"  {cluster.name} {size}B {codec} @ {rate} rec/s: ERROR {ex}")
        self.raw["runs"].append(row)
        self.save()

    def guarded(self, cluster, rep: int) -> None:
        """`run_cluster`, an error recorded: the next cluster still runs."""
        try:
            self.run_cluster(cluster, rep)
        except Exception as e:  # noqa: BLE001 - recorded, next cluster
            self.raw["errors"].append(f"rep {rep} {cluster.name}: {e}")
            log(f"rep {rep} {cluster.name}: ERROR {e}")

    def run(self) -> None:
        log(f"cluster benchmark ({self.mode_name}, {self.reps} repetitions, {NODES} nodes, RF={RF}, "
             f"min.insync.replicas={MIN_ISR}, acks={ACKS}) -> {self.out}")
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

BROKERS = ["moldau", "kafka"]


def metrics(raw: dict) -> list[tuple[str, tuple, str, bool]]:
    """(label, path into a run row, unit, higher is better)."""
    out = [
        ("produce MB/s", ("produce", "mb_per_sec"), "MB/s", True),
        ("produce records/s", ("produce", "records_per_sec"), "rec/s", True),
        ("produce p99 @ full load", ("produce", "lat_p99_ms"), "ms", False),
    ]
    for rate in raw["load"]["e2e_rates"]:
        k = f"e2e_{rate}"
        out += [
            (f"produce ack p50 @ {rate} rec/s", (k, "ack_p50_ms"), "ms", False),
            (f"produce ack p99 @ {rate} rec/s", (k, "ack_p99_ms"), "ms", False),
            (f"end-to-end p99 @ {rate} rec/s", (k, "p99_ms"), "ms", False),
            (f"acknowledged rate @ {rate} rec/s", (k, "ack_rate"), "rec/s", True),
        ]
    out += [
        ("consume MB/s", ("consume", "mb_per_sec"), "MB/s", True),
        ("consume records/s", ("consume", "records_per_sec"), "rec/s", True),
        ("cluster CPU s/GiB", ("cpu_s_per_gib",), "s/GiB", False),
    ]
    return out


def aggregate(raw: dict) -> dict:
    r = report
    load = raw["load"]
    mets = metrics(raw)
    agg: dict = {"configs": {}, "clusters": {}}
    for size in load["sizes"]:
        for codec in load["codecs"]:
            key = r.cfg_key(size, ACKS, codec)
            entry: dict = {}
            for b in BROKERS:
                rows = [x for x in raw["runs"] if x["broker"] == b and x["size"] == size
                        and x["compression"] == codec]
                entry[b] = {label: r.summary([r.dig(x, path) for x in rows]) for label, path, _, _ in mets}
                entry[b]["runs_ok"] = len([x for x in rows if "error" not in x])
                entry[b]["saturated"] = {
                    str(rate): [x[f"e2e_{rate}"]["saturated"] for x in rows if f"e2e_{rate}" in x]
                    for rate in load["e2e_rates"]}
            entry["ratio"] = {label: r.ratio(entry["moldau"][label], entry["kafka"][label])
                              for label, _, _, _ in mets}
            agg["configs"][key] = entry
    for b in BROKERS:
        infos = [i for i in raw["clusters"] if i["broker"] == b]
        agg["clusters"][b] = {
            "peak_rss_mib": r.summary([i["peak_rss_kib"] / 1024 for i in infos if i.get("peak_rss_kib")]),
            "startup_seconds": r.summary([i.get("startup_seconds") for i in infos]),
            "flush_policy": infos[0]["flush_policy"] if infos else None,
        }
    agg["rss_ratio"] = r.ratio(agg["clusters"]["moldau"]["peak_rss_mib"], agg["clusters"]["kafka"]["peak_rss_mib"])
    loads = [s["loadavg"][0] for s in raw.get("loadavg_samples", [])]
    agg["loadavg_1min"] = r.summary(loads)
    return agg


def _x(v) -> str:
    return "n/a" if v is None else f"{report.fmt(v)}×"


def _sat(flags: list) -> str:
    return f"saturated in {sum(flags)} of {len(flags)} runs" if any(flags) else ""


def summary_rows(raw: dict, agg: dict) -> list[tuple[str, str, str, str]]:
    """(measure, ratio, Moldau vs Kafka, verdict) per configuration, then memory."""
    r = report
    out = []
    for key, c in agg["configs"].items():
        wanted = [("produce MB/s", "MB/s", True, None)]
        wanted += [(f"produce ack p99 @ {rate} rec/s", "ms", False, str(rate)) for rate in raw["load"]["e2e_rates"]]
        wanted += [("consume MB/s", "MB/s", True, None)]
        for label, unit, higher, rate in wanted:
            q = c["ratio"][label]
            verdict = "n/a" if q is None else (
                "Moldau better" if (q > 1.0 if higher else q < 1.0) else
                "**Moldau worse**" if q != 1.0 else "equal")
            if rate is not None:
                notes = [f"{b.capitalize()} {_sat(c[b]['saturated'][rate])}" for b in BROKERS
                         if _sat(c[b]["saturated"][rate])]
                if notes:
                    verdict += " (" + "; ".join(notes) + ")"
            out.append((f"{key}: {label}", _x(q),
                        f"{r.fmt_s(c['moldau'][label], unit)} vs {r.fmt_s(c['kafka'][label], unit)} {unit}",
                        verdict))
    q = agg["rss_ratio"]
    cl = agg["clusters"]
    out.append((f"peak RSS summed over {NODES} processes", _x(q),
                f"{r.fmt_s(cl['moldau']['peak_rss_mib'], 'MB/s')} vs {r.fmt_s(cl['kafka']['peak_rss_mib'], 'MB/s')} MiB",
                "n/a" if q is None else ("Moldau better" if q < 1.0 else "**Moldau worse**")))
    return out


def markdown(raw: dict, agg: dict) -> str:
    r = report
    m = raw["machine"]
    load = raw["load"]
    la = agg["loadavg_1min"]
    rates = load["e2e_rates"]

    def la3(v) -> str:
        return ", ".join(f"{x:.1f}" for x in v)
    L = []
    L.append(f"# Moldau vs Apache Kafka, {raw['nodes']}-broker clusters, RF={raw['replication_factor']}, "
             f"acks={raw['acks']} — {raw['started'][:10]} ({raw['mode']} mode)")
    L.append("")
    L.append(f"Same machine, same run, one cluster at a time: {m['cpus']} cores ({m['cpu_model']}), "
             f"{m['mem_gib']} GiB RAM, kernel {m['kernel']}, Moldau at {m.get('git', '?')}"
             + (f" (broker source as of {m['broker_source']})" if m.get("broker_source") else "")
             + f", {m.get('java', '')}. "
             f"{raw['reps']} repetitions per cluster, interleaved (Moldau/Kafka order alternates); each "
             "repetition starts a fresh cluster. Figures are medians with the min–max spread in parentheses."
             + report.run_settings_line(m))
    L.append("")
    L.append(f"Machine load (load average, 1/5/15 min): {la3(m['loadavg_start'])} at the start, "
             + (f"{la3(m['loadavg_end'])} at the end" if m.get("loadavg_end") else "n/a at the end")
             + (f"; the 1-minute figure sampled at every cluster start and stop: {r.fmt(la['min'])}–"
                f"{r.fmt(la['max'])} (median {r.fmt(la['median'])})" if la else "")
             + f", on {m['cpus']} cores (the clusters under test count in it). Other work may share this "
             "machine, so compare ratios, not absolute figures.")
    L.append("")
    L.append(f"## Moldau ÷ Kafka (acks={raw['acks']}, {raw['nodes']} brokers, 1 partition, "
             f"RF={raw['replication_factor']}, min.insync.replicas={raw['min_insync_replicas']})")
    L.append("")
    L.append("| measure | Moldau / Kafka | Moldau vs Kafka | |")
    L.append("| --- | --- | --- | --- |")
    for t in summary_rows(raw, agg):
        L.append(f"| {t[0]} | {t[1]} | {t[2]} | {t[3]} |")
    L.append("")
    L.append("Throughput: a ratio above 1 favours Moldau; latency and memory: below 1 favours Moldau. "
             f"\"Saturated\": at that fixed rate the cluster acknowledged less than {SATURATED_BELOW:.0%} of the "
             "offered rate, so the records queued and the latency is mostly queueing time (the rate is not "
             "below that cluster's saturation point for one-record requests).")
    L.append("")
    L.append("## Results by configuration")
    L.append("")
    L.append("| config | metric | Moldau | Kafka | ratio |")
    L.append("| --- | --- | --- | --- | --- |")
    for key, c in agg["configs"].items():
        for label, _, unit, _ in metrics(raw):
            q = c["ratio"][label]
            L.append(f"| {key} | {label} ({unit}) | {r.fmt_s(c['moldau'][label], unit)} | "
                     f"{r.fmt_s(c['kafka'][label], unit)} | {_x(q)} |")
        for rate in rates:
            L.append(f"| {key} | runs saturated @ {rate} rec/s | "
                     f"{sum(c['moldau']['saturated'][str(rate)])} of {len(c['moldau']['saturated'][str(rate)])} | "
                     f"{sum(c['kafka']['saturated'][str(rate)])} of {len(c['kafka']['saturated'][str(rate)])} | |")
        L.append(f"| {key} | produce/consume runs without error | {c['moldau']['runs_ok']} | "
                 f"{c['kafka']['runs_ok']} | |")
    L.append("")
    cl = agg["clusters"]
    L.append("## Clusters")
    L.append("")
    L.append("| | Moldau | Kafka | ratio |")
    L.append("| --- | --- | --- | --- |")
    L.append(f"| peak RSS summed over {NODES} processes (VmHWM, MiB) | "
             f"{r.fmt_s(cl['moldau']['peak_rss_mib'], 'MB/s')} | "
             f"{r.fmt_s(cl['kafka']['peak_rss_mib'], 'MB/s')} | {_x(agg['rss_ratio'])} |")
    L.append(f"| start-up: processes launched → {NODES} brokers in Metadata (s) | "
             f"{r.fmt_s(cl['moldau']['startup_seconds'], 's/GiB')} | "
             f"{r.fmt_s(cl['kafka']['startup_seconds'], 's/GiB')} | |")
    for b in BROKERS:
        per = [i.get("peak_rss_kib_per_node") for i in raw["clusters"] if i["broker"] == b]
        nodes = "; ".join("/".join(f"{(k or 0) / 1024:.0f}" for k in pn) for pn in per if pn)
        L.append(f"| {b.capitalize()}: peak RSS of each node, by repetition (MiB) | {nodes or 'n/a'} | | |")
    L.append("")
    L.append("## Method")
    L.append("")
    common = ", ".join(f"{k}={v}" for k, v in raw["settings"]["common"].items())
    L.append(
        f"- Clusters: {NODES} Moldau brokers (`--cluster dir`, one shared cluster directory, the controller "
        f"elected by a lock) vs {NODES} Apache Kafka nodes (KRaft, each a combined broker + controller, a "
        f"{NODES}-voter quorum; jars from e2e/clients/kafka-dist, heap -Xms256m -Xmx768m per node, G1, as its "
        "kafka-up.sh). Every listener on 127.0.0.1, each node its own data directory; both at their default "
        f"durability (no fsync per write; acknowledged = in the page cache of every in-sync replica). Broker "
        f"settings on both: {common}.\n"
        f"- Topics: one per configuration, measure and repetition, 1 partition, {raw['replication_factor']} "
        f"replicas, min.insync.replicas={raw['min_insync_replicas']}, created through the admin API and used "
        "once its ISR is full. Load generator: `moldau-bench` (librdkafka), the same binary and settings for "
        f"both, bootstrapping from all {NODES} brokers; acks={raw['acks']}, keyless text-like records. Every "
        "fresh cluster first gets an unrecorded warm-up (bulk produce of both sizes, a consume, 2 s of paced "
        "one-record requests).\n"
        f"- Produce: one producer, as fast as it can for at most {load['produce_seconds']} s or "
        f"{load['produce_count']['100']:,} (100 B) / {load['produce_count']['1024']:,} (1 KiB) records; "
        "linger.ms=5, batch.size=1000000, idempotence off. \"p99 @ full load\" is send() to delivery report "
        "under that saturating load (mostly time queued in the client).\n"
        f"- Produce latency at a fixed rate: a paced producer ({' and '.join(str(x) for x in rates)} records/s, "
        f"{load['e2e_seconds']} s each, linger.ms=0, so one record per request, acks={raw['acks']}); latency "
        "= send() to acknowledgement (delivery reports are served while the producer waits for its next "
        "send); a consumer in the same process gives the end-to-end latency (same clock).\n"
        "- Consume: a fresh consumer reads the records just produced from offset 0 from the leader; "
        "throughput from the first to the last record.\n"
        f"- Cluster CPU = utime+stime of all {NODES} processes across produce + consume, per GiB produced + "
        f"consumed (replication traffic not counted in the GiB). Peak RSS = VmHWM of each of the {NODES} "
        "processes at the end of a repetition, summed.")
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
        {"kind": "cluster", "started": raw["started"], "mode": raw["mode"], "reps": raw["reps"],
         "machine": raw["machine"], "loadavg_samples": raw.get("loadavg_samples"), "summary": agg,
         "ratios": [{"measure": t[0], "ratio": t[1], "detail": t[2], "verdict": t[3].replace("*", "")}
                    for t in summary_rows(raw, agg)]},
        indent=1))
    (out / "results.md").write_text(markdown(raw, agg))


def main(args) -> int:
    if args.report_only:
        render(Path(args.out))
        return 0
    r = ClusterRunner(args)
    try:
        r.run()
    finally:
        r.save()
        render(r.out)
    log(f"results: {r.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit("run it as bench/run.sh --cluster")
