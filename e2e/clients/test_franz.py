"""franz-go (github.com/twmb/franz-go, the Go Kafka client) against the
broker, through the Go driver e2e/clients/franz (harness.clients
franz_program, built on first use; scripts/install-test-deps.sh downloads
its modules):

- franz-go's default producer (idempotent, acks=all) produces the harness's
  records (null and empty keys and values, binary bytes, duplicate and null
  header values, a 100 KiB value) to a 3-partition topic, per codec; each
  partition's offsets come back 0..n-1 from one producer id, confluent-kafka
  reads every record byte-identical and so does franz-go, whose records
  carry that producer id;
- confluent-kafka produces (per codec) and franz-go, consuming the
  partitions directly, reads every record byte-identical (no producer id:
  the producer was not idempotent);
- a franz-go group consumer with small fetch sizes reads a 100-partition
  topic (records produced first by confluent-kafka, one batch per record)
  byte-identical, in at least as many fetches as the sizes demand, without
  a fetch-session reset or a fetch error; on Moldau the broker's /metrics
  show that its fetches were served incrementally on a session (issue #15).

Against Apache Kafka (MOLDAU_TEST_TARGET=kafka) everything is checked the
same way except the Moldau metrics.
"""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from conftest import STATE, create_topic, unique
from harness import broker as brokers
from harness.clients import COMPRESSIONS, ClientError, ConfluentClient, franz_program
from harness.records import Consumed, Record, assert_same, gen_records
# the same 100 partitions, one batch per record, as the Java client's test
from test_fetch_sessions import INCREMENTAL, PARTITIONS, PER_PARTITION, metric, produce_all

# the first test may build the driver (about 40 s cold on 2 cores)
pytestmark = [pytest.mark.timeout(300)]

PARTS = 3
PER_PART = 24


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def _unb64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)


def run_franz(command: str, request: dict, name: str) -> tuple[int, dict]:
    """Runs the driver's `command` with `request` on stdin; its stderr (franz-go's
    log) is kept in STATE/franz-<name>.err. Returns (exit code, answer)."""
    try:
        binary = franz_program()
    except ClientError as e:
        pytest.fail(str(e))
    log = STATE / f"franz-{name}.err"
    log.parent.mkdir(parents=True, exist_ok=True)
    timeout = request["timeout_ms"] / 1000 + 40  # the driver's own bound plus its grace
    with open(log, "w") as err:
        p = subprocess.run([str(binary), command], input=json.dumps(request), stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout)
    try:
        answer = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        pytest.fail(f"franz {command} exited {p.returncode} without an answer: {p.stdout[-500:]!r}; stderr in {log}: {log.read_text()[-3000:]}")
    answer["_log"] = str(log)
    return p.returncode, answer


def franz_produce(b: brokers.Broker, topic: str, records: dict[int, list[Record]], compression: str) -> dict[int, list[dict]]:
    """franz-go produces records[p] to partition p, the partitions interleaved
    in one request; returns each partition's results in order."""
    order = []
    for i in range(max(len(rs) for rs in records.values())):
        order += [(p, rs[i]) for p, rs in sorted(records.items()) if i < len(rs)]
    request = {
        "bootstrap": b.bootstrap,
        "topic": topic,
        "timeout_ms": 60000,
        "compression": compression,
        "records": [
            {
                "partition": p,
                "key": _b64(r.key),
                "value": _b64(r.value),
                "headers": [[k, _b64(v)] for k, v in r.headers],
                "timestamp": r.timestamp,
            }
            for p, r in order
        ],
    }
    rc, answer = run_franz("produce", request, f"produce-{topic}")
    errors = [res["error"] for res in answer.get("results") or [] if res["error"]]
    assert rc == 0 and answer["error"] is None and not errors, (
        f"franz produce exited {rc}: {answer['error']}; record errors: {errors[:5]}; log {answer['_log']}"
    )
    out: dict[int, list[dict]] = {}
    for (p, _), res in zip(order, answer["results"]):
        assert res["partition"] == p, f"a record for partition {p} went to {res['partition']}"
        out.setdefault(p, []).append(res)
    return out


def franz_consume(b: brokers.Broker, topic: str, count: int, *, group: str | None = None, partitions: int | None = None,
                  fetch_max_bytes: int | None = None, fetch_max_partition_bytes: int | None = None,
                  timeout: float = 60) -> tuple[dict[int, list[Consumed]], dict]:
    """franz-go reads `count` records of `topic` (a group consumer, or
    partitions 0..partitions-1 directly from offset 0); returns them by
    partition, in the order read, and the driver's answer (fetch_requests,
    session_resets, errors, producer ids in answer["records"])."""
    request = {
        "bootstrap": b.bootstrap,
        "topic": topic,
        "count": count,
        "timeout_ms": int(timeout * 1000),
        "group": group or "",
        "partitions": partitions or 0,
        "fetch_max_bytes": fetch_max_bytes or 0,
        "fetch_max_partition_bytes": fetch_max_partition_bytes or 0,
    }
    rc, answer = run_franz("consume", request, f"consume-{group or topic}")
    assert rc == 0 and answer["error"] is None, (
        f"franz consume exited {rc}: {answer['error']}; fetch errors: {(answer.get('errors') or [])[:5]}; log {answer['_log']}"
    )
    out: dict[int, list[Consumed]] = {}
    for r in answer["records"]:
        rec = Record(_unb64(r["key"]), _unb64(r["value"]), tuple((k, _unb64(v)) for k, v in r["headers"]), r["timestamp"])
        out.setdefault(r["partition"], []).append(Consumed(r["offset"], rec, r["timestamp_type"]))
    return out, answer


FULL = 'moldau_fetch_session_requests_total{kind="full"}'


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_franz_produces_confluent_and_franz_read(broker, compression):
    topic = create_topic(broker, unique(f"franzp-{compression}"), PARTS)
    # the 100 KiB value in partition 0
    records = {p: gen_records(PER_PART, seed=7000 + p, large_value=(p == 0)) for p in range(PARTS)}
    results = franz_produce(broker, topic, records, compression)

    pids = {res["producer_id"] for rs in results.values() for res in rs}
    epochs = {res["producer_epoch"] for rs in results.values() for res in rs}
    assert len(pids) == 1 and min(pids) >= 0, f"franz-go's idempotent producer: producer ids {pids}"
    assert len(epochs) == 1 and min(epochs) >= 0, f"producer epochs {epochs}"
    for p in range(PARTS):
        assert [res["offset"] for res in results[p]] == list(range(PER_PART)), f"partition {p}: acknowledged offsets"

    confluent = ConfluentClient()
    for p in range(PARTS):
        assert_same(records[p], confluent.consume(broker.bootstrap, topic, p, 0, PER_PART))

    consumed, answer = franz_consume(broker, topic, PARTS * PER_PART, partitions=PARTS)
    assert sorted(consumed) == list(range(PARTS)), f"partitions read: {sorted(consumed)}"
    for p in range(PARTS):
        assert_same(records[p], consumed[p])
    # the batches kept the idempotent producer's id
    assert {r["producer_id"] for r in answer["records"]} == pids


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_confluent_produces_franz_reads(broker, compression):
    topic = create_topic(broker, unique(f"franzc-{compression}"), PARTS)
    records = {p: gen_records(PER_PART, seed=8000 + p, large_value=(p == 1)) for p in range(PARTS)}
    confluent = ConfluentClient()
    for p in range(PARTS):
        assert confluent.produce(broker.bootstrap, topic, p, records[p], compression) == list(range(PER_PART))

    consumed, answer = franz_consume(broker, topic, PARTS * PER_PART, partitions=PARTS)
    assert sorted(consumed) == list(range(PARTS)), f"partitions read: {sorted(consumed)}"
    for p in range(PARTS):
        assert_same(records[p], consumed[p])
    # confluent-kafka's producer here is not idempotent: no producer id
    assert {r["producer_id"] for r in answer["records"]} == {-1}
    assert not answer["errors"], answer["errors"][:5]


# --- fetch sessions, 100 partitions (issue #15) -----------------------------
# small responses: many fetches
FETCH_MAX_BYTES = 16384
FETCH_MAX_PARTITION_BYTES = 2048


def payload_bytes(records: dict[int, list[Record]]) -> int:
    """Keys, values and headers of all records: less than the batches hold."""
    return sum(
        len(r.key or b"") + len(r.value or b"") + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)
        for rs in records.values()
        for r in rs
    )


def test_franz_group_consumer_reads_100_partitions_through_sessions(broker):
    topic = create_topic(broker, unique("franzsess"), PARTITIONS)
    produced = produce_all(broker, topic)
    moldau = broker.kind == "moldau"
    franz_program()  # any build before the metrics are read
    before = (metric(broker, INCREMENTAL), metric(broker, FULL)) if moldau else (0, 0)

    consumed, answer = franz_consume(
        broker, topic, PARTITIONS * PER_PARTITION, group=unique("franzgrp"),
        fetch_max_bytes=FETCH_MAX_BYTES, fetch_max_partition_bytes=FETCH_MAX_PARTITION_BYTES, timeout=120,
    )
    assert sorted(consumed) == list(range(PARTITIONS)), f"partitions read: {sorted(consumed)}"
    for p in range(PARTITIONS):
        assert_same(produced[p], consumed[p])

    fetches = answer["fetch_requests"]
    # each batch is far below FETCH_MAX_BYTES: every response stays within it
    least = payload_bytes(produced) // FETCH_MAX_BYTES
    assert fetches >= least, f"{fetches} fetches for {payload_bytes(produced)} bytes at fetch.max.bytes {FETCH_MAX_BYTES}"
    assert answer["session_resets"] == 0, f"franz-go reset its fetch session {answer['session_resets']} times; log {answer['_log']}"
    assert not answer["errors"], answer["errors"][:5]

    print(f"franz-go: {fetches} fetches (at least {least})")
    if moldau:
        incremental = metric(broker, INCREMENTAL) - before[0]
        full = metric(broker, FULL) - before[1]
        print(f"broker: {full:.0f} full, {incremental:.0f} incremental")
        assert incremental > 0, "no incremental fetch was served"
        # One session for the whole read: a full fetch begins it, every
        # later fetch is incremental but the one franz-go's close sends
        # (epoch -1, sessionless, counted by neither). On an idle broker
        # this is exact (29 fetches: 1 full, 27 incremental); a fetch the
        # broker answered after the client stopped listening only adds.
        assert full <= 3, f"{full} full fetches (new sessions) for {fetches} fetches"
        assert incremental >= fetches - full - 1, f"{incremental} incremental of {fetches} fetches ({full} full)"


def test_franz_group_transact_session_moves_each_record_exactly_once(broker):
    """franz-go's GroupTransactSession (issue 37): a read_committed group consumer and a
    transactional producer, the offsets committed with each transaction
    (TxnOffsetCommit with the group's generation and member id). The first transaction is
    aborted; the session rewinds to the committed offsets. Every input is in the output
    exactly once (read_committed), and the group's offsets end at the input's end."""
    from test_transactions import committed_offsets, produce_plain, read_topic

    src = create_topic(broker, unique("franzetl-in"), PARTS)
    dst = create_topic(broker, unique("franzetl-out"), PARTS)
    n = 90
    inputs = [f"f{i}" for i in range(n)]
    produce_plain(broker.bootstrap, src, inputs)
    group = unique("franzetl")
    request = {
        "bootstrap": broker.bootstrap, "in": src, "out": dst, "group": group,
        "transactional_id": unique("franzetl-txn"), "count": n, "timeout_ms": 90000, "abort_first": True,
    }
    rc, answer = run_franz("etl", request, f"etl-{group}")
    assert rc == 0 and answer.get("error") is None, f"franz etl exited {rc}: {answer}; log {answer['_log']}"
    assert answer["committed"] == n and answer["aborted"] > 0, answer
    out = read_topic(broker.bootstrap, dst, PARTS, n)
    assert sorted(out) == sorted(b"x" + v.encode() for v in inputs), "each input exactly once"
    assert sum(committed_offsets(broker.bootstrap, group, src, PARTS).values()) == n
