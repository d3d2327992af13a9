"""Admin APIs through the confluent-kafka AdminClient (and kafka-python where noted):
CreateTopics with configs, DescribeConfigs, CreatePartitions, DeleteTopics,
ListOffsets (earliest / latest / by timestamp), DeleteRecords, auto topic creation.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, OffsetSpec

from conftest import admin_for, create_topic, unique, wait_topic_ready
from harness.clients import ConfluentClient, KafkaPythonClient
from harness.records import Record, assert_same, gen_records

TOPIC_CONFIGS = {
    "retention.ms": "3600000",
    "cleanup.policy": "delete",
    "max.message.bytes": "2097152",
    "segment.bytes": "16777216",
    "min.insync.replicas": "1",
}


def describe_topic_configs(broker, topic):
    a = admin_for(broker)
    fs = a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)], request_timeout=30)
    (res,) = fs.values()
    return res.result(30)


def test_create_topic_with_partitions_and_configs(broker):
    topic = unique("adm")
    create_topic(broker, topic, partitions=3, configs=TOPIC_CONFIGS)
    md = admin_for(broker).list_topics(topic, timeout=10)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    entries = describe_topic_configs(broker, topic)
    for k, v in TOPIC_CONFIGS.items():
        assert k in entries, f"DescribeConfigs lacks {k}: {sorted(entries)}"
        assert entries[k].value == v, f"{k}: {entries[k].value!r} != {v!r}"
        assert entries[k].source == 1, f"{k} source {entries[k].source} (want DYNAMIC_TOPIC_CONFIG=1)"
    # synonyms (librdkafka asks for them): the topic's own value, then the
    # broker config it would otherwise take
    syn = entries["segment.bytes"].synonyms
    assert {"segment.bytes", "log.segment.bytes"} <= set(syn), sorted(syn)
    assert syn["segment.bytes"].source == 1 and syn["segment.bytes"].value == "16777216"
    assert syn["log.segment.bytes"].source in (4, 5), syn["log.segment.bytes"].source
    # an unset topic config is reported with its (non-topic) default source
    assert "compression.type" in entries
    assert entries["compression.type"].source != 1


def test_create_existing_topic_is_refused(broker, new_topic):
    topic = new_topic()
    a = admin_for(broker)  # keep a reference: a collected AdminClient fails its futures
    fs = a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)], request_timeout=30)
    with pytest.raises(KafkaException) as ei:
        fs[topic].result(30)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_create_topic_validate_only_creates_nothing(broker):
    topic = unique("adm-vo")
    a = admin_for(broker)
    fs = a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)], validate_only=True, request_timeout=30)
    fs[topic].result(30)
    time.sleep(1)
    assert topic not in a.list_topics(timeout=10).topics


def test_create_partitions(broker, new_topic):
    topic = new_topic(partitions=2)
    a = admin_for(broker)
    a.create_partitions([NewPartitions(topic, 5)], request_timeout=30)[topic].result(30)
    wait_topic_ready(broker, topic, 5)
    c = ConfluentClient()
    recs = gen_records(4, seed=7, large_value=False)
    assert c.produce(broker.bootstrap, topic, 4, recs) == [0, 1, 2, 3]
    assert_same(recs, c.consume(broker.bootstrap, topic, 4, 0, 4))
    # shrinking is refused
    with pytest.raises(KafkaException) as ei:
        a.create_partitions([NewPartitions(topic, 3)], request_timeout=30)[topic].result(30)
    assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_delete_topic(broker, new_topic):
    topic = new_topic(partitions=2)
    c = ConfluentClient()
    c.produce(broker.bootstrap, topic, 0, gen_records(3, seed=8, large_value=False))
    a = admin_for(broker)
    a.delete_topics([topic], request_timeout=30)[topic].result(30)
    deadline = time.monotonic() + 30
    while topic in a.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "deleted topic still listed after 30 s"
        time.sleep(0.2)
    # deleting it again: UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(KafkaException) as ei:
        a.delete_topics([topic], request_timeout=30)[topic].result(30)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # the name can be reused and starts empty, at offset 0
    deadline = time.monotonic() + 30
    while True:
        try:
            create_topic(broker, topic, partitions=1)
            break
        except KafkaException as e:  # Kafka may still be removing the old log
            assert time.monotonic() < deadline, f"re-create failed: {e}"
            time.sleep(0.5)
    recs = gen_records(2, seed=9, large_value=False)
    assert c.produce(broker.bootstrap, topic, 0, recs) == [0, 1]
    assert_same(recs, c.consume(broker.bootstrap, topic, 0, 0, 2))


def timed_records(n, ts0, step=1000):
    return [Record(f"k{i}".encode(), f"v{i}".encode(), (), ts0 + i * step) for i in range(n)]


def test_list_offsets_earliest_latest_by_timestamp(broker, new_topic):
    from confluent_kafka import Consumer

    topic = new_topic()
    ts0 = int(time.time() * 1000) - 3_600_000
    recs = timed_records(20, ts0)
    c = ConfluentClient()
    assert c.produce(broker.bootstrap, topic, 0, recs) == list(range(20))
    cons = c.consumer(broker.bootstrap)
    try:
        assert cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 20)

        def at(ts):
            (r,) = cons.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert r.error is None, r.error
            return r.offset

        assert at(ts0 - 10_000) == 0  # before everything: the first record
        assert at(ts0) == 0
        assert at(ts0 + 7000) == 7  # exact
        assert at(ts0 + 7001) == 8  # between: the next one
        assert at(ts0 + 19_000) == 19
        assert at(ts0 + 19_001) == -1  # after everything: no offset (OFFSET_END)
    finally:
        cons.close()
    a = admin_for(broker)
    tp = TopicPartition(topic, 0)

    def spec(s):
        return a.list_offsets({tp: s}, request_timeout=30)[tp].result(30)

    assert spec(OffsetSpec.earliest()).offset == 0
    assert spec(OffsetSpec.latest()).offset == 20
    r = spec(OffsetSpec.for_timestamp(ts0 + 12_000))
    assert (r.offset, r.timestamp) == (12, ts0 + 12_000)


def test_list_offsets_max_timestamp(broker, new_topic):
    """OffsetSpec.max_timestamp (ListOffsets v7, KIP-734): the offset of the largest timestamp."""
    topic = new_topic()
    ts0 = int(time.time() * 1000) - 3_600_000
    recs = timed_records(10, ts0)
    recs[4] = Record(b"max", b"max", (), ts0 + 60_000)  # out of order: the maximum in the middle
    assert ConfluentClient().produce(broker.bootstrap, topic, 0, recs) == list(range(10))
    a = admin_for(broker)
    tp = TopicPartition(topic, 0)
    r = a.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=30)[tp].result(30)
    assert (r.offset, r.timestamp) == (4, ts0 + 60_000)


def test_delete_records_moves_low_watermark(broker, new_topic):
    topic = new_topic()
    c = ConfluentClient()
    recs = gen_records(20, seed=10, large_value=False)
    assert c.produce(broker.bootstrap, topic, 0, recs) == list(range(20))
    a = admin_for(broker)
    tp = TopicPartition(topic, 0, 8)
    res = a.delete_records([tp], request_timeout=30)[tp].result(30)
    assert res.low_watermark == 8
    cons = c.consumer(broker.bootstrap)
    try:
        assert cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (8, 20)
    finally:
        cons.close()
    tp0 = TopicPartition(topic, 0)
    assert a.list_offsets({tp0: OffsetSpec.earliest()}, request_timeout=30)[tp0].result(30).offset == 8
    assert_same(recs[8:], c.consume(broker.bootstrap, topic, 0, 8, 12), first_offset=8)
    # reading below the log start offset is OFFSET_OUT_OF_RANGE
    from confluent_kafka import Consumer

    cons = c.consumer(broker.bootstrap)
    try:
        cons.assign([TopicPartition(topic, 0, 2)])
        deadline = time.monotonic() + 20
        err = None
        while time.monotonic() < deadline and err is None:
            m = cons.poll(0.5)
            if m is not None:
                assert m.error() is not None, f"read offset {m.offset()} below the log start offset"
                err = m.error()
        assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET, err
    finally:
        cons.close()
    # deleting beyond the high watermark is refused
    tp = TopicPartition(topic, 0, 21)
    with pytest.raises(KafkaException) as ei:
        a.delete_records([tp], request_timeout=30)[tp].result(30)
    assert ei.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    # -1 = up to the high watermark
    tp = TopicPartition(topic, 0, -1)
    assert a.delete_records([tp], request_timeout=30)[tp].result(30).low_watermark == 20


def test_delete_records_kafka_python(broker, new_topic):
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    topic = new_topic()
    assert ConfluentClient().produce(broker.bootstrap, topic, 0, gen_records(10, seed=11, large_value=False)) == list(range(10))
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="moldau-e2e-kafka-python-admin")
    try:
        res = a.delete_records({KTP(topic, 0): 6})
        assert res[KTP(topic, 0)]["low_watermark"] == 6, res
    finally:
        a.close()


@pytest.mark.parametrize("client", [ConfluentClient(), KafkaPythonClient()], ids=["confluent", "kafka-python"])
def test_auto_topic_creation_on_produce(broker, client):
    topic = unique("auto")
    a = admin_for(broker)
    assert topic not in a.list_topics(timeout=10).topics
    recs = gen_records(5, seed=12, large_value=False, null_header_values=client.null_header_values)
    deadline = time.monotonic() + 60
    while True:
        try:
            offs = client.produce(broker.bootstrap, topic, 0, recs)
            break
        except Exception as e:  # first attempt may race the creation, as with Kafka
            assert time.monotonic() < deadline, f"produce to auto-created topic failed: {e}"
            time.sleep(1)
    assert offs == list(range(5))
    md = a.list_topics(topic, timeout=10).topics[topic]
    assert md.error is None and len(md.partitions) >= 1
    assert_same(recs, ConfluentClient().consume(broker.bootstrap, topic, 0, 0, 5))


def test_a_keyless_record_fails_its_batch_in_a_compacted_topic(broker):
    """A batch with a keyless record in a compacted topic is refused whole
    with INVALID_RECORD, nothing of it appended, as Kafka does (the same
    assertions pass against Kafka). The KIP-467 per-record list naming the
    keyless record is checked on the wire in
    broker/tests/produce_record_errors.rs: librdkafka 2.16 fails every record
    of the batch with INVALID_RECORD whatever the list says."""
    from confluent_kafka import KafkaError, Producer

    topic = create_topic(broker, unique("kip467"), configs={"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000, "enable.idempotence": False, "retries": 0})
    results: dict[int, tuple[KafkaError | None, int]] = {}

    def done(i):
        return lambda err, msg: results.__setitem__(i, (err, msg.offset()))

    for i, key in enumerate([b"a", None, b"c"]):
        p.produce(topic, b"v", key=key, partition=0, on_delivery=done(i))
    assert p.flush(30) == 0
    assert sorted(results) == [0, 1, 2]
    assert all(e is not None and e.code() == KafkaError.INVALID_RECORD for e, _ in results.values()), results
    # nothing of the refused batch was appended: the next record is offset 0
    p.produce(topic, b"v", key=b"k", partition=0, on_delivery=done(3))
    assert p.flush(30) == 0
    assert results[3] == (None, 0), results[3]
