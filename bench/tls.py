"""TLS (`bench/run.sh --tls`): produce and consume over an SSL listener,
Moldau against Apache Kafka over its SSL listener, one broker at a time,
order alternating. Each broker also serves a PLAINTEXT listener, measured
in the same process, so the report gives each side's cost of TLS beside
the ratio between them: 100 B and 1 KiB records, acks=1 and acks=all,
uncompressed, librdkafka's load generator (`moldau-bench produce` and
`consume`, one connection each) with `security.protocol=SSL` for the TLS
runs. The certificates are made with the `openssl` command: a CA and a
broker certificate for 127.0.0.1 (P-256), TLS 1.3 as both sides
negotiate it. Results: OUT/results.{md,json}.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from common import (GIB, KAFKA_DIST, BenchRunner, Kafka, Moldau, free_port, log, median, proc_cpu_seconds,
                    repetition, run_reps, wait_port)

SIZES = [100, 1024]
ACKS = ["1", "all"]
TRANSPORTS = ["plaintext", "tls"]

MODES = {
    "quick": {
        "produce_count": {100: 3_000_000, 1024: 600_000},
        "produce_seconds": 3.0,
        "consume_seconds": 20.0,
    },
    "full": {
        "produce_count": {100: 15_000_000, 1024: 2_000_000},
        "produce_seconds": 15.0,
        "consume_seconds": 60.0,
    },
}


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path) -> Path:
    """`d/ca.pem` and the broker's PEM keystore `d/broker.pem` (key and
    certificate, subjectAltName 127.0.0.1)."""
    d.mkdir(parents=True, exist_ok=True)
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    openssl("req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=moldau-bench-ca", cwd=d)
    openssl("req", *curve, "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=broker", cwd=d)
    (d / "broker.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "broker.crt", "-days", "2", "-extfile", "broker.ext", cwd=d)
    (d / "broker.pem").write_text((d / "broker.key").read_text() + (d / "broker.crt").read_text())
    return d


def tls_props(pki: Path) -> dict[str, str]:
    """The SSL listener's settings, the same on both brokers."""
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki / "ca.pem"),
    }


class TlsMoldau(Moldau):
    """A Moldau broker with a PLAINTEXT listener (`port`) and an SSL one
    (`tls_port`)."""
    pki: Path

    def spawn(self) -> None:
        self.port, self.tls_port, self.http_port = free_port(), free_port(), free_port()
        self.datadir.mkdir(parents=True, exist_ok=True)
        listeners = f"PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.tls_port}"
        props = {"listeners": listeners, "advertised.listeners": listeners, **tls_props(self.pki)}
        sets = [a for k, v in props.items() for a in ("--set", f"{k}={v}")]
        with open(self.logfile, "a") as out:
            self.proc = subprocess.Popen(
                [str(self.binary), "--listen", f"127.0.0.1:{self.port}",
                 "--http-listen", f"127.0.0.1:{self.http_port}", "--data-dir", str(self.datadir),
                 "--log", os.environ.get("MOLDAU_BENCH_LOG", "warn"), *sets],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def start(self) -> None:
        super().start()
        if not wait_port(self.tls_port, 60, lambda: self.proc.poll() is None):
            raise RuntimeError(f"moldau's SSL listener did not start (see {self.logfile})")


class TlsKafka(Kafka):
    """A Kafka node with a PLAINTEXT listener (`port`, also inter-broker),
    an SSL one (`tls_port`) and its controller listener, through the start
    script's KAFKA_EXTRA_PROPS (whose lines win over the generated ones)."""
    pki: Path

    def start(self) -> None:
        self.port, self.tls_port, controller = free_port(), free_port(), free_port()
        self.datadir.mkdir(parents=True, exist_ok=True)
        props = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.tls_port},"
                         f"CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.tls_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            **tls_props(self.pki),
        }
        extra = self.datadir.parent / f"{self.datadir.name}-tls.properties"
        extra.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        env = {**os.environ, "KAFKA_EXTRA_PROPS": str(extra), "KAFKA_CONTROLLER_PORT": str(controller)}
        subprocess.run([str(KAFKA_DIST / "kafka-up.sh"), "--daemon", "--wait", "240", str(self.port),
                        str(self.datadir)], check=True, stdout=subprocess.DEVNULL, timeout=300, env=env)
        self._pid = int((self.datadir / "kafka.pid").read_text().strip())
        if not wait_port(self.tls_port, 60, lambda: True):
            raise RuntimeError(f"kafka's SSL listener did not start ({self.datadir}/kafka.out)")


class TlsRunner(BenchRunner):
    def __init__(self, args):
        super().__init__(args, MODES, kind="tls", sizes=SIZES, acks=ACKS, transports=TRANSPORTS)
        self.pki = make_pki(self.out / "pki")
        TlsMoldau.pki = self.pki
        TlsKafka.pki = self.pki

    def client_env(self, transport: str) -> dict:
        if transport == "plaintext":
            return {}
        return {"MOLDAU_BENCH_CLIENT_CONFIG": f"security.protocol=SSL\nssl.ca.location={self.pki / 'ca.pem'}\n"}

    def tool_over(self, transport: str, *argv: str, timeout: float) -> dict:
        saved = os.environ.get("MOLDAU_BENCH_CLIENT_CONFIG")
        os.environ.update(self.client_env(transport))
        try:
            return self.tool(*argv, timeout=timeout)
        finally:
            os.environ.pop("MOLDAU_BENCH_CLIENT_CONFIG", None)
            if saved is not None:
                os.environ["MOLDAU_BENCH_CLIENT_CONFIG"] = saved

    def run_broker(self, broker, rep: int) -> None:
        row = {"broker": broker.name, "rep": rep, "configs": []}
        with repetition(self, broker, rep, row):
            broker.start()
            ports = {"plaintext": broker.port, "tls": broker.tls_port}
            # warm-up over both listeners, unrecorded
            for transport in TRANSPORTS:
                bootstrap = f"127.0.0.1:{ports[transport]}"
                topic = f"bench-warmup-{transport}"
                self.tool_over(transport, "create-topic", "--bootstrap", bootstrap, "--topic", topic, timeout=60)
                self.tool_over(transport, "produce", "--bootstrap", bootstrap, "--topic", topic, "--size", "1024",
                               "--count", "200000", "--max-seconds", "2", timeout=120)
            for size in SIZES:
                for acks in ACKS:
                    for transport in TRANSPORTS:
                        bootstrap = f"127.0.0.1:{ports[transport]}"
                        row["configs"].append(self.run_config(broker, bootstrap, transport, size, acks))
                        self.save()

    def run_config(self, broker, bootstrap: str, transport: str, size: int, acks: str) -> dict:
        m = self.mode
        topic = f"bench-{transport}-{size}-{acks}"
        out = {"transport": transport, "size": size, "acks": acks}
        self.tool_over(transport, "create-topic", "--bootstrap", bootstrap, "--topic", topic, timeout=60)
        c0 = proc_cpu_seconds(broker.pid)
        prod = self.tool_over(transport, "produce", "--bootstrap", bootstrap, "--topic", topic,
                              "--size", str(size), "--acks", acks, "--compression", "none",
                              "--count", str(m["produce_count"][size]), "--max-seconds", str(m["produce_seconds"]),
                              timeout=m["produce_seconds"] + 120)
        c1 = proc_cpu_seconds(broker.pid)
        cons = self.tool_over(transport, "consume", "--bootstrap", bootstrap, "--topic", topic,
                              "--count", str(prod["acked"]), "--max-seconds", str(m["consume_seconds"]),
                              timeout=m["consume_seconds"] + 60)
        c2 = proc_cpu_seconds(broker.pid)
        out.update(produce=prod, consume=cons)
        if None not in (c0, c1, c2):
            if prod["bytes"]:
                out["broker_cpu_s_per_gib_produce"] = (c1 - c0) / (prod["bytes"] / GIB)
            if cons["bytes"]:
                out["broker_cpu_s_per_gib_consume"] = (c2 - c1) / (cons["bytes"] / GIB)
        log(f"  {broker.name} {transport} {size} B acks={acks}: produce {prod['mb_per_sec']:.1f} MB/s "
            f"(p99 {prod['lat_p99_ms']:.2f} ms), consume {cons['mb_per_sec']:.1f} MB/s")
        return out

    def figures(self, broker: str, transport: str, size: int, acks: str, key: str) -> list:
        vals = []
        for run in self.raw["runs"]:
            if run.get("broker") != broker:
                continue
            for c in run.get("configs", []):
                if (c["transport"], c["size"], c["acks"]) == (transport, size, acks):
                    phase, field = key.split(".", 1) if "." in key else (None, key)
                    vals.append(c.get(phase, {}).get(field) if phase else c.get(field))
        return vals

    def report(self) -> None:
        rows = []
        measures = [("produce MB/s", "produce.mb_per_sec", True), ("produce p99 ms", "produce.lat_p99_ms", False),
                    ("consume MB/s", "consume.mb_per_sec", True),
                    ("broker CPU s/GiB produced", "broker_cpu_s_per_gib_produce", False),
                    ("broker CPU s/GiB consumed", "broker_cpu_s_per_gib_consume", False)]
        summary = {}
        for size in SIZES:
            for acks in ACKS:
                for label, key, higher in measures:
                    med = {(b, t): median(self.figures(b, t, size, acks, key))
                           for b in ("moldau", "kafka") for t in TRANSPORTS}

                    def ratio(a, b):
                        return a / b if a and b else None
                    entry = {
                        "size": size, "acks": acks, "measure": label, "higher_is_better": higher,
                        "moldau_tls": med[("moldau", "tls")], "kafka_tls": med[("kafka", "tls")],
                        "tls_ratio": ratio(med[("moldau", "tls")], med[("kafka", "tls")]),
                        "plaintext_ratio": ratio(med[("moldau", "plaintext")], med[("kafka", "plaintext")]),
                        "moldau_tls_vs_plaintext": ratio(med[("moldau", "tls")], med[("moldau", "plaintext")]),
                        "kafka_tls_vs_plaintext": ratio(med[("kafka", "tls")], med[("kafka", "plaintext")]),
                    }
                    rows.append(entry)
        summary["rows"] = rows
        (self.out / "results.json").write_text(json.dumps({"raw": self.raw, **summary}, indent=1))

        def f(v, digits=2):
            return "–" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.{digits}f}")

        def x(v):
            return "–" if v is None else f"{v:.2f}×"
        m = self.raw.get("machine", {})
        lines = [
            f"# Produce and consume over TLS, Moldau vs Apache Kafka, one broker — {self.raw['started'][:10]} "
            f"({self.raw['mode']} mode)",
            "",
            f"Same machine, same run, one broker at a time, order alternating: {m.get('cpus')} cores "
            f"({m.get('cpu_model', '')}), Kafka {m.get('kafka', '')}, Moldau at {m.get('git', '')}, "
            f"{self.args.reps} repetition(s) per broker; medians. Each broker serves a PLAINTEXT and an SSL "
            "listener; the plaintext columns are the same broker process over its PLAINTEXT listener, so each "
            "side's cost of TLS is measured in the same run. Load: `moldau-bench produce` then `consume` "
            "(librdkafka, one connection each, `security.protocol=SSL` and the CA for the TLS runs), "
            "uncompressed records, one partition. Certificates: P-256, made with `openssl`. Load average at "
            f"start {m.get('loadavg_start')}, at end {m.get('loadavg_end')}.",
            "",
            "| records | acks | measure | Moldau TLS | Kafka TLS | Moldau ÷ Kafka over TLS | "
            "Moldau ÷ Kafka in plaintext | Moldau TLS ÷ plaintext | Kafka TLS ÷ plaintext |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in rows:
            lines.append(f"| {r['size']} B | {r['acks']} | {r['measure']} | {f(r['moldau_tls'])} | {f(r['kafka_tls'])} | "
                         f"{x(r['tls_ratio'])} | {x(r['plaintext_ratio'])} | {x(r['moldau_tls_vs_plaintext'])} | "
                         f"{x(r['kafka_tls_vs_plaintext'])} |")
        if self.raw["errors"]:
            lines += ["", "## Errors", ""] + [f"- {e}" for e in self.raw["errors"]]
        lines += ["", "Throughput: a ratio above 1 favours Moldau; latency and CPU: below 1 favours Moldau.", ""]
        (self.out / "results.md").write_text("\n".join(lines))


def main(args) -> int:
    if args.reps is None:
        args.reps = 1 if args.quick else 3
    runner = TlsRunner(args)
    log(f"TLS benchmark ({runner.raw['mode']}, {args.reps} repetitions) -> {runner.out}")
    return run_reps(runner, moldau=TlsMoldau, kafka=TlsKafka)
