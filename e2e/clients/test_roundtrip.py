"""Produce and consume with each real client: byte-identical records, contiguous offsets.

Clients: confluent-kafka, kafka-python, aiokafka, the Java client (harness/clients.py).
Every client produces with acks=all, idempotence disabled, and consumes with
assign + seek (no consumer group).
"""

from __future__ import annotations

import pytest

from harness.clients import ALL_CLIENTS, BY_NAME, COMPRESSIONS
from harness.records import assert_same, gen_records

CLIENT_IDS = [c.name for c in ALL_CLIENTS]


def records_for(client, n, seed, **kw):
    return gen_records(n, seed, null_header_values=client.null_header_values, **kw)


@pytest.mark.parametrize("client", ALL_CLIENTS, ids=CLIENT_IDS)
def test_roundtrip(broker, new_topic, client):
    topic = new_topic()
    recs = records_for(client, 60, seed=1)
    offsets = client.produce(broker.bootstrap, topic, 0, recs)
    assert offsets == list(range(60))
    assert_same(recs, client.consume(broker.bootstrap, topic, 0, 0, 60))


@pytest.mark.parametrize("client", ALL_CLIENTS, ids=CLIENT_IDS)
def test_seek_into_the_middle(broker, new_topic, client):
    """Consuming from an offset inside a batch starts exactly there."""
    topic = new_topic()
    recs = records_for(client, 40, seed=2, large_value=False)
    assert client.produce(broker.bootstrap, topic, 0, recs) == list(range(40))
    assert_same(recs[17:], client.consume(broker.bootstrap, topic, 0, 17, 23), first_offset=17)


@pytest.mark.parametrize("codec", COMPRESSIONS)
@pytest.mark.parametrize("client", ALL_CLIENTS, ids=CLIENT_IDS)
def test_compression(broker, new_topic, client, codec):
    topic = new_topic()
    recs = records_for(client, 50, seed=3)
    assert client.produce(broker.bootstrap, topic, 0, recs, compression=codec) == list(range(50))
    assert_same(recs, client.consume(broker.bootstrap, topic, 0, 0, 50))


@pytest.mark.parametrize("client", ALL_CLIENTS, ids=CLIENT_IDS)
def test_mixed_codecs_in_one_partition(broker, new_topic, client):
    """Batches of every codec appended to one partition read back as one contiguous log."""
    topic = new_topic()
    allrecs = []
    for i, codec in enumerate(COMPRESSIONS):
        recs = records_for(client, 12, seed=40 + i, large_value=False)
        offs = client.produce(broker.bootstrap, topic, 0, recs, compression=codec)
        assert offs == list(range(len(allrecs), len(allrecs) + 12)), f"{codec}: {offs}"
        allrecs += recs
    assert_same(allrecs, client.consume(broker.bootstrap, topic, 0, 0, len(allrecs)))


CROSS = [(p, c) for p in CLIENT_IDS for c in CLIENT_IDS if p != c]


@pytest.mark.parametrize("producer,consumer", CROSS, ids=[f"{p}->{c}" for p, c in CROSS])
def test_cross_client(broker, new_topic, producer, consumer):
    """What one client wrote, another reads byte-identically (codec varies by pair)."""
    prod, cons = BY_NAME[producer], BY_NAME[consumer]
    codec = COMPRESSIONS[(CLIENT_IDS.index(producer) * 3 + CLIENT_IDS.index(consumer)) % len(COMPRESSIONS)]
    topic = new_topic()
    recs = gen_records(30, seed=5, null_header_values=prod.null_header_values and cons.null_header_values)
    assert prod.produce(broker.bootstrap, topic, 0, recs, compression=codec) == list(range(30))
    assert_same(recs, cons.consume(broker.bootstrap, topic, 0, 0, 30))


@pytest.mark.parametrize("client", ALL_CLIENTS, ids=CLIENT_IDS)
def test_multi_partition(broker, new_topic, client):
    """Each partition has its own offsets from 0; records stay in their partition."""
    topic = new_topic(partitions=3)
    per = {}
    for p in range(3):
        per[p] = records_for(client, 10 + p, seed=60 + p, large_value=False)
        assert client.produce(broker.bootstrap, topic, p, per[p]) == list(range(10 + p))
    for p in range(3):
        assert_same(per[p], client.consume(broker.bootstrap, topic, p, 0, 10 + p))
