"""Kafka's own `kafka-transactions.sh` (harness/kafka_tools.py) against the
broker while a confluent-kafka transactional producer holds a transaction
open: `list` shows the transactional id (ListTransactions), `describe`
shows it Ongoing with its topic-partition (DescribeTransactions), and
`describe-producers` shows the producer with its open transaction's start
offset (DescribeProducers, KIP-664); after the commit `describe` shows the
transaction complete and `describe-producers` no start offset (None).

`find-hanging` (DescribeProducers, then ListTransactions filtered by
producer id and DescribeTransactions) on a broker of the module's own with
`transaction.partition.verification.enable=false`: the producer's ordinary
open transaction is not hanging, a transactional batch of the same producer
written (a hand-encoded Produce v3..v8, which does not add the partition to
the transaction) on a partition its coordinator never added is.

`abort --topic T --partition P --start-offset O` then ends that hanging
transaction: the tool sends WriteTxnMarkers (ABORT) from its admin client to
the partition leader, which needs CLUSTER_ACTION on the cluster. The module's
broker runs Kafka's StandardAuthorizer with `super.users=User:ANONYMOUS`, so
the tool (and the PLAINTEXT test clients) may. Without an authorizer Kafka
lets any client write markers; Moldau refuses clients there
(handlers/txn_markers.rs), which `test_abort_needs_cluster_action` shows on
the session's broker.

Runs against Moldau and Apache Kafka alike (MOLDAU_TEST_TARGET).
"""

from __future__ import annotations

import shutil
import struct
import time

import pytest
from confluent_kafka import Producer

from conftest import STATE, admin_for, create_topic, unique
from harness import broker as brokers
from harness import kafka_tools, kwire
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


# ---------------------------------------------------------------------------
# find-hanging and abort

# the broker lets a transactional batch in without asking the coordinator
# (KIP-890 part 1 off), as a broker before Kafka 3.6 did: the way a hanging
# transaction came about
UNVERIFIED_PROPS = {
    "transaction.partition.verification.enable": "false",
    # abort writes markers from an admin client: CLUSTER_ACTION, which the
    # super user has
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}

HANGING_COLUMNS = [
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
]


@pytest.fixture(scope="module")
def unverified_broker():
    b = brokers.new_broker(STATE / f"own-test_transactions_tools-{brokers.target()}")
    try:
        brokers.start_with_properties(b, UNVERIFIED_PROPS, "unverified")
    except Exception:
        b.close(keep=True)
        raise
    yield b
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


def transactional_batch(producer_id: int, epoch: int, base_sequence: int, values: list[bytes], timestamp_ms: int) -> bytes:
    """An uncompressed record batch v2 at base offset 0 with the
    transactional attribute (bit 4) of producer `producer_id`/`epoch`."""
    body = bytearray()
    for i, v in enumerate(values):
        rec = kwire.i8(0) + kwire.varint(0) + kwire.varint(i) + kwire.varint(-1) + kwire.varint(len(v)) + v + kwire.varint(0)
        body += kwire.varint(len(rec)) + rec
    after_crc = (
        kwire.i16(0x10)  # transactional, no compression, CreateTime
        + kwire.i32(len(values) - 1)
        + kwire.i64(timestamp_ms)
        + kwire.i64(timestamp_ms)
        + kwire.i64(producer_id)
        + kwire.i16(epoch)
        + kwire.i32(base_sequence)
        + kwire.i32(len(values))
        + bytes(body)
    )
    after_length = kwire.i32(0) + kwire.i8(2) + struct.pack(">I", kwire.crc32c(after_crc)) + after_crc
    return kwire.i64(0) + kwire.i32(len(after_length)) + after_length


def produce_transactional(bootstrap: str, transactional_id: str, topic: str, partition: int, batch: bytes) -> tuple[int, int, int]:
    """One Produce request (v3..v8: before v12 the broker never adds the
    partition to the transaction itself) of `batch` for `transactional_id`,
    acks=all; returns (version, error code, base offset)."""
    host, port = bootstrap.rsplit(":", 1)
    with kwire.Conn(host, int(port)) as c:
        v = c.pick_version(kwire.PRODUCE, 3, 8)
        body = (
            kwire.string(transactional_id)
            + kwire.i16(-1)
            + kwire.i32(10000)
            + kwire.i32(1)
            + kwire.string(topic)
            + kwire.i32(1)
            + kwire.i32(partition)
            + kwire.nbytes(batch)
        )
        _, resp = c.request(kwire.PRODUCE, v, body, flexible=False)
    r = kwire.Reader(resp)
    assert r.i32() == 1
    assert r.string() == topic
    assert r.i32() == 1
    assert r.i32() == partition
    code = r.i16()
    base_offset = r.i64()
    return v, code, base_offset


def find_hanging(bootstrap: str, *args: str) -> list[dict[str, str]]:
    rows = kafka_tools.transactions(bootstrap, "find-hanging", *args)
    for row in rows:
        assert list(row) == HANGING_COLUMNS, rows
    return rows


def test_find_hanging(unverified_broker):
    """`find-hanging` tells an open transaction its coordinator knows from
    one it never added the partition to (see the module's docstring for why
    `abort` is not run)."""
    b = unverified_broker
    topic = create_topic(b, unique("txn-hanging"), partitions=2)
    tid = unique("txn-hanging")
    p = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "transactional.id": tid,
            "transaction.timeout.ms": 60000,
            "client.id": "moldau-e2e-txn-tools",
            "logger": RDKAFKA_LOGGER,
        }
    )
    p.init_transactions(30)

    # an ordinary open transaction on partition 0, known to its coordinator
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    assert p.flush(30) == 0
    described = kafka_tools.transactions(b.bootstrap, "describe", "--transactional-id", tid)
    assert len(described) == 1 and described[0]["TransactionState"] == "Ongoing", described
    assert described[0]["TopicPartitions"] == f"{topic}-0", described
    producer_id = int(described[0]["ProducerId"])
    epoch = int(described[0]["ProducerEpoch"])

    # with no age limit (0 minutes) the open transaction is a candidate, and
    # its coordinator has its partition: not hanging
    time.sleep(0.1)
    assert find_hanging(b.bootstrap, "--topic", topic, "--max-transaction-timeout", "0") == []

    # a batch of the same producer on partition 1, never added to the
    # transaction: it opens a transaction there that no marker will end
    now_ms = int(time.time() * 1000)
    batch = transactional_batch(producer_id, epoch, 0, [b"hanging-0", b"hanging-1"], now_ms)
    v, code, base_offset = produce_transactional(b.bootstrap, tid, topic, 1, batch)
    assert (code, base_offset) == (kwire.NONE, 0), f"Produce v{v}: error {code}, base offset {base_offset}"
    time.sleep(0.1)

    producers = kafka_tools.transactions(b.bootstrap, "describe-producers", "--topic", topic, "--partition", "1")
    assert [(r["ProducerId"], r["ProducerEpoch"], r["CurrentTransactionStartOffset"]) for r in producers] == [
        (str(producer_id), str(epoch), "0")
    ], producers

    for scope in (["--topic", topic], ["--topic", topic, "--partition", "1"]):
        hanging = find_hanging(b.bootstrap, *scope, "--max-transaction-timeout", "0")
        assert [(r["Topic"], r["Partition"], r["ProducerId"], r["ProducerEpoch"], r["StartOffset"]) for r in hanging] == [
            (topic, "1", str(producer_id), str(epoch), "0")
        ], (scope, hanging)
        assert int(hanging[0]["LastTimestamp"]) == now_ms, hanging
        assert hanging[0]["Duration(min)"] == "0", hanging
    assert find_hanging(b.bootstrap, "--topic", topic, "--partition", "0", "--max-transaction-timeout", "0") == []

    # the whole broker (every partition it has a replica of)
    broker_ids = list(admin_for(b).list_topics(timeout=10).brokers)
    assert len(broker_ids) == 1, broker_ids
    hanging = find_hanging(b.bootstrap, "--broker-id", str(broker_ids[0]), "--max-transaction-timeout", "0")
    assert [(r["Topic"], r["Partition"], r["ProducerId"]) for r in hanging] == [(topic, "1", str(producer_id))], hanging

    # younger than the default limit (15 minutes): not looked at
    assert find_hanging(b.bootstrap, "--topic", topic) == []

    # the ordinary transaction ends; the hanging one stays
    p.commit_transaction(30)
    hanging = find_hanging(b.bootstrap, "--topic", topic, "--max-transaction-timeout", "0")
    assert [(r["Partition"], r["ProducerId"]) for r in hanging] == [("1", str(producer_id))], hanging

    # abort: the hanging transaction ends with an ABORT marker from the tool
    r = kafka_tools.run(
        kafka_tools.TRANSACTIONS,
        ["--bootstrap-server", b.bootstrap, "abort", "--topic", topic, "--partition", "1", "--start-offset", "0"],
    )
    assert r.returncode == 0, f"abort exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    assert find_hanging(b.bootstrap, "--topic", topic, "--max-transaction-timeout", "0") == []
    producers = kafka_tools.transactions(b.bootstrap, "describe-producers", "--topic", topic, "--partition", "1")
    assert [r["CurrentTransactionStartOffset"] for r in producers] == ["None"], producers


def test_abort_needs_cluster_action(broker, new_topic):
    """Without an authorizer Moldau takes markers only from its brokers
    (Kafka takes them from anyone): the tool's abort is refused with
    CLUSTER_AUTHORIZATION_FAILED and changes nothing."""
    if brokers.target() == "kafka":
        return
    topic = new_topic()
    r = kafka_tools.run(
        kafka_tools.TRANSACTIONS,
        [
            "--bootstrap-server", broker.bootstrap,
            "abort", "--topic", topic, "--partition", "0",
            "--producer-id", "7", "--producer-epoch", "0", "--coordinator-epoch", "0",
        ],
    )
    assert r.returncode != 0, r
    assert "ClusterAuthorization" in r.stdout + r.stderr or "cluster authorization" in r.stdout + r.stderr, r
