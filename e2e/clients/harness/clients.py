"""Adapters that drive each real Kafka client the way an application would.

Every adapter has the same two operations:
  produce(bootstrap, topic, partition, records, compression) -> acknowledged offsets
      (acks=all, idempotence disabled, one partition, in order)
  consume(bootstrap, topic, partition, start, count, timeout) -> [Consumed]
      (assign + seek, no consumer group)
so that tests can be written once and run for each client, and producers and
consumers of different clients can be crossed.
"""

from __future__ import annotations

import asyncio
import logging
import base64
import os
import subprocess
import time
from pathlib import Path

from .records import Consumed, Record

# librdkafka logs through Python logging (captured by pytest, shown on failure)
# instead of writing to stderr from its own threads.
RDKAFKA_LOGGER = logging.getLogger("rdkafka")


def metadata_refused(conf: dict, refusal, timeout: float):
    """A producer with `conf` asks for metadata, which must fail: returns
    the KafkaException and the errors librdkafka reported (error_cb), or
    raises AssertionError if metadata was answered. librdkafka reports a
    refused handshake or login through error_cb at once and then keeps
    trying until a metadata call's timeout: once `refusal(reported)` holds,
    the call gets a second, else the whole `timeout`."""
    from confluent_kafka import KafkaException, Producer

    reported: list = []
    p = Producer({"logger": RDKAFKA_LOGGER, "error_cb": reported.append, **conf})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not refusal(reported):
        p.poll(0.1)
    try:
        md = p.list_topics(timeout=1.0 if refusal(reported) else max(1.0, deadline - time.monotonic()))
    except KafkaException as e:
        p.poll(0.5)  # deliver any error_cb pending
        return e, reported
    raise AssertionError(f"metadata answered: brokers {md.brokers}")


def deliver(p, topic: str, partition: int, sends: list[dict], timeout: float) -> tuple[list[int | None], int, list[str]]:
    """Produces each of `sends` (keyword arguments of confluent-kafka's
    Producer.produce: value, key, headers, timestamp) to `topic`'s
    `partition` with the producer `p`, in order, then flushes for up to
    `timeout` seconds: the offsets acknowledged (None where not), how many
    records are left undelivered, and the delivery errors."""
    offsets: list[int | None] = [None] * len(sends)
    errors: list[str] = []

    def on_delivery(i):
        def cb(err, msg):
            if err is not None:
                errors.append(f"record {i}: {err}")
            else:
                offsets[i] = msg.offset()

        return cb

    for i, kwargs in enumerate(sends):
        p.produce(topic, partition=partition, on_delivery=on_delivery(i), **kwargs)
        p.poll(0)
    left = p.flush(timeout)
    return offsets, left, errors


def poll_assigned(c, topic: str, partition: int, start: int, count: int, timeout: float, on_error) -> list:
    """Assigns the confluent-kafka consumer `c` `topic`'s `partition` from
    offset `start` (no group is joined) and polls until it has `count`
    messages or `timeout` seconds have passed, then closes it: the messages
    (fewer than `count` if time ran out). A message with an error raises
    `on_error(error)`."""
    from confluent_kafka import TopicPartition

    out: list = []
    try:
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise on_error(m.error())
            out.append(m)
    finally:
        c.close()
    return out


CLIENTS_DIR = Path(__file__).resolve().parent.parent
JAVA_DIR = CLIENTS_DIR / "java"

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


class ClientError(AssertionError):
    pass


class Client:
    name = "?"
    null_header_values = True

    def produce(self, bootstrap: str, topic: str, partition: int, records: list[Record], compression: str = "none") -> list[int]:
        raise NotImplementedError

    def consume(self, bootstrap: str, topic: str, partition: int, start: int, count: int, timeout: float = 30.0) -> list[Consumed]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


# ---------------------------------------------------------------------------
class ConfluentClient(Client):
    """confluent-kafka (librdkafka)."""

    name = "confluent"

    def produce(self, bootstrap, topic, partition, records, compression="none"):
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                "compression.type": compression,
                "linger.ms": 5,
                "max.in.flight.requests.per.connection": 1,
                "message.send.max.retries": 0,
                "message.timeout.ms": 30000,
                "client.id": "moldau-e2e-confluent",
                "logger": RDKAFKA_LOGGER,
            }
        )
        sends = [dict(value=r.value, key=r.key, timestamp=r.timestamp, headers=list(r.headers)) for r in records]
        offsets, left, errors = deliver(p, topic, partition, sends, 60)
        if left or errors:
            raise ClientError(f"confluent produce: {left} undelivered, errors: {errors[:5]}")
        return offsets

    def consumer(self, bootstrap):
        from confluent_kafka import Consumer

        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                # confluent-kafka requires a group.id even for assign(); nothing is
                # committed and no group is joined (no subscribe()).
                "group.id": "moldau-e2e-assign-only",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "error",
                "client.id": "moldau-e2e-confluent",
                "logger": RDKAFKA_LOGGER,
            }
        )

    def consume(self, bootstrap, topic, partition, start, count, timeout=30.0):
        from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

        messages = poll_assigned(
            self.consumer(bootstrap), topic, partition, start, count, timeout,
            lambda e: ClientError(f"confluent consume: {e}"),
        )
        out: list[Consumed] = []
        for m in messages:
            tstype, ts = m.timestamp()
            tsname = {TIMESTAMP_CREATE_TIME: "CreateTime", TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}.get(tstype, "?")
            out.append(Consumed(m.offset(), Record(m.key(), m.value(), tuple(m.headers() or ()), ts), tsname))
        if len(out) < count:
            raise ClientError(f"confluent consume: {len(out)} of {count} records within {timeout}s")
        return out


# ---------------------------------------------------------------------------
class KafkaPythonClient(Client):
    """kafka-python (pure Python)."""

    name = "kafka-python"
    null_header_values = False  # KafkaProducer.send rejects (name, None) headers

    def produce(self, bootstrap, topic, partition, records, compression="none"):
        from kafka import KafkaProducer

        p = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=False,
            compression_type=None if compression == "none" else compression,
            linger_ms=5,
            max_in_flight_requests_per_connection=1,
            retries=0,
            request_timeout_ms=30000,
            client_id="moldau-e2e-kafka-python",
        )
        try:
            futs = [
                p.send(topic, value=r.value, key=r.key, partition=partition, timestamp_ms=r.timestamp, headers=list(r.headers))
                for r in records
            ]
            p.flush(60)
            return [f.get(timeout=60).offset for f in futs]
        finally:
            p.close(timeout=10)

    def consume(self, bootstrap, topic, partition, start, count, timeout=30.0):
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            client_id="moldau-e2e-kafka-python",
            request_timeout_ms=30000,
        )
        out: list[Consumed] = []
        try:
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            c.seek(tp, start)
            deadline = time.monotonic() + timeout
            while len(out) < count and time.monotonic() < deadline:
                for batch in c.poll(timeout_ms=500).values():
                    for m in batch:
                        if len(out) < count:
                            tsname = {0: "CreateTime", 1: "LogAppendTime"}.get(m.timestamp_type, "?")
                            out.append(Consumed(m.offset, Record(m.key, m.value, tuple(m.headers or ()), m.timestamp), tsname))
        finally:
            c.close()
        if len(out) < count:
            raise ClientError(f"kafka-python consume: {len(out)} of {count} records within {timeout}s")
        return out


# ---------------------------------------------------------------------------
class AioKafkaClient(Client):
    """aiokafka (asyncio)."""

    name = "aiokafka"

    def produce(self, bootstrap, topic, partition, records, compression="none"):
        return asyncio.run(self._produce(bootstrap, topic, partition, records, compression))

    async def _produce(self, bootstrap, topic, partition, records, compression):
        from aiokafka import AIOKafkaProducer

        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=False,
            compression_type=None if compression == "none" else compression,
            linger_ms=5,
            request_timeout_ms=30000,
            client_id="moldau-e2e-aiokafka",
        )
        await p.start()
        try:
            futs = []
            for r in records:
                futs.append(
                    await p.send(topic, value=r.value, key=r.key, partition=partition, timestamp_ms=r.timestamp, headers=list(r.headers))
                )
            metas = await asyncio.wait_for(asyncio.gather(*futs), 60)
            return [m.offset for m in metas]
        finally:
            await p.stop()

    def consume(self, bootstrap, topic, partition, start, count, timeout=30.0):
        return asyncio.run(self._consume(bootstrap, topic, partition, start, count, timeout))

    async def _consume(self, bootstrap, topic, partition, start, count, timeout):
        from aiokafka import AIOKafkaConsumer, TopicPartition

        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            client_id="moldau-e2e-aiokafka",
            request_timeout_ms=30000,
        )
        await c.start()
        out: list[Consumed] = []
        try:
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            c.seek(tp, start)
            deadline = time.monotonic() + timeout
            while len(out) < count and time.monotonic() < deadline:
                got = await c.getmany(tp, timeout_ms=500)
                for m in got.get(tp, []):
                    if len(out) < count:
                        tsname = {0: "CreateTime", 1: "LogAppendTime"}.get(m.timestamp_type, "?")
                        out.append(Consumed(m.offset, Record(m.key, m.value, tuple(m.headers or ()), m.timestamp), tsname))
        finally:
            await c.stop()
        if len(out) < count:
            raise ClientError(f"aiokafka consume: {len(out)} of {count} records within {timeout}s")
        return out


# ---------------------------------------------------------------------------
def _b64n(b: bytes | None) -> str:
    return "~" if b is None else base64.b64encode(b).decode()


def _unb64n(s: str) -> bytes | None:
    return None if s == "~" else base64.b64decode(s)


def java_program_classpath(program: str) -> str:
    """The class path to run `io.moldau.e2e.<program>` with the kafka-clients
    jars: maven's build (scripts/install-test-deps.sh) when it is up to date,
    else that one class compiled with javac into e2e/.state. Raises
    ClientError when the jars are missing."""
    from .broker import REPO

    lib = JAVA_DIR / "target" / "lib"
    classes = JAVA_DIR / "target" / "classes"
    src = JAVA_DIR / "src" / "main" / "java" / "io" / "moldau" / "e2e" / f"{program}.java"
    if not lib.is_dir():
        raise ClientError("Java client not built: run scripts/install-test-deps.sh")
    built = classes / "io" / "moldau" / "e2e" / f"{program}.class"
    if built.exists() and built.stat().st_mtime >= src.stat().st_mtime:
        return f"{classes}{os.pathsep}{lib}/*"
    out = REPO / "e2e" / ".state" / "clients" / f"java-{program.lower()}"
    cls = out / "io" / "moldau" / "e2e" / f"{program}.class"
    if not cls.exists() or cls.stat().st_mtime < src.stat().st_mtime:
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-d", str(out), "-cp", f"{lib}/*", str(src)],
                       check=True, capture_output=True, timeout=180)
    return f"{out}{os.pathsep}{lib}/*"


FRANZ_DIR = CLIENTS_DIR / "franz"


def franz_program() -> Path:
    """The franz-go driver (e2e/clients/franz, a Go program): built with
    `go build` into e2e/.state/clients/franz/franz when missing or older
    than its sources (main.go, go.mod, go.sum), from the module cache only
    (GOPROXY=off: scripts/install-test-deps.sh downloads the modules and
    builds it). Raises ClientError when Go or the modules are missing."""
    import shutil

    from .broker import REPO

    out_dir = REPO / "e2e" / ".state" / "clients" / "franz"
    binary = out_dir / "franz"
    sources = [FRANZ_DIR / n for n in ("main.go", "go.mod", "go.sum")]
    newest = max(s.stat().st_mtime for s in sources)
    if binary.exists() and binary.stat().st_mtime >= newest:
        return binary
    go = shutil.which("go")
    if go is None:
        raise ClientError("Go not found (franz-go driver e2e/clients/franz needs Go >= 1.26): install it, then run scripts/install-test-deps.sh")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f"franz.tmp-{os.getpid()}"
    env = {**os.environ, "GOPROXY": "off", "GOTOOLCHAIN": "local"}
    try:
        p = subprocess.run(
            [go, "build", "-mod=readonly", "-buildvcs=false", "-o", str(tmp), "."],
            cwd=FRANZ_DIR, env=env, capture_output=True, text=True, timeout=600,
        )
    except subprocess.TimeoutExpired as e:
        raise ClientError(f"go build of e2e/clients/franz took over {e.timeout}s") from e
    if p.returncode != 0:
        tmp.unlink(missing_ok=True)
        hint = ""
        if "GOPROXY=off" in p.stderr or "missing go.sum entry" in p.stderr or "cannot find module" in p.stderr:
            hint = "the Go modules of e2e/clients/franz are not downloaded: run scripts/install-test-deps.sh. "
        raise ClientError(f"franz-go driver not built: {hint}go build exited {p.returncode}: {p.stderr[-3000:]}")
    os.replace(tmp, binary)
    return binary


class JavaClient(Client):
    """org.apache.kafka:kafka-clients via e2e/clients/java (ClientCheck)."""

    name = "java"

    @staticmethod
    def classpath() -> str:
        classes = JAVA_DIR / "target" / "classes"
        lib = JAVA_DIR / "target" / "lib"
        if not (classes / "io" / "moldau" / "e2e" / "ClientCheck.class").exists() or not lib.is_dir():
            raise ClientError(
                "Java client not built: run scripts/install-test-deps.sh "
                "(mvn package dependency:copy-dependencies in e2e/clients/java)"
            )
        return f"{classes}{os.pathsep}{lib}/*"

    def _run(self, args: list[str], stdin: str = "", timeout: float = 90.0) -> subprocess.CompletedProcess:
        cmd = [
            os.environ.get("JAVA", "java"),
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            self.classpath(),
            "io.moldau.e2e.ClientCheck",
            *args,
        ]
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)

    def produce(self, bootstrap, topic, partition, records, compression="none"):
        lines = []
        for r in records:
            hs = ",".join(f"{base64.b64encode(k.encode()).decode()}:{_b64n(v)}" for k, v in r.headers)
            lines.append(f"{_b64n(r.key)}\t{_b64n(r.value)}\t{r.timestamp}\t{hs}")
        p = self._run(["produce", bootstrap, topic, str(partition), compression], "\n".join(lines) + "\n")
        if p.returncode != 0:
            raise ClientError(f"java produce exited {p.returncode}: {p.stderr[-3000:]}")
        return [int(x) for x in p.stdout.split()]

    def consume(self, bootstrap, topic, partition, start, count, timeout=30.0):
        p = self._run(
            ["consume", bootstrap, topic, str(partition), str(start), str(count), str(int(timeout * 1000))],
            timeout=timeout + 60,
        )
        if p.returncode != 0:
            raise ClientError(f"java consume exited {p.returncode}: {p.stderr[-3000:]}")
        out = []
        for line in p.stdout.splitlines():
            off, k, v, ts, hs, tstype = line.split("\t")
            headers = []
            if hs:
                for h in hs.split(","):
                    hk, hv = h.split(":")
                    headers.append((base64.b64decode(hk).decode(), _unb64n(hv)))
            out.append(Consumed(int(off), Record(_unb64n(k), _unb64n(v), tuple(headers), int(ts)), tstype))
        return out

    def offsets(self, bootstrap, topic, partition) -> tuple[int, int]:
        p = self._run(["offsets", bootstrap, topic, str(partition)])
        if p.returncode != 0:
            raise ClientError(f"java offsets exited {p.returncode}: {p.stderr[-3000:]}")
        lo, hi = p.stdout.split()
        return int(lo), int(hi)


ALL_CLIENTS: list[Client] = [ConfluentClient(), KafkaPythonClient(), AioKafkaClient(), JavaClient()]
BY_NAME = {c.name: c for c in ALL_CLIENTS}
