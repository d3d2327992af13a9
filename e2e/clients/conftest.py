"""Fixtures of the client-compatibility suite.

- `broker`: one broker process for the whole session (Moldau or Apache Kafka,
  see harness/broker.py), on 127.0.0.1 with a free port and a fresh data dir.
- `restart_broker` (alias `own_broker`): a broker process of one module's own,
  which its tests may stop, kill, restart or feed malformed bytes; it never
  disturbs `broker`.
- `new_topic(partitions=1, configs=None)`: creates a uniquely named topic with
  the confluent-kafka AdminClient and waits until its leaders are known.
- `check_healthy(broker)`: a real client still produces and consumes.

Broker logs stay in e2e/.state/clients/<run>/ (data dirs are removed).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from harness import broker as brokers
from harness.clients import ConfluentClient
from harness.records import assert_same, gen_records

STATE = brokers.REPO / "e2e" / ".state" / "clients" / time.strftime("run-%Y%m%d-%H%M%S")


def pytest_report_header(config):
    t = brokers.target()
    extra = ""
    if t == "moldau":
        extra = f" bin={os.environ.get('MOLDAU_BROKER_BIN', brokers.REPO / 'target/release/moldau-broker')}"
    return [f"broker under test: {t}{extra}", f"broker logs: {STATE}"]


def _start(name: str) -> brokers.Broker:
    b = brokers.new_broker(STATE / name)
    try:
        b.start()
    except Exception:
        b.close(keep=True)
        raise
    return b


def _close(b: brokers.Broker) -> None:
    b.close(keep=True)
    # logs are kept; data is not
    import shutil

    shutil.rmtree(b.data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def broker():
    b = _start("shared")
    yield b
    _close(b)


@pytest.fixture(scope="module")
def restart_broker(request):
    b = _start(f"own-{request.module.__name__}")
    yield b
    _close(b)


# a broker of the module's own, for tests that may break or crash it
own_broker = restart_broker


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin_for(b: brokers.Broker):
    from confluent_kafka.admin import AdminClient

    from harness.clients import RDKAFKA_LOGGER

    return AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "moldau-e2e-admin", "logger": RDKAFKA_LOGGER})


def create_topic(b: brokers.Broker, name: str, partitions: int = 1, configs: dict | None = None, timeout: float = 30):
    from confluent_kafka.admin import NewTopic

    a = admin_for(b)
    fs = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs or {})], request_timeout=timeout)
    fs[name].result(timeout)
    wait_topic_ready(b, name, partitions, timeout)
    return name


def wait_topic_ready(b: brokers.Broker, name: str, partitions: int, timeout: float = 30) -> None:
    a = admin_for(b)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = a.list_topics(name, timeout=10)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(p.leader >= 0 for p in t.partitions.values()):
            return
        last = t.error if t is not None else "absent"
        time.sleep(0.2)
    raise AssertionError(f"topic {name} not ready with {partitions} partitions within {timeout}s: {last}")


@pytest.fixture
def new_topic(broker):
    def make(partitions: int = 1, configs: dict | None = None, prefix: str = "t") -> str:
        return create_topic(broker, unique(prefix), partitions, configs)

    return make


def retry_retriable(fn, timeout: float = 20.0):
    """Call fn(); on a *retriable* Kafka error (e.g. leadership settling right after
    a restart) call it again, for at most `timeout` seconds, as real clients do."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if err is None or not err.retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def check_healthy(b: brokers.Broker) -> None:
    """The broker process is alive and a real client can still produce and consume."""
    assert b.alive(), f"broker process died; log tail:\n{b.log_tail()}"
    name = create_topic(b, unique("health"))
    recs = gen_records(5, seed=99, large_value=False)
    c = ConfluentClient()
    offs = c.produce(b.bootstrap, name, 0, recs)
    assert offs == list(range(5))
    assert_same(recs, c.consume(b.bootstrap, name, 0, 0, 5))


@pytest.fixture
def healthy(broker):
    return lambda: check_healthy(broker)
