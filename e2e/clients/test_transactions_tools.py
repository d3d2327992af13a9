"""Kafka's own `kafka-transactions.sh` (harness/kafka_tools.py) against the
broker while a confluent-kafka transactional producer holds a transaction
open: `list` shows the transactional id (ListTransactions), `describe`
shows it Ongoing with its topic-partition (DescribeTransactions), and
`describe-producers` shows the producer with its open transaction's start
offset (DescribeProducers, KIP-664); after the commit `describe` shows the
transaction complete and `describe-producers` no start offset (None).

Runs against Moldau and Apache Kafka alike (MOLDAU_TEST_TARGET).
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from conftest import unique
from harness import kafka_tools
from harness.clients import RDKAFKA_LOGGER


def eventually(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"never {what}: {last}")


def test_list_describe_and_describe_producers(broker, new_topic):
    topic = new_topic()
    tid = unique("txn-tools")
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": tid,
            "transaction.timeout.ms": 60000,
            "client.id": "moldau-e2e-txn-tools",
            "logger": RDKAFKA_LOGGER,
        }
    )
    p.init_transactions(30)

    # a first, committed transaction: records at offsets 0, 1 and the marker at 2
    p.begin_transaction()
    for v in (b"c0", b"c1"):
        p.produce(topic, value=v, partition=0)
    p.flush(30)
    p.commit_transaction(30)

    # the open transaction starts after the first one's COMMIT marker
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    assert p.flush(30) == 0

    listed = kafka_tools.transactions(broker.bootstrap, "list")
    mine = [row for row in listed if row["TransactionalId"] == tid]
    assert len(mine) == 1, listed
    producer_id = mine[0]["ProducerId"]
    assert mine[0]["TransactionState"] == "Ongoing", mine

    described = kafka_tools.transactions(broker.bootstrap, "describe", "--transactional-id", tid)
    assert len(described) == 1, described
    d = described[0]
    assert d["TransactionalId"] == tid
    assert d["ProducerId"] == producer_id
    assert d["TransactionState"] == "Ongoing", d
    assert d["TopicPartitions"] == f"{topic}-0", d

    producers = kafka_tools.transactions(
        broker.bootstrap, "describe-producers", "--topic", topic, "--partition", "0"
    )
    assert len(producers) == 1, producers
    prod = producers[0]
    assert prod["ProducerId"] == producer_id, prod
    assert prod["LastSequence"] == "2", prod
    assert int(prod["LastTimestamp"]) > 0, prod
    assert prod["CurrentTransactionStartOffset"] == "3", prod

    p.commit_transaction(30)

    def completed():
        rows = kafka_tools.transactions(broker.bootstrap, "describe", "--transactional-id", tid)
        return rows if rows[0]["TransactionState"] == "CompleteCommit" else None

    described = eventually("the transaction completed", completed)
    assert described[0]["ProducerId"] == producer_id

    producers = kafka_tools.transactions(
        broker.bootstrap, "describe-producers", "--topic", topic, "--partition", "0"
    )
    assert [row["ProducerId"] for row in producers] == [producer_id], producers
    assert producers[0]["CurrentTransactionStartOffset"] == "None", producers
