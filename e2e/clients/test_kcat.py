"""kcat: produce and consume with keys, headers and timestamps; metadata; offsets by time."""

from __future__ import annotations

import os
import time

import pytest

from harness import kcat
from harness.clients import ConfluentClient
from harness.records import Record, assert_same, Consumed
from harness.segments import CODEC_IDS, segment_codecs


def now_ms() -> int:
    return int(time.time() * 1000)


def test_kcat_keys_headers_timestamps(broker, new_topic):
    topic = new_topic()
    lines = [f"key-{i}:value {i} – ünïcode ✓ {'x' * i}" for i in range(25)]
    before = now_ms()
    kcat.produce_lines(broker.bootstrap, topic, 0, lines, headers=["k=v", "trace-id=abc-123", "k=second"])
    after = now_ms()
    got = kcat.consume(broker.bootstrap, topic, 0, 25)
    assert [r["offset"] for r in got] == list(range(25))
    for i, r in enumerate(got):
        k, v = lines[i].split(":", 1)
        assert r["key"] == k.encode()
        assert r["value"] == v.encode()
        assert r["headers"] == "k=v,trace-id=abc-123,k=second"
        assert before - 1000 <= r["timestamp"] <= after + 1000, (before, r["timestamp"], after)
    # the same records through another client: headers are bytes, in order, duplicates kept
    conf = ConfluentClient().consume(broker.bootstrap, topic, 0, 0, 25)
    for i, c in enumerate(conf):
        assert c.record.headers == (("k", b"v"), ("trace-id", b"abc-123"), ("k", b"second"))
        assert c.record.timestamp == got[i]["timestamp"]
        assert c.timestamp_type == "CreateTime"


def test_kcat_null_values_and_empty_keys(broker, new_topic):
    topic = new_topic()
    # -Z: empty value -> NULL (tombstone); ":v" -> empty key
    kcat.produce_lines(broker.bootstrap, topic, 0, ["tomb:", ":emptykey", "k:v"], extra=["-Z"])
    got = kcat.consume(broker.bootstrap, topic, 0, 3)
    assert [(r["key"], r["value"]) for r in got] == [(b"tomb", None), (None, b"emptykey"), (b"k", b"v")] or [
        (r["key"], r["value"]) for r in got
    ] == [(b"tomb", None), (b"", b"emptykey"), (b"k", b"v")]
    assert [r["headers"] for r in got] == ["", "", ""]


def test_kcat_binary_file_is_one_byte_identical_message(broker, new_topic, tmp_path):
    topic = new_topic()
    blob = os.urandom(256 * 1024)
    f = tmp_path / "blob.bin"
    f.write_bytes(blob)
    kcat.run(["-P", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-k", "blobkey", "-X", "acks=all", str(f)])
    got = kcat.consume(broker.bootstrap, topic, 0, 1)
    assert got[0]["offset"] == 0 and got[0]["key"] == b"blobkey" and got[0]["value"] == blob


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kcat_compression(broker, new_topic, codec):
    topic = new_topic()
    lines = [f"k{i}:{'payload-%d ' % i * 20}" for i in range(200)]
    kcat.produce_lines(broker.bootstrap, topic, 0, lines, extra=["-X", f"compression.codec={codec}", "-X", "linger.ms=50"])
    got = kcat.consume(broker.bootstrap, topic, 0, 200)
    assert [r["offset"] for r in got] == list(range(200))
    assert [r["key"] + b":" + r["value"] for r in got] == [ln.encode() for ln in lines]
    # kcat's librdkafka (2.0 in Debian) compresses only when the broker
    # advertises Produce v0 (as Kafka 4 does, KAFKA-18659); else it sends
    # every batch uncompressed and the round trip above still passes.
    codecs = segment_codecs(broker, topic)
    assert codecs and set(codecs) == {CODEC_IDS[codec]}, f"stored codecs {codecs}, kcat sent {codec}"


def test_kcat_consume_records_of_other_clients(broker, new_topic):
    """Records with explicit timestamps and binary headers from confluent-kafka, read with kcat."""
    topic = new_topic()
    ts0 = now_ms() - 3_600_000
    recs = [Record(f"k{i}".encode(), f"v{i}".encode(), (("h", f"x{i}".encode()),), ts0 + i * 1000) for i in range(10)]
    assert ConfluentClient().produce(broker.bootstrap, topic, 0, recs) == list(range(10))
    got = kcat.consume(broker.bootstrap, topic, 0, 10)
    assert_same(recs, [Consumed(r["offset"], Record(r["key"], r["value"], (("h", r["headers"][2:].encode()),), r["timestamp"])) for r in got])
    # start at a timestamp (s@): first record with timestamp >= 5th record's
    got = kcat.consume(broker.bootstrap, topic, 0, 5, offset=f"s@{ts0 + 5000}")
    assert [r["offset"] for r in got] == [5, 6, 7, 8, 9]
    # -Q: offset for a timestamp
    out = kcat.run(["-Q", "-b", broker.bootstrap, "-t", f"{topic}:0:{ts0 + 3500}"]).decode()
    assert "offset 4" in out, out


def test_kcat_metadata_lists_broker_and_topic(broker, new_topic):
    topic = new_topic(partitions=3)
    md = kcat.metadata(broker.bootstrap, topic)
    brokers = md["brokers"]
    assert len(brokers) == 1, brokers
    assert brokers[0]["name"] == f"{broker.host}:{broker.port}", brokers
    bid = brokers[0]["id"]
    topics = {t["topic"]: t for t in md["topics"]}
    assert topic in topics, md
    parts = topics[topic]["partitions"]
    assert sorted(p["partition"] for p in parts) == [0, 1, 2]
    for p in parts:
        assert p["leader"] == bid
        assert [r["id"] for r in p["replicas"]] == [bid]
        assert [r["id"] for r in p["isrs"]] == [bid]
    # the plain-text listing too
    text = kcat.run(["-L", "-b", broker.bootstrap]).decode()
    assert f"at {broker.host}:{broker.port}" in text, text
    assert f'topic "{topic}" with 3 partitions' in text, text
