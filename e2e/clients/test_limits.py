"""Broker-side semantics that clients rely on: LogAppendTime topics, size limits,
small fetch sizes (KIP-74), unknown partitions, offsets by time inside
compressed batches."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition

from harness import kwire
from harness.clients import RDKAFKA_LOGGER, ConfluentClient, JavaClient, KafkaPythonClient
from harness.records import Record, assert_same, gen_records


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize("client", [ConfluentClient(), JavaClient()], ids=["confluent", "java"])
def test_log_append_time_topic(broker, new_topic, client):
    """message.timestamp.type=LogAppendTime: the broker stamps every record with
    its own clock and consumers see the LogAppendTime type; keys, values and
    headers are unchanged."""
    topic = new_topic(configs={"message.timestamp.type": "LogAppendTime"})
    recs = gen_records(20, seed=600, null_header_values=client.null_header_values)  # CreateTimes a day old
    before = now_ms()
    assert client.produce(broker.bootstrap, topic, 0, recs, compression="gzip") == list(range(20))
    after = now_ms()
    got = client.consume(broker.bootstrap, topic, 0, 0, 20)
    assert [c.offset for c in got] == list(range(20))
    for p, c in zip(recs, got):
        assert (c.record.key, c.record.value, c.record.headers) == (p.key, p.value, p.headers)
        assert c.timestamp_type == "LogAppendTime", c.timestamp_type
        assert before - 1000 <= c.record.timestamp <= after + 1000, (before, c.record.timestamp, after)


def test_record_larger_than_max_message_bytes_is_refused(broker, new_topic):
    topic = new_topic(configs={"max.message.bytes": "100000"})
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "message.max.bytes": 10_000_000,
            "message.send.max.retries": 0,
            "logger": RDKAFKA_LOGGER,
        }
    )
    errs = []
    p.produce(topic, value=b"x" * 200_000, partition=0, on_delivery=lambda e, m: errs.append(e))
    assert p.flush(30) == 0  # its own request: the broker refuses the whole batch
    p.produce(topic, value=b"small", partition=0, on_delivery=lambda e, m: errs.append(e))
    assert p.flush(30) == 0
    assert errs[0] is not None and errs[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errs
    assert errs[1] is None, errs
    c = ConfluentClient().consumer(broker.bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 1)
    finally:
        c.close()


def test_small_fetch_size_still_returns_a_whole_large_batch(broker, new_topic):
    """KIP-74: the first batch is returned even when larger than the fetch limits."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    topic = new_topic()
    big = Record(b"big", bytes(range(256)) * 1200, (("h", b"v"),), now_ms() - 1000)  # ~300 KB
    small = Record(b"small", b"after", (), now_ms() - 500)
    assert ConfluentClient().produce(broker.bootstrap, topic, 0, [big, small]) == [0, 1]
    c = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=1024,
        fetch_max_bytes=1024,
    )
    try:
        tp = KTP(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=500).values():
                got += batch
        assert [m.offset for m in got] == [0, 1]
        assert got[0].value == big.value and got[1].value == b"after"
    finally:
        c.close()


def test_offsets_for_times_inside_compressed_batches(broker, new_topic):
    """The offset for a timestamp is exact even inside one compressed batch."""
    topic = new_topic()
    ts0 = now_ms() - 3_600_000
    recs = [Record(f"k{i}".encode(), f"v{i}".encode() * 10, (), ts0 + i * 10) for i in range(100)]
    assert ConfluentClient().produce(broker.bootstrap, topic, 0, recs, compression="lz4") == list(range(100))
    cons = ConfluentClient().consumer(broker.bootstrap)
    try:
        for i in (0, 1, 37, 99):
            (r,) = cons.offsets_for_times([TopicPartition(topic, 0, ts0 + i * 10)], timeout=10)
            assert r.offset == i, (i, r)
            (r,) = cons.offsets_for_times([TopicPartition(topic, 0, ts0 + i * 10 - 5)], timeout=10)
            assert r.offset == i, (i, r)
    finally:
        cons.close()


def test_produce_to_unknown_partition_and_topic(broker, new_topic):
    topic = new_topic()
    with kwire.Conn(broker.host, broker.port) as c:
        v, code = c.produce(topic, 7, kwire.record_batch([kwire.Rec(b"k", b"v")]))
        assert code == kwire.UNKNOWN_TOPIC_OR_PARTITION, f"Produce v{v} to partition 7 of a 1-partition topic: {code}"
    recs = gen_records(3, seed=601, large_value=False)
    # the topic is untouched and still works
    assert ConfluentClient().produce(broker.bootstrap, topic, 0, recs) == [0, 1, 2]
    assert_same(recs, KafkaPythonClient().consume(broker.bootstrap, topic, 0, 0, 3))
