"""Transactions with real clients (confluent-kafka / librdkafka, and the Java client's
TxnCheck): init_transactions, commit and abort, a read_committed consumer that sees
only committed records, and a second producer instance with the same
transactional.id fencing the first.

Runs against Moldau and Apache Kafka alike (MOLDAU_TEST_TARGET).
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from conftest import unique
from harness.clients import RDKAFKA_LOGGER, ClientError, java_program_classpath


def producer(bootstrap: str, transactional_id: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60000,
            "client.id": "moldau-e2e-txn",
            "logger": RDKAFKA_LOGGER,
        }
    )


def read_all(bootstrap: str, topic: str, isolation: str, expect: int, timeout: float = 30.0) -> list[bytes]:
    """Every value of partition 0 a consumer at `isolation` reads, until it has
    `expect` or reaches the end of what it may read."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "moldau-e2e-txn-assign-only",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "client.id": "moldau-e2e-txn",
            "logger": RDKAFKA_LOGGER,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF and len(values) >= expect:
                    break
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            values.append(m.value())
        return values
    finally:
        c.close()


def send(p: Producer, topic: str, values: list[str]) -> None:
    for v in values:
        p.produce(topic, value=v.encode(), partition=0)
    p.flush(30)


def test_commit_and_abort_with_a_read_committed_consumer(broker, new_topic):
    topic = new_topic()
    p = producer(broker.bootstrap, unique("txn"))
    p.init_transactions(30)

    p.begin_transaction()
    send(p, topic, [f"c{i}" for i in range(5)])
    p.commit_transaction(30)

    p.begin_transaction()
    send(p, topic, [f"a{i}" for i in range(3)])
    p.abort_transaction(30)

    p.begin_transaction()
    send(p, topic, ["c5"])
    p.commit_transaction(30)

    committed = [f"c{i}".encode() for i in range(6)]
    assert read_all(broker.bootstrap, topic, "read_committed", 6) == committed
    everything = read_all(broker.bootstrap, topic, "read_uncommitted", 9)
    assert sorted(everything) == sorted(committed + [f"a{i}".encode() for i in range(3)])


def test_a_new_instance_fences_the_old_one(broker, new_topic):
    topic = new_topic()
    tid = unique("txn")
    old = producer(broker.bootstrap, tid)
    old.init_transactions(30)
    old.begin_transaction()
    send(old, topic, ["zombie"])

    new = producer(broker.bootstrap, tid)
    new.init_transactions(60)  # aborts the old instance's open transaction first
    new.begin_transaction()
    send(new, topic, ["live"])
    new.commit_transaction(30)

    with pytest.raises(KafkaException) as e:
        old.commit_transaction(30)
    err = e.value.args[0]
    assert err.fatal() or err.txn_requires_abort(), err
    assert read_all(broker.bootstrap, topic, "read_committed", 1) == [b"live"]


def test_java_client_commits_aborts_and_is_fenced(broker, new_topic):
    topic = new_topic()
    try:
        cp = java_program_classpath("TxnCheck")
    except ClientError as e:
        pytest.fail(str(e))
    cmd = [
        os.environ.get("JAVA", "java"), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp,
        "io.moldau.e2e.TxnCheck", "run", broker.bootstrap, topic, unique("java-txn"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-4000:]
    lines = r.stdout.split()
    assert lines == [f"c{i}" for i in range(6)] + ["FENCED"], r.stdout + r.stderr[-2000:]
