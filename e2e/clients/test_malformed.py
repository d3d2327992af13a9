"""Malformed and invalid requests on raw sockets (harness/kwire.py).

After each, the broker process is still alive and a normal client still
produces and consumes. Expected answers follow the Kafka protocol
specification; where Apache Kafka's exact behaviour is narrower than what the
spec allows, the assertion accepts what the spec allows and says so.
"""

from __future__ import annotations

import struct

import pytest

from conftest import admin_for, check_healthy, create_topic, unique
from harness import kwire
from harness.clients import ConfluentClient
from harness.records import Consumed, Record, assert_same

pytestmark = pytest.mark.timeout(120)

MAX_REQUEST = 100 * 1024 * 1024  # socket.request.max.bytes default


def conn(b, timeout=15.0):
    return kwire.Conn(b.host, b.port, timeout=timeout)


def test_truncated_frame_then_close(own_broker):
    b = own_broker
    # announces 100 bytes, sends 10, closes
    with conn(b) as c:
        c.send_raw(kwire.i32(100) + kwire.i16(kwire.API_VERSIONS) + kwire.i16(0) + kwire.i32(1) + b"ab")
    # a frame too short to hold a request header
    with conn(b) as c:
        c.send_raw(kwire.i32(2) + kwire.i16(kwire.API_VERSIONS))
        assert c.closed_by_peer(), "broker kept a connection open after a frame shorter than a request header"
    # half a length prefix
    with conn(b) as c:
        c.send_raw(b"\x00\x00")
    check_healthy(b)


@pytest.mark.parametrize("size", [MAX_REQUEST + 1, 0x7FFFFFFF, -1], ids=["max+1", "int32max", "negative"])
def test_length_prefix_beyond_limit_closes_connection(own_broker, size):
    b = own_broker
    with conn(b) as c:
        c.send_raw(struct.pack(">i", size))
        c.send_raw(b"\x00" * 64)
        assert c.closed_by_peer(), f"connection not closed after a length prefix of {size}"
    check_healthy(b)


@pytest.mark.parametrize("api_key", [9999, -1, 32767])
def test_unknown_api_key(own_broker, api_key):
    """Spec: no response layout exists for an unknown key; Kafka closes the
    connection. Accepted: closed, or a response carrying our correlation id."""
    b = own_broker
    with conn(b) as c:
        header = kwire.i16(api_key) + kwire.i16(0) + kwire.i32(77) + kwire.string("e2e")
        c.send_raw(kwire.i32(len(header)) + header)
        c.sock.settimeout(15)
        try:
            head = c.sock.recv(8)
        except (ConnectionResetError, BrokenPipeError):
            head = b""
        if head:
            assert len(head) >= 8 and struct.unpack(">i", head[4:8])[0] == 77, f"unexpected bytes {head!r}"
    check_healthy(b)


def test_api_versions_v0_and_v3(own_broker):
    b = own_broker
    with conn(b) as c:
        r0 = c.api_versions(0)
        assert r0.error_code == 0
        assert kwire.API_VERSIONS in r0.versions and kwire.PRODUCE in r0.versions
        assert r0.versions[kwire.API_VERSIONS][1] >= 3
        r3 = c.api_versions(3)
        assert r3.error_code == 0 and r3.versions == r0.versions


@pytest.mark.parametrize("version", [127, 32767])
def test_unsupported_api_versions_version(own_broker, version):
    """KIP-511: a v0-layout ApiVersions response with UNSUPPORTED_VERSION (35)
    and at least the ApiVersions key's own version range, so the client can retry.
    (Apache Kafka lists only that key; listing every key also satisfies the spec.)"""
    b = own_broker
    with conn(b) as c:
        res = c.api_versions(version)
        assert res.error_code == kwire.UNSUPPORTED_VERSION, res
        assert kwire.API_VERSIONS in res.versions, res.versions
        lo, hi = res.versions[kwire.API_VERSIONS]
        assert lo == 0 and hi >= 3, res.versions
        # the connection stays usable: retry with a supported version
        again = c.api_versions(min(hi, 3))
        assert again.error_code == 0
    check_healthy(b)


def raw_records():
    return [
        kwire.Rec(b"raw-key", b"raw-value", [("h", b"1")], 0),
        kwire.Rec(None, b"second", [], 5),
    ]


def test_produce_raw_batch_accepted(own_broker):
    """The hand-built batch is valid: accepted and read back by a real client
    (so that the corrupted-CRC test below tests the CRC, not the encoder)."""
    b = own_broker
    topic = create_topic(b, unique("raw"))
    ts = 1_700_000_000_000
    with conn(b) as c:
        v, code = c.produce(topic, 0, kwire.record_batch(raw_records(), base_timestamp=ts))
    assert code == kwire.NONE, f"Produce v{v}: error {code}"
    got = ConfluentClient().consume(b.bootstrap, topic, 0, 0, 2)
    want = [Record(b"raw-key", b"raw-value", (("h", b"1"),), ts), Record(None, b"second", (), ts + 5)]
    assert_same(want, got)


def test_produce_corrupt_crc(own_broker):
    b = own_broker
    topic = create_topic(b, unique("crc"))
    with conn(b) as c:
        v, code = c.produce(topic, 0, kwire.record_batch(raw_records(), corrupt_crc=True))
        assert code == kwire.CORRUPT_MESSAGE, f"Produce v{v} with a bad CRC: error {code}, want 2 CORRUPT_MESSAGE"
        # nothing was appended, and the same connection still works
        v, code = c.produce(topic, 0, kwire.record_batch(raw_records()))
        assert code == kwire.NONE
    cons = ConfluentClient().consumer(b.bootstrap)
    try:
        from confluent_kafka import TopicPartition

        assert cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 2)
    finally:
        cons.close()
    check_healthy(b)


def test_produce_flipped_payload_byte(own_broker):
    """A byte changed inside a record (CRC left as computed): CORRUPT_MESSAGE."""
    b = own_broker
    topic = create_topic(b, unique("crc2"))
    batch = bytearray(kwire.record_batch(raw_records()))
    batch[-3] ^= 0x55
    with conn(b) as c:
        v, code = c.produce(topic, 0, bytes(batch))
    assert code == kwire.CORRUPT_MESSAGE, f"Produce v{v}: error {code}"
    check_healthy(b)


INVALID_NAMES = ["bad/name", "a" * 250, ".", "..", "has space", "", "ünï", "star*"]


def test_create_topics_invalid_names(own_broker):
    b = own_broker
    with conn(b) as c:
        v, res = c.create_topics([(n, 1, 1) for n in INVALID_NAMES])
    assert set(res) == set(INVALID_NAMES), res
    bad = {n: code for n, code in res.items() if code != kwire.INVALID_TOPIC_EXCEPTION}
    assert not bad, f"CreateTopics v{v}: want 17 INVALID_TOPIC_EXCEPTION, got {bad}"
    md = admin_for(b).list_topics(timeout=10)
    assert not set(INVALID_NAMES) & set(md.topics)
    check_healthy(b)


def test_create_topics_invalid_partitions_and_replication(own_broker):
    b = own_broker
    zero, neg, rf0 = unique("p0"), unique("pneg"), unique("rf0")
    with conn(b) as c:
        v, res = c.create_topics([(zero, 0, 1), (neg, -5, 1), (rf0, 1, 0)])
    assert res[zero] == kwire.INVALID_PARTITIONS, f"CreateTopics v{v} 0 partitions: {res[zero]}"
    assert res[neg] == kwire.INVALID_PARTITIONS, f"CreateTopics v{v} -5 partitions: {res[neg]}"
    assert res[rf0] == kwire.INVALID_REPLICATION_FACTOR, f"CreateTopics v{v} replication factor 0: {res[rf0]}"
    md = admin_for(b).list_topics(timeout=10)
    assert not {zero, neg, rf0} & set(md.topics)
    check_healthy(b)


def test_create_topics_valid_through_raw_request(own_broker):
    """-1 partitions / -1 replication factor mean the broker defaults (CreateTopics v4+)."""
    b = own_broker
    name = unique("rawct")
    with conn(b) as c:
        v, res = c.create_topics([(name, -1, -1)])
        if v < 4:
            pytest.skip(f"broker's CreateTopics max version {v} < 4")
        assert res == {name: kwire.NONE}
        v, res = c.create_topics([(name, 1, 1)])
        assert res == {name: kwire.TOPIC_ALREADY_EXISTS}
