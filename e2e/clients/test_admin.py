"""Admin APIs through the confluent-kafka AdminClient (and kafka-python where noted):
CreateTopics with configs, DescribeConfigs, CreatePartitions, DeleteTopics,
ListOffsets (earliest / latest / by timestamp), DeleteRecords, auto topic creation;
authorized operations without an authorizer (DescribeCluster, Metadata's topic and
v8-10 cluster operations) and Kafka's whole set of dynamic broker configs
(IncrementalAlterConfigs on a broker and the cluster default).
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


# -- authorized operations (KIP-430) -----------------------------------------
# Without an authorizer Kafka answers every operation a resource type
# supports when the client asks, and the schema's "omitted" value (which
# clients show as None) when it does not.

CLUSTER_OPERATIONS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def op_names(ops) -> set[str] | None:
    return None if ops is None else {o.name for o in ops}


def test_describe_cluster_and_topics_report_every_operation_without_an_authorizer(broker, new_topic):
    from confluent_kafka import TopicCollection

    topic = new_topic()
    a = admin_for(broker)
    asked = a.describe_cluster(include_authorized_operations=True, request_timeout=15).result(20)
    assert op_names(asked.authorized_operations) == CLUSTER_OPERATIONS
    plain = a.describe_cluster(request_timeout=15).result(20)
    assert plain.authorized_operations is None

    # describe_topics reads Metadata with include_topic_authorized_operations
    (d,) = a.describe_topics(TopicCollection([topic]), include_authorized_operations=True, request_timeout=15).values()
    assert op_names(d.result(20).authorized_operations) == TOPIC_OPERATIONS
    (d,) = a.describe_topics(TopicCollection([topic]), request_timeout=15).values()
    assert d.result(20).authorized_operations is None


def metadata_v10_cluster_operations(b, asked: bool) -> int:
    """Metadata v10 (the last with the cluster's authorized operations),
    no topics: the response's cluster_authorized_operations."""
    from harness import kwire

    with kwire.Conn(b.host, b.port, timeout=15) as c:
        body = kwire.uvarint(1) + b"\x01" + (b"\x01" if asked else b"\x00") + b"\x00" + kwire.uvarint(0)
        _, resp = c.request(kwire.METADATA, 10, body, flexible=True)
    r = kwire.Reader(resp)
    r.skip_tags()  # response header v1
    r.i32()  # throttle
    for _ in range(r.uvarint() - 1):  # brokers
        r.i32(), r.compact_string(), r.i32(), r.compact_string()
        r.skip_tags()
    r.compact_string()  # cluster id
    r.i32()  # controller
    assert r.uvarint() == 1, "no topics asked, none answered"
    return r.i32()


def test_metadata_v10_cluster_authorized_operations(broker):
    bits = metadata_v10_cluster_operations(broker, True)
    names = {op for op, code in [("CREATE", 5), ("CLUSTER_ACTION", 9), ("DESCRIBE_CONFIGS", 10), ("ALTER_CONFIGS", 11), ("IDEMPOTENT_WRITE", 12), ("ALTER", 7), ("DESCRIBE", 8)] if bits & (1 << code)}
    assert names == CLUSTER_OPERATIONS and bits == sum(1 << c for c in (5, 7, 8, 9, 10, 11, 12)), bits
    assert metadata_v10_cluster_operations(broker, False) == -(2**31)


# -- Kafka's dynamic broker configs --------------------------------------------


def broker_node(b) -> str:
    (node,) = admin_for(b).list_topics(timeout=10).brokers
    return str(node)


def alter_broker(b, entity: str, ops: list[tuple[str, str | None, str]]):
    """IncrementalAlterConfigs on one broker entity; None or the error (code, message)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    kinds = {"set": AlterConfigOpType.SET, "delete": AlterConfigOpType.DELETE, "append": AlterConfigOpType.APPEND}
    r = ConfigResource(
        ConfigResource.Type.BROKER, entity, incremental_configs=[ConfigEntry(k, v, incremental_operation=kinds[op]) for k, v, op in ops]
    )
    a = admin_for(b)
    try:
        a.incremental_alter_configs([r], request_timeout=15)[r].result(20)
        return None
    except KafkaException as e:
        return e.args[0].code(), e.args[0].str()


def describe_broker(b, node: str) -> dict:
    a = admin_for(b)
    r = ConfigResource(ConfigResource.Type.BROKER, node)
    return a.describe_configs([r], request_timeout=15)[r].result(20)


def test_kafkas_dynamic_broker_configs_are_accepted_and_reported(broker):
    """Every config Kafka changes at run time is accepted (Moldau stores and
    reports those it does not use), with Kafka's refusals: read-only configs,
    keystores without a listener prefix, bad values, thread counts beyond
    double the current one, all INVALID_REQUEST."""
    node = broker_node(broker)
    stored = {
        "sasl.kerberos.min.time.before.relogin": "70000",
        "log.cleaner.threads": "2",
        "unclean.leader.election.enable": "true",
        "num.io.threads": "5",
        "listener.name.plaintext.ssl.keystore.type": "PKCS12",
    }
    try:
        assert alter_broker(broker, node, [(k, v, "set") for k, v in stored.items()]) is None

        def shown() -> dict:
            entries = describe_broker(broker, node)
            return {k: (entries[k].value, entries[k].source) if k in entries else None for k in stored}

        # a broker applies a change when its metadata arrives (Kafka: shortly after)
        deadline = time.monotonic() + 20
        while (got := shown()) != {k: (v, 2) for k, v in stored.items()} and time.monotonic() < deadline:
            time.sleep(0.5)
        assert got == {k: (v, 2) for k, v in stored.items()}, got
        entries = describe_broker(broker, node)
        assert not entries["sasl.kerberos.min.time.before.relogin"].is_read_only
        # a secret is stored but never shown
        assert alter_broker(broker, node, [("sasl.jaas.config", "org.example.Login required;", "set")]) is None
        deadline = time.monotonic() + 20
        while (e := describe_broker(broker, node).get("sasl.jaas.config")) is None or e.source != 2:
            assert time.monotonic() < deadline, e
            time.sleep(0.5)
        assert e.is_sensitive and e.value is None

        refused = [
            ("num.partitions", "3", "Cannot update these configs dynamically"),
            ("log.retention.check.interval.ms", "1000", "Cannot update these configs dynamically"),
            ("ssl.keystore.location", "/tmp/none.jks", "only per-listener"),
            ("sasl.kerberos.min.time.before.relogin", "soon", "Not a number of type LONG"),
            ("max.connections", "-5", ""),
            ("num.io.threads", "100", "double the current value"),
        ]
        for k, v, why in refused:
            got = alter_broker(broker, node, [(k, v, "set")])
            assert got is not None and got[0] == KafkaError.INVALID_REQUEST, (k, v, got)
            assert why in got[1], (k, v, got)
        # deleting a config that cannot be set is accepted (nothing to delete)
        assert alter_broker(broker, node, [("num.partitions", None, "delete")]) is None
    finally:
        cleanup = [(k, None, "delete") for k in [*stored, "sasl.jaas.config"]]
        assert alter_broker(broker, node, cleanup) is None
    entries = describe_broker(broker, node)
    assert "sasl.kerberos.min.time.before.relogin" not in entries or entries["sasl.kerberos.min.time.before.relogin"].source != 2


def test_per_broker_dynamic_configs_are_refused_at_the_cluster_default(broker):
    from harness import kafka_tools

    default = ["--alter", "--entity-type", "brokers", "--entity-default"]
    p = kafka_tools.configs(broker.bootstrap, *default, "--add-config", "sasl.kerberos.min.time.before.relogin=70000")
    assert p.returncode != 0
    assert "Cannot update these configs at default cluster level, broker id must be specified" in p.stdout + p.stderr, p.stdout + p.stderr
    # a cluster-wide one is taken there, and reported
    p = kafka_tools.configs(broker.bootstrap, *default, "--add-config", "log.cleaner.threads=2")
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        p = kafka_tools.configs(broker.bootstrap, "--describe", "--entity-type", "brokers", "--entity-default")
        assert "log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2}" in p.stdout, p.stdout
    finally:
        p = kafka_tools.configs(broker.bootstrap, *default, "--delete-config", "log.cleaner.threads")
        assert p.returncode == 0, p.stdout + p.stderr
