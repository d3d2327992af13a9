"""Broker-side compression and the topic configs of Kafka 4.1 and 4.4, through real
clients and Kafka's own tools; every assertion holds against Apache Kafka
too (MOLDAU_TEST_TARGET=kafka), except the /metrics ones (Moldau only).

- `compression.type=<codec>` on a topic: records produced uncompressed (or,
  for `uncompressed`, lz4) by confluent-kafka come back byte-identical, and
  every batch in the partition's segment file — read from the broker's data
  directory, batch headers parsed here — carries the topic's codec; the
  Java client, kafka-python and aiokafka read them back identical too. On
  Moldau `moldau_produce_recompressed_batches_total{topic}` counted them.
- `compression.type=producer`: batches stay in the producer's codec, and
  the counter does not move (the zero-copy path).
- `kafka-topics --create --config k=v` with every topic config Kafka 4.0
  added or Moldau lacked, then `kafka-configs --describe` prints each value;
  invalid values are refused with Kafka's message (`Invalid value … for
  configuration …`), `remote.storage.enable=true` with Kafka's tiered
  storage message.
- `message.timestamp.before.max.ms` / `after.max.ms`: a CreateTime record
  older (or further in the future) than allowed gets INVALID_TIMESTAMP, one
  inside the bounds is appended.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import admin_for, unique, wait_topic_ready
from harness import broker as brokers
from harness import kafka_tools
from harness.clients import RDKAFKA_LOGGER, AioKafkaClient, ConfluentClient, JavaClient, KafkaPythonClient
from harness.records import Record, assert_same, gen_records
from harness.segments import CODEC_IDS, segment_codecs

moldau_only = pytest.mark.skipif(brokers.target() != "moldau", reason="/metrics is Moldau's")


def compressible(n: int, seed: int) -> list[Record]:
    """gen_records' variety (null and empty keys and values, duplicate and
    null headers) with repetitive values, so that a producer's codec
    really compresses (librdkafka sends a batch uncompressed when the codec
    would not shrink it)."""
    return [
        Record(r.key, r.value if not r.value else (r.value[:16] * 40), r.headers, r.timestamp)
        for r in gen_records(n, seed=seed, large_value=False)
    ]


def recompressed(b: brokers.Broker, topic: str) -> float:
    with urllib.request.urlopen(f"http://{b.host}:{b.http_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r'^moldau_produce_recompressed_batches_total\{topic="' + re.escape(topic) + r'"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def create(b: brokers.Broker, configs: dict[str, str], prefix: str) -> str:
    from confluent_kafka.admin import NewTopic

    name = unique(prefix)
    a = admin_for(b)  # kept alive until the result is in
    fs = a.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=configs)], request_timeout=30)
    fs[name].result(30)
    wait_topic_ready(b, name, 1)
    return name


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", "uncompressed"])
def test_the_broker_recompresses_to_the_topic_codec(broker, codec):
    topic = create(broker, {"compression.type": codec}, f"cmp-{codec}")
    sent_as = "lz4" if codec == "uncompressed" else "none"
    before = recompressed(broker, topic) if brokers.target() == "moldau" else 0
    records = compressible(60, seed=len(codec))
    client = ConfluentClient()
    offsets = client.produce(broker.bootstrap, topic, 0, records, compression=sent_as)
    assert offsets == list(range(len(records))), offsets
    # Every client reads the broker's encoding (Java's LZ4 and snappy
    # framings are the strict ones).
    for reader in (client, JavaClient(), KafkaPythonClient(), AioKafkaClient()):
        assert_same(records, reader.consume(broker.bootstrap, topic, 0, 0, len(records)))

    codecs = segment_codecs(broker, topic)
    assert codecs, "no batch on disk"
    assert set(codecs) == {CODEC_IDS[codec]}, f"stored codecs {codecs}, topic says {codec}"
    if brokers.target() == "moldau":
        assert recompressed(broker, topic) - before == len(codecs), (before, codecs)


def test_producer_keeps_the_producers_codec(broker):
    topic = create(broker, {"compression.type": "producer"}, "cmp-producer")
    records = compressible(40, seed=7)
    client = ConfluentClient()
    client.produce(broker.bootstrap, topic, 0, records, compression="lz4")
    client.produce(broker.bootstrap, topic, 0, records[:5], compression="none")
    got = client.consume(broker.bootstrap, topic, 0, 0, len(records) + 5)
    assert_same(records + records[:5], got)
    codecs = segment_codecs(broker, topic)
    assert codecs[0] == CODEC_IDS["lz4"] and codecs[-1] == 0, codecs
    assert set(codecs) == {0, CODEC_IDS["lz4"]}, codecs


@moldau_only
def test_producer_stays_zero_copy(broker):
    topic = create(broker, {}, "cmp-default")
    ConfluentClient().produce(broker.bootstrap, topic, 0, compressible(20, seed=3), compression="gzip")
    assert set(segment_codecs(broker, topic)) == {CODEC_IDS["gzip"]}
    assert recompressed(broker, topic) == 0


def test_compression_level_applies(broker):
    """gzip level 1 against 9 of the same records: both readable, level 9
    stores fewer bytes (compressible records, so the levels differ)."""
    ts = int(time.time() * 1000) - 60_000
    records = [Record(f"k{i}".encode(), (f"value {i % 13} " * 200).encode(), (), ts + i) for i in range(200)]
    sizes = {}
    client = ConfluentClient()
    for level in ("1", "9"):
        topic = create(broker, {"compression.type": "gzip", "compression.gzip.level": level}, f"cmp-gz{level}")
        client.produce(broker.bootstrap, topic, 0, records)
        assert_same(records, client.consume(broker.bootstrap, topic, 0, 0, len(records)))
        assert set(segment_codecs(broker, topic)) == {CODEC_IDS["gzip"]}
        d = [d for d in broker.data_dir.rglob(f"{topic}-0") if d.is_dir()][0]
        sizes[level] = sum(f.stat().st_size for f in d.glob("*.log"))
    assert sizes["9"] < sizes["1"], sizes


# -- Kafka 4.1's and 4.4's topic configs through kafka-topics / kafka-configs ---

NEW_CONFIGS = {
    "message.timestamp.after.max.ms": "7200000",
    "message.timestamp.before.max.ms": "86400000",
    "segment.jitter.ms": "1000",
    "preallocate": "true",
    "compression.type": "zstd",
    "compression.gzip.level": "5",
    "compression.lz4.level": "12",
    "compression.zstd.level": "-5",
    "local.retention.ms": "-2",
    "local.retention.bytes": "1000000",
    "remote.storage.enable": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "true",
    # new in Kafka 4.4
    "errors.deadletterqueue.group.enable": "true",
    "max.decompressed.message.bytes": "10485760",
    "remote.copy.lag.bytes": "1048576",
    "remote.copy.lag.ms": "60000",
}


def test_kafka_topics_accepts_every_kafka_topic_config(broker):
    topic = unique("cfg-all")
    args = ["--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1"]
    for k, v in NEW_CONFIGS.items():
        args += ["--config", f"{k}={v}"]
    p = kafka_tools.topics(broker.bootstrap, *args)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    assert f"Created topic {topic}." in p.stdout, p.stdout
    wait_topic_ready(broker, topic, 1)

    p = kafka_tools.configs(broker.bootstrap, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    for k, v in NEW_CONFIGS.items():
        assert re.search(rf"^\s+{re.escape(k)}={re.escape(v)} ", p.stdout, re.M), f"{k}={v} not in:\n{p.stdout}"

    # --all: the defaults Kafka 4.4 gives the keys not set here
    other = create(broker, {}, "cfg-defaults")
    p = kafka_tools.configs(broker.bootstrap, "--describe", "--all", "--entity-type", "topics", "--entity-name", other)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    for k, v in {
        "message.timestamp.after.max.ms": "3600000",
        "message.timestamp.before.max.ms": str(2**63 - 1),
        "segment.jitter.ms": "0",
        "preallocate": "false",
        "compression.type": "producer",
        "compression.gzip.level": "-1",
        "compression.lz4.level": "9",
        "compression.zstd.level": "3",
        "local.retention.ms": "-2",
        "local.retention.bytes": "-2",
        "remote.storage.enable": "false",
        "remote.log.copy.disable": "false",
        "remote.log.delete.on.disable": "false",
        "errors.deadletterqueue.group.enable": "false",
        "max.decompressed.message.bytes": "2147483639",
        "remote.copy.lag.bytes": "-1",
        "remote.copy.lag.ms": "0",
    }.items():
        assert re.search(rf"^\s+{re.escape(k)}={re.escape(v)} ", p.stdout, re.M), f"{k}={v} not in:\n{p.stdout}"


INVALID = [
    ("compression.zstd.level", "23", "Invalid value 23 for configuration compression.zstd.level: Value must be no more than 22"),
    ("compression.zstd.level", "-131073", "Value must be at least -131072"),
    ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
    ("compression.lz4.level", "18", "Value must be no more than 17"),
    ("compression.type", "brotli", "Invalid value brotli for configuration compression.type"),
    ("preallocate", "maybe", "Invalid value maybe for configuration preallocate: Expected value to be either true or false"),
    ("segment.jitter.ms", "-1", "Invalid value -1 for configuration segment.jitter.ms: Value must be at least 0"),
    ("message.timestamp.before.max.ms", "soon", "Not a number of type LONG"),
    ("local.retention.bytes", "-3", "Value must be at least -2"),
    ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker"),
    ("max.decompressed.message.bytes", "0", "Invalid value 0 for configuration max.decompressed.message.bytes: Value must be at least 1"),
    ("remote.copy.lag.ms", "-2", "Value must be at least -1"),
]


@pytest.mark.parametrize("key,value,message", INVALID, ids=[f"{k}={v}" for k, v, _ in INVALID])
def test_invalid_topic_configs_are_refused(broker, key, value, message):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    topic = unique("cfg-bad")
    a = admin_for(broker)  # kept alive until the result is in
    fs = a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config={key: value})], request_timeout=30)
    with pytest.raises(Exception) as e:
        fs[topic].result(30)
    err = e.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert message in err.str(), err.str()

    p = kafka_tools.topics(broker.bootstrap, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1", "--config", f"{key}={value}")
    assert p.returncode != 0, p.stdout
    assert message in p.stdout + p.stderr, f"{p.stdout}\n{p.stderr}"


# -- timestamp bounds --------------------------------------------------------


def produce_at(bootstrap: str, topic: str, timestamps: list[int]) -> list[tuple[int, str | None]]:
    """One record per timestamp, each its own request; (offset, error name)."""
    from confluent_kafka import Producer

    out = []
    for ts in timestamps:
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "message.send.max.retries": 0, "logger": RDKAFKA_LOGGER})
        got = []
        p.produce(topic, value=b"v", timestamp=ts, on_delivery=lambda err, msg: got.append((msg.offset(), err.name() if err else None)))
        assert p.flush(30) == 0
        out.extend(got)
    return out


def test_timestamp_bounds_refuse_out_of_range_records(broker):
    topic = create(broker, {"message.timestamp.before.max.ms": "3600000", "message.timestamp.after.max.ms": "60000"}, "ts-bounds")
    now = int(time.time() * 1000)
    got = produce_at(broker.bootstrap, topic, [now - 60_000, now - 2 * 3_600_000, now + 600_000, now])
    assert [e for _, e in got] == [None, "INVALID_TIMESTAMP", "INVALID_TIMESTAMP", None], got
    assert [o for o, e in got if e is None] == [0, 1], got

    # Kafka 4's default after.max.ms is one hour; before.max.ms unbounded.
    default = create(broker, {}, "ts-default")
    got = produce_at(broker.bootstrap, default, [now - 10 * 365 * 86_400_000, now + 2 * 3_600_000])
    assert [e for _, e in got] == [None, "INVALID_TIMESTAMP"], got

    # LogAppendTime topics take any CreateTime the producer sets.
    lat = create(broker, {"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "1000"}, "ts-lat")
    got = produce_at(broker.bootstrap, lat, [now - 2 * 3_600_000])
    assert [e for _, e in got] == [None], got
