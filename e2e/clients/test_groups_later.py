"""Consumer groups: subscribe, commit, resume (the broad group suite is
test_groups.py)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from conftest import unique
from harness.clients import RDKAFKA_LOGGER, ConfluentClient
from harness.records import Consumed, Record, assert_same, gen_records



def group_consumer(bootstrap, group):
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "logger": RDKAFKA_LOGGER,
        }
    )


def poll_n(c, n, timeout=60):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
    assert len(out) == n, f"{len(out)} of {n} within {timeout}s"
    return out


def as_consumed(msgs):
    return [Consumed(m.offset(), Record(m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1])) for m in msgs]


def test_subscribe_commit_resume(broker, new_topic):
    topic = new_topic()
    recs = gen_records(20, seed=500, large_value=False)
    assert ConfluentClient().produce(broker.bootstrap, topic, 0, recs) == list(range(20))
    group = unique("grp")
    c = group_consumer(broker.bootstrap, group)
    try:
        c.subscribe([topic])
        first = poll_n(c, 12)
        assert_same(recs[:12], as_consumed(first))
        c.commit(offsets=[TopicPartition(topic, 0, 12)], asynchronous=False)
    finally:
        c.close()
    c = group_consumer(broker.bootstrap, group)
    try:
        c.subscribe([topic])
        rest = poll_n(c, 8)
        assert_same(recs[12:], as_consumed(rest), first_offset=12)
        (committed,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 12
    finally:
        c.close()
