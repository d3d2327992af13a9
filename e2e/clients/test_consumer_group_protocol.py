"""KIP-848 consumer groups (`group.protocol=consumer`, issue 39) with real
clients: the Java client 4.4 (GroupCheck, as in test_groups.py) and
librdkafka (confluent-kafka), whose members heartbeat with
ConsumerGroupHeartbeat and get their partitions from the broker's `uniform`
assignor; `kafka-consumer-groups --describe` (Kafka 4.4's tool, which asks
ConsumerGroupDescribe) shows the members. Runs against Apache Kafka too
(MOLDAU_TEST_TARGET=kafka), whose 4.x brokers serve the protocol by default.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupType

from conftest import admin_for, create_topic, unique
from harness import kafka_tools
from harness.clients import RDKAFKA_LOGGER
from test_groups import JavaMember, committed_offsets, java_balanced, produce, retry_coordinator, wait_until

CONSUMER_PROTOCOL = {"group.protocol": "consumer"}


def describe_members(bootstrap: str, group: str) -> str:
    p = kafka_tools.consumer_groups(bootstrap, "--describe", "--group", group, "--members")
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def consumed_once(records: list[tuple[int, int, str]], expected: dict[tuple[int, int], str]) -> None:
    got: dict[tuple[int, int], list[str]] = {}
    for p, off, v in records:
        got.setdefault((p, off), []).append(v)
    twice = {k: v for k, v in got.items() if len(v) > 1}
    assert not twice, f"consumed more than once: {twice}"
    assert {k: v[0] for k, v in got.items()} == expected


@pytest.mark.timeout(300)
def test_java_consumer_protocol_members_share_a_topic_and_commit(broker):
    topic = create_topic(broker, unique("kip848"), 6)
    group = unique("kip848grp")
    expected = produce(broker, topic, {p: 10 for p in range(6)}, tag="a")
    j1 = JavaMember(broker, group, topic, "one", **CONSUMER_PROTOCOL)
    j2 = j3 = None
    try:
        wait_until(lambda: (j1.owned() or (0, set()))[1] == set(range(6)), 90, "java-one owns all 6 partitions", interval=0.2)
        j2 = JavaMember(broker, group, topic, "two", **CONSUMER_PROTOCOL)
        (_, o1), (_, o2) = wait_until(lambda: java_balanced([j1, j2], 6), 90, "two members share 6 partitions", interval=0.2)
        assert len(o1) == 3 and len(o2) == 3, (o1, o2)
        wait_until(lambda: len({(p, o) for p, o, _ in j1.records() + j2.records()}) >= 60, 90, "60 records consumed")
        consumed_once(j1.records() + j2.records(), expected)
        assert not j1.commit_failures() and not j2.commit_failures(), j1.commit_failures() + j2.commit_failures()

        # the group as Kafka 4.4's tool shows it: two members, 3 partitions each
        out = wait_until(
            lambda: (lambda o: o if "java-one" in o and "java-two" in o else None)(describe_members(broker.bootstrap, group)),
            60, "kafka-consumer-groups shows both members", interval=1,
        )
        rows = [line.split() for line in out.splitlines() if "java-" in line]
        assert sorted(r[-1] for r in rows) == ["3", "3"], out
        a = admin_for(broker)  # kept referenced until its result is in
        listing = a.list_consumer_groups(request_timeout=15, types={ConsumerGroupType.CONSUMER}).result(20)
        assert [g.type for g in listing.valid if g.group_id == group] == [ConsumerGroupType.CONSUMER], (listing.valid, listing.errors)

        wait_until(lambda: committed_offsets(broker, group, topic) == {(topic, p): 10 for p in range(6)}, 60, "offsets committed")
        j1.close()
        j2.close()
        # the committed offsets outlive the members: a new one resumes there
        more = produce(broker, topic, {p: 1 for p in range(6)}, tag="b")
        j3 = JavaMember(broker, group, topic, "three", **CONSUMER_PROTOCOL)
        wait_until(lambda: len(j3.records()) >= 6, 90, "java-three consumes the new records")
        time.sleep(1)
        consumed_once(j3.records(), more)
    finally:
        for j in (j1, j2, j3):
            if j is not None:
                j.kill()


def rdkafka_consumer(b, group: str) -> Consumer:
    # session.timeout.ms and heartbeat.interval.ms are the broker's with
    # this protocol: librdkafka refuses them
    return Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "logger": RDKAFKA_LOGGER,
        }
    )


@pytest.mark.timeout(300)
def test_librdkafka_consumer_protocol_members_share_a_topic_and_commit(broker):
    topic = create_topic(broker, unique("kip848rd"), 6)
    group = unique("kip848rdgrp")
    expected = produce(broker, topic, {p: 10 for p in range(6)}, tag="r")
    consumers = [rdkafka_consumer(broker, group) for _ in range(2)]
    seen: list[tuple[int, int, str]] = []
    try:
        for c in consumers:
            c.subscribe([topic])

        def step():
            for c in consumers:
                for m in c.consume(100, timeout=0.2):
                    if m.error() is None:
                        seen.append((m.partition(), m.offset(), m.value().decode()))
                        c.commit(message=m, asynchronous=False)

        def shared():
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            return len(seen) >= 60 and all(len(o) == 3 for o in owned) and not owned[0] & owned[1]

        wait_until(shared, 120, "two librdkafka members share 6 partitions and consume 60 records", step=step)
        consumed_once(seen, expected)
        a = admin_for(broker)
        d = retry_coordinator(lambda: a.describe_consumer_groups([group], request_timeout=15)[group].result(20))
        assert d.type == ConsumerGroupType.CONSUMER, d.type
        assert len(d.members) == 2
        assert committed_offsets(broker, group, topic) == {(topic, p): 10 for p in range(6)}
    finally:
        for c in consumers:
            c.close()
