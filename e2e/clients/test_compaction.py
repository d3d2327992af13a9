"""Log compaction read back with a real client (issue 5, cleanup.policy=compact).

Runs against Moldau and Apache Kafka (MOLDAU_TEST_TARGET=kafka) with a broker of
the module's own whose cleaner runs often: log.cleaner.backoff.ms=500 (the
cleaner's cadence in both) and log.retention.check.interval.ms=500 (where
Moldau rolls an aged active segment of a compacted topic). Segments roll by time (segment.ms) and by size on
both: Kafka 4 refuses segment.bytes below 1 MiB, so the topic sets its internal
test-only override internal.segment.bytes, which Moldau accepts too.
"""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from conftest import STATE, create_topic, unique
from harness import broker as brokers
from harness.clients import RDKAFKA_LOGGER

BROKER_PROPS = {
    "log.retention.check.interval.ms": "500",
    "log.cleaner.backoff.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
}


@pytest.fixture(scope="module")
def cb():
    b = brokers.new_broker(STATE / f"own-test_compaction-{brokers.target()}")
    try:
        brokers.start_with_properties(b, BROKER_PROPS, "compaction-test")
    except Exception:
        b.close(keep=True)
        raise
    yield b
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


def produce_keyed(b, topic: str, records: list[tuple[bytes, bytes | None]]) -> list[int]:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5, "logger": RDKAFKA_LOGGER})
    offsets: list[int | None] = [None] * len(records)
    errors = []

    def cb(i):
        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)
            else:
                offsets[i] = msg.offset()

        return on_delivery

    for i, (k, v) in enumerate(records):
        p.produce(topic, key=k, value=v, partition=0, on_delivery=cb(i))
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors
    return offsets


def read_all(b, topic: str) -> tuple[list[tuple[int, bytes | None, bytes | None]], int, int]:
    """Every record of partition 0 from the log start to the high watermark."""
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "moldau-e2e-compaction-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "logger": RDKAFKA_LOGGER,
        }
    )
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
        out = []
        if hi <= lo:
            return out, lo, hi
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert not m.error(), m.error()
            out.append((m.offset(), m.key(), m.value()))
            if m.offset() >= hi - 1:
                return out, lo, hi
        raise AssertionError(f"could not read up to {hi} within 30s (got {len(out)})")
    finally:
        c.close()


@pytest.mark.timeout(300)
def test_compacted_topic_keeps_last_value_per_key(cb):
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": "300",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100",
        "min.compaction.lag.ms": "0",
        "internal.segment.bytes": "16384",
    }
    topic = create_topic(cb, unique("compact"), 1, configs)
    keys = [f"key-{i:02d}".encode() for i in range(20)]
    deleted = set(keys[:3])
    last: dict[bytes, tuple[int, bytes | None]] = {}
    total = 0
    # 10 waves of updates (every key each wave), each in its own segment(s)
    for wave in range(10):
        recs = []
        for k in keys:
            v = None if wave == 9 and k in deleted else f"{k.decode()}={wave}:".encode() + b"x" * 80
            recs.append((k, v))
        offs = produce_keyed(cb, topic, recs)
        for (k, v), o in zip(recs, offs):
            last[k] = (o, v)
        total += len(recs)
        time.sleep(0.4)
    # one more record, with a key of its own, so that the last updates are out of the
    # active segment (the cleaner never touches it; a newer value there of a key
    # would leave two values of that key)
    time.sleep(0.5)
    (sentinel_off,) = produce_keyed(cb, topic, [(b"sentinel", b"end")])
    assert sentinel_off == total

    # first pass: the last value per key, at the offset it was written at. A
    # tombstone may outlive this pass (Kafka, KIP-534: the pass that first sees it
    # sets its delete horizon; a later pass removes it), but not an older value.
    live = sorted([(o, k, v) for k, (o, v) in last.items() if v is not None] + [(sentinel_off, b"sentinel", b"end")])
    tombs = sorted((o, k, None) for k, (o, v) in last.items() if v is None)

    def first_pass_done(seen):
        values = [r for r in seen if r[2] is not None]
        return values == live and all(r in tombs for r in seen if r[2] is None)

    seen, took = wait_for(cb, topic, first_pass_done, "first cleaning", live)
    print(f"cleaned in {took:.0f}s: {len(seen)} records left of {total + 1}, tombstones left {[k for _, k, v in seen if v is None]}")
    assert hi_of(cb, topic) == total + 1, "the high watermark moved"

    # more updates make the log dirty again; the next pass removes the tombstones
    time.sleep(0.5)
    recs = [(k, f"{k.decode()}=10:".encode()) for k in keys if k not in deleted]
    offs = produce_keyed(cb, topic, recs)
    for (k, v), o in zip(recs, offs):
        last[k] = (o, v)
    time.sleep(0.5)
    # a key of its own again: the active segment never holds a newer value of a cleaned key
    (sentinel2,) = produce_keyed(cb, topic, [(b"sentinel-2", b"end2")])
    final = sorted(
        [(o, k, v) for k, (o, v) in last.items() if v is not None]
        + [(sentinel_off, b"sentinel", b"end"), (sentinel2, b"sentinel-2", b"end2")]
    )
    seen, took = wait_for(cb, topic, lambda seen: seen == final, "tombstones removed", final)
    print(f"second cleaning done in {took:.0f}s: {len(seen)} records")
    assert hi_of(cb, topic) == sentinel2 + 1


def hi_of(b, topic: str) -> int:
    return read_all(b, topic)[2]


def wait_for(b, topic, pred, what, expected, timeout: float = 150):
    t0 = time.monotonic()
    seen: list = []
    while time.monotonic() - t0 < timeout:
        seen, _, _ = read_all(b, topic)
        if pred(seen):
            return seen, time.monotonic() - t0
        time.sleep(1)
    raise AssertionError(
        f"{what}: not within {timeout}s; {len(seen)} records, unexpected {[x for x in seen if x not in expected][:5]}, "
        f"missing {[x for x in expected if x not in seen][:5]}"
    )
