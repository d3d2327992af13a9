#!/usr/bin/env python3
"""Client traffic for the fuzz seed corpus: produce (every codec), consume,
consumer groups and admin requests from real client libraries
(confluent-kafka / librdkafka, kafka-python, aiokafka) against BOOTSTRAP,
the capture proxy (127.0.0.0/8). Needs the repo's .venv
(scripts/install-test-deps.sh). Each step is independent: a failing step is
reported and the rest still run. Run by fuzz/seed/make_corpus.py.

    traffic.py 127.0.0.1:19092
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback

BOOT = sys.argv[1]
assert BOOT.startswith("127."), "only 127.0.0.0/8"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
failures: list[str] = []


def step(fn):
    t = time.time()
    try:
        fn()
        print(f"traffic: {fn.__name__} ok ({time.time() - t:.1f}s)", flush=True)
    except Exception:  # noqa: BLE001 - report and go on
        failures.append(fn.__name__)
        print(f"traffic: {fn.__name__} FAILED", flush=True)
        traceback.print_exc()
    return fn


def records(n: int, tag: str):
    for i in range(n):
        key = f"{tag}-k{i % 7}".encode()
        value = (f"{tag}-value-{i}-" + "x" * (i % 40)).encode()
        yield key, value


# --- confluent-kafka (librdkafka) ------------------------------------------------
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

admin = AdminClient({"bootstrap.servers": BOOT})


def wait(fs):
    for f in fs.values():
        try:
            f.result(30)
        except Exception as e:  # noqa: BLE001
            print(f"traffic:   {e}", flush=True)


@step
def rdkafka_create_topics():
    topics = [NewTopic(f"seed-rd-{c}", num_partitions=2, replication_factor=1) for c in CODECS]
    topics += [NewTopic(f"seed-kp-{c}", num_partitions=1, replication_factor=1) for c in CODECS]
    topics += [NewTopic(f"seed-aio-{c}", num_partitions=1, replication_factor=1) for c in CODECS]
    topics += [NewTopic(f"seed-kcat-{c}", num_partitions=1, replication_factor=1) for c in CODECS]
    topics.append(
        NewTopic(
            "seed-compacted",
            num_partitions=1,
            replication_factor=1,
            config={"cleanup.policy": "compact", "segment.bytes": "1048576"},
        )
    )
    topics.append(NewTopic("seed-admin", num_partitions=1, replication_factor=1, config={"retention.ms": "3600000"}))
    wait(admin.create_topics(topics, request_timeout=30))
    wait(admin.create_topics([NewTopic("seed-admin", 1, 1)], validate_only=True, request_timeout=30))


@step
def rdkafka_produce_every_codec():
    for c in CODECS:
        p = Producer({"bootstrap.servers": BOOT, "compression.type": c, "linger.ms": 20, "enable.idempotence": c == "zstd"})
        for i, (k, v) in enumerate(records(60, f"rd-{c}")):
            p.produce(f"seed-rd-{c}", key=k, value=v, headers=[("h", b"1")] if i % 3 == 0 else None)
            if i % 20 == 19:
                p.flush(30)
        p.flush(30)
    p = Producer({"bootstrap.servers": BOOT, "linger.ms": 5})
    for k, v in records(40, "compacted"):
        p.produce("seed-compacted", key=k, value=v)
    p.produce("seed-compacted", key=b"compacted-k1", value=None)  # tombstone
    p.flush(30)


@step
def rdkafka_group_consume_commit():
    for group, topic in (("seed-g-rd", "seed-rd-none"), ("seed-g-rd2", "seed-rd-zstd")):
        c = Consumer(
            {
                "bootstrap.servers": BOOT,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10000,
            }
        )
        c.subscribe([topic])
        got, deadline = 0, time.time() + 20
        while got < 60 and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
                if got % 20 == 0:
                    c.commit(m, asynchronous=False)
        c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        c.close()


@step
def rdkafka_admin():
    wait(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "seed-admin")]))
    wait(admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")]))
    wait(
        admin.incremental_alter_configs(
            [
                ConfigResource(
                    ConfigResource.Type.TOPIC,
                    "seed-admin",
                    incremental_configs=[ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)],
                )
            ]
        )
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # AlterConfigs is still an API the broker serves
        wait(admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, "seed-admin", set_config={"retention.ms": "600000"})]))
    wait(admin.create_partitions([NewPartitions("seed-admin", 3)]))
    admin.list_topics(timeout=10)
    admin.describe_cluster().result(30)
    tp = TopicPartition("seed-rd-none", 0)
    wait(admin.list_offsets({tp: OffsetSpec.earliest()}))
    wait(admin.list_offsets({tp: OffsetSpec.latest()}))
    wait(admin.list_offsets({tp: OffsetSpec.max_timestamp()}))
    wait(admin.list_offsets({tp: OffsetSpec.for_timestamp(int(time.time() * 1000) - 60_000)}))
    wait(admin.delete_records([TopicPartition("seed-rd-gzip", 0, 5)]))
    admin.list_consumer_groups().result(30)
    wait(admin.describe_consumer_groups(["seed-g-rd", "seed-g-rd2"]))
    from confluent_kafka import ConsumerGroupTopicPartitions

    wait(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("seed-g-rd")]))
    wait(
        admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("seed-g-admin", [TopicPartition("seed-rd-none", 0, 3)])]
        )
    )
    wait(admin.delete_consumer_groups(["seed-g-admin"]))
    wait(admin.create_topics([NewTopic("seed-doomed", 1, 1)]))
    wait(admin.delete_topics(["seed-doomed"]))


# --- kafka-python ----------------------------------------------------------------
@step
def kafka_python_produce_consume():
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType

    for c in CODECS:
        p = KafkaProducer(bootstrap_servers=BOOT, compression_type=None if c == "none" else c, linger_ms=20)
        for i, (k, v) in enumerate(records(40, f"kp-{c}")):
            p.send(f"seed-kp-{c}", key=k, value=v, headers=[("h", b"2")] if i % 4 == 0 else [])
        p.flush(30)
        p.close()
    cons = KafkaConsumer(
        "seed-kp-gzip",
        bootstrap_servers=BOOT,
        group_id="seed-g-kp",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=8000,
    )
    n = 0
    for _ in cons:
        n += 1
        if n >= 40:
            break
    cons.commit()
    cons.close()
    a = KafkaAdminClient(bootstrap_servers=BOOT)
    calls = [
        lambda: a.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "seed-kp-none")]),
        lambda: a.list_groups(),
        lambda: a.describe_groups(["seed-g-kp"]),
        lambda: a.list_group_offsets("seed-g-kp"),
        lambda: a.describe_cluster(),
        lambda: a.describe_topics(["seed-kp-none"]),
        lambda: a.delete_group_offsets("seed-g-kp", [TopicPartition("seed-kp-gzip", 0)]),
        lambda: a.delete_groups(["seed-g-kp"]),
    ]
    for call in calls:
        try:
            call()
        except Exception as e:  # noqa: BLE001 - one admin call failing is fine
            print(f"traffic:   kafka-python admin: {e!r}", flush=True)
    a.close()


# --- aiokafka --------------------------------------------------------------------
@step
def aiokafka_produce_consume():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run():
        for c in CODECS:
            p = AIOKafkaProducer(bootstrap_servers=BOOT, compression_type=None if c == "none" else c, linger_ms=20)
            await p.start()
            try:
                for k, v in records(40, f"aio-{c}"):
                    await p.send(f"seed-aio-{c}", key=k, value=v)
                await p.flush()
            finally:
                await p.stop()
        cons = AIOKafkaConsumer(
            "seed-aio-lz4",
            bootstrap_servers=BOOT,
            group_id="seed-g-aio",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await cons.start()
        try:
            n, deadline = 0, time.time() + 15
            while n < 40 and time.time() < deadline:
                batch = await cons.getmany(timeout_ms=500)
                n += sum(len(v) for v in batch.values())
            await cons.commit()
        finally:
            await cons.stop()

    asyncio.run(run())


if failures:
    print(f"traffic: {len(failures)} step(s) failed: {' '.join(failures)}", flush=True)
