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


def produce_plain(bootstrap: str, topic: str, values: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "logger": RDKAFKA_LOGGER})
    for i, v in enumerate(values):
        p.produce(topic, key=str(i).encode(), value=v.encode())
    assert p.flush(30) == 0


def read_topic(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 30.0) -> list[bytes]:
    """Every value of every partition a read_committed consumer reads, until it has
    `expect` and every partition is at its end."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("txn-reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "logger": RDKAFKA_LOGGER,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    if len(values) >= expect and len(at_end) == partitions:
                        break
                    continue
                raise KafkaException(m.error())
            at_end.discard(m.partition())
            values.append(m.value())
        return values
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, as a consumer of the group reads them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "logger": RDKAFKA_LOGGER})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def test_consume_transform_produce_commits_offsets_with_the_transaction(broker, new_topic):
    """confluent-kafka's send_offsets_to_transaction (TxnOffsetCommit with the consumer's
    group metadata): the first transaction is aborted (its output and offsets vanish, the
    consumer goes back to the committed offsets), the rest commit; every input shows up
    exactly once in the output, and the group's offsets end at the input's end."""
    src, dst = new_topic(partitions=3), new_topic(partitions=3)
    n = 120
    inputs = [f"v{i}" for i in range(n)]
    produce_plain(broker.bootstrap, src, inputs)
    group = unique("etl")
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "logger": RDKAFKA_LOGGER,
        }
    )
    p = producer(broker.bootstrap, unique("etl-txn"))
    p.init_transactions(30)
    consumer.subscribe([src])
    processed, aborted = 0, 0
    deadline = time.monotonic() + 90
    try:
        while processed < n and time.monotonic() < deadline:
            msgs = consumer.consume(40, 1.0)
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, key=m.key(), value=b"x" + m.value())
            positions = consumer.position(consumer.assignment())
            p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            if not aborted:
                p.abort_transaction(30)
                aborted = len(msgs)
                committed = consumer.committed(consumer.assignment(), timeout=30)
                for tp in committed:
                    consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
                continue
            p.commit_transaction(30)
            processed += len(msgs)
    finally:
        consumer.close()
    assert aborted > 0
    assert processed == n, (processed, aborted)
    out = read_topic(broker.bootstrap, dst, 3, n)
    assert sorted(out) == sorted(b"x" + v.encode() for v in inputs), "each input exactly once"
    assert sum(committed_offsets(broker.bootstrap, group, src, 3).values()) == n


def test_java_consume_transform_produce_with_group_metadata(broker, new_topic):
    """The Java client's sendOffsetsToTransaction(offsets, groupMetadata) loop (EtlCheck):
    one aborted transaction, then commits until every input is processed once."""
    src, dst = new_topic(partitions=3), new_topic(partitions=3)
    n = 150
    inputs = [f"j{i}" for i in range(n)]
    produce_plain(broker.bootstrap, src, inputs)
    group = unique("java-etl")
    try:
        cp = java_program_classpath("EtlCheck")
    except ClientError as e:
        pytest.fail(str(e))
    cmd = [
        os.environ.get("JAVA", "java"), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp,
        "io.moldau.e2e.EtlCheck", "run", broker.bootstrap, src, dst, group, unique("java-etl-txn"), str(n),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-4000:]
    lines = r.stdout.splitlines()
    assert f"PROCESSED {n}" in lines, r.stdout + r.stderr[-2000:]
    aborted = int(next(l for l in lines if l.startswith("ABORTED ")).split()[1])
    assert aborted > 0, r.stdout
    committed = {int(l.split()[1]): int(l.split()[2]) for l in lines if l.startswith("COMMITTED ")}
    assert sum(committed.values()) == n, r.stdout
    out = read_topic(broker.bootstrap, dst, 3, n)
    assert sorted(out) == sorted(b"x" + v.encode() for v in inputs), "each input exactly once"
    assert committed_offsets(broker.bootstrap, group, src, 3) == committed
