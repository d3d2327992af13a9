"""Raw consumer-group requests for the group bad-input tests, on top of kwire.

Owns the encoding of FindCoordinator v2, JoinGroup v5, SyncGroup v3,
Heartbeat v3, LeaveGroup v3, OffsetCommit v7, OffsetDelete v0 and DescribeGroups v4
(non-flexible versions that both Moldau and Apache Kafka 4.x accept), and of
ConsumerGroupHeartbeat v1 (KIP-848, flexible), written
from the protocol specification (kafka.apache.org/protocol), and just enough
response decoding to read error codes, generations and member ids. It must not
depend on any client library; it never retries or interprets errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kwire import TAGS_NONE, Conn, Reader, compact_bytes, compact_string, i8, i16, i32, i64, string, uvarint

FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
OFFSET_COMMIT = 8
OFFSET_DELETE = 47
CONSUMER_GROUP_HEARTBEAT = 68

# error codes
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79

ERROR_NAMES = {
    0: "NONE",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    22: "ILLEGAL_GENERATION",
    23: "INCONSISTENT_GROUP_PROTOCOL",
    24: "INVALID_GROUP_ID",
    25: "UNKNOWN_MEMBER_ID",
    26: "INVALID_SESSION_TIMEOUT",
    27: "REBALANCE_IN_PROGRESS",
    69: "GROUP_ID_NOT_FOUND",
    79: "MEMBER_ID_REQUIRED",
    82: "FENCED_INSTANCE_ID",
    12: "OFFSET_METADATA_TOO_LARGE",
    68: "NON_EMPTY_GROUP",
    86: "GROUP_SUBSCRIBED_TO_TOPIC",
}


def name(code: int) -> str:
    return f"{ERROR_NAMES.get(code, '?')}({code})"


def nbytes(b: bytes | None) -> bytes:
    return i32(-1) if b is None else i32(len(b)) + b


def consumer_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data."""
    out = i16(0) + i32(len(topics))
    for t in topics:
        out += string(t)
    return out + nbytes(None)


def consumer_assignment(assign: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user data."""
    out = i16(0) + i32(len(assign))
    for t, ps in assign.items():
        out += string(t) + i32(len(ps)) + b"".join(i32(p) for p in ps)
    return out + nbytes(None)


def _bytes(r: Reader) -> bytes | None:
    n = r.i32()
    return None if n < 0 else r._take(n)


@dataclass
class HeartbeatResult:
    """A ConsumerGroupHeartbeat answer; `assignment` is None when the
    coordinator sent none, else {topic id (16 bytes): [partition]}."""

    error: int
    member_id: str
    epoch: int
    assignment: dict[bytes, list[int]] | None


@dataclass
class JoinResult:
    error: int
    generation: int
    protocol: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]
    skip_assignment: bool | None = None  # v9+ only


class GroupConn(Conn):
    """A kwire connection that also speaks the classic group protocol."""

    def _req(self, api: int, version: int, body: bytes) -> Reader:
        _, resp = self.request(api, version, body, flexible=False)
        return Reader(resp)

    def find_coordinator(self, group: str) -> tuple[int, int, str, int]:
        r = self._req(FIND_COORDINATOR, 2, string(group) + i8(0))
        r.i32()  # throttle
        err = r.i16()
        r.string()  # message
        node, host, port = r.i32(), r.string(), r.i32()
        return err, node, host or "", port

    def join_group(
        self,
        group: str,
        member_id: str = "",
        protocol_type: str = "consumer",
        protocols: list[tuple[str, bytes]] | None = None,
        session_timeout_ms: int = 10000,
        rebalance_timeout_ms: int = 10000,
        instance_id: str | None = None,
    ) -> JoinResult:
        if protocols is None:
            protocols = [("range", consumer_subscription(["t"]))]
        body = (
            string(group)
            + i32(session_timeout_ms)
            + i32(rebalance_timeout_ms)
            + string(member_id)
            + string(instance_id)
            + string(protocol_type)
            + i32(len(protocols))
        )
        for n, meta in protocols:
            body += string(n) + nbytes(meta)
        r = self._req(JOIN_GROUP, 5, body)
        r.i32()  # throttle
        err = r.i16()
        gen = r.i32()
        proto = r.string()
        leader = r.string() or ""
        mid = r.string() or ""
        members = []
        for _ in range(r.i32()):
            m = r.string() or ""
            inst = r.string()
            meta = _bytes(r) or b""
            members.append((m, inst, meta))
        return JoinResult(err, gen, proto, leader, mid, members)

    def join_group_v9(
        self,
        group: str,
        member_id: str = "",
        protocol_type: str = "consumer",
        protocols: list[tuple[str, bytes]] | None = None,
        session_timeout_ms: int = 10000,
        rebalance_timeout_ms: int = 10000,
        instance_id: str | None = None,
        reason: str | None = None,
    ) -> JoinResult:
        """JoinGroup v9 (flexible; the version with skipAssignment, KIP-814)."""
        if protocols is None:
            protocols = [("range", consumer_subscription(["t"]))]
        body = (
            compact_string(group)
            + i32(session_timeout_ms)
            + i32(rebalance_timeout_ms)
            + compact_string(member_id)
            + compact_string(instance_id)
            + compact_string(protocol_type)
            + uvarint(len(protocols) + 1)
        )
        for n, meta in protocols:
            body += compact_string(n) + compact_bytes(meta) + TAGS_NONE
        body += compact_string(reason) + TAGS_NONE
        _, resp = self.request(JOIN_GROUP, 9, body, flexible=True)
        r = Reader(resp)
        r.skip_tags()  # response header v1
        r.i32()
        err = r.i16()
        gen = r.i32()
        r.compact_string()  # protocol type
        proto = r.compact_string()
        leader = r.compact_string() or ""
        skip = r.i8() != 0
        mid = r.compact_string() or ""
        members = []
        for _ in range(r.uvarint() - 1):
            m = r.compact_string() or ""
            inst = r.compact_string()
            n = r.uvarint()
            meta = r._take(n - 1) if n else b""
            r.skip_tags()
            members.append((m, inst, meta))
        r.skip_tags()
        return JoinResult(err, gen, proto, leader, mid, members, skip)

    def join_two_step(self, group: str, **kw) -> JoinResult:
        """JoinGroup v4+: the first join without a member id gets MEMBER_ID_REQUIRED and an id."""
        first = self.join_group(group, member_id="", **kw)
        if first.error != MEMBER_ID_REQUIRED:
            return first
        assert first.member_id, "MEMBER_ID_REQUIRED without a member id"
        return self.join_group(group, member_id=first.member_id, **kw)

    def sync_group(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignments: list[tuple[str, bytes]] = (),
        instance_id: str | None = None,
    ) -> tuple[int, bytes | None]:
        body = string(group) + i32(generation) + string(member_id) + string(instance_id) + i32(len(assignments))
        for m, a in assignments:
            body += string(m) + nbytes(a)
        r = self._req(SYNC_GROUP, 3, body)
        r.i32()
        err = r.i16()
        return err, _bytes(r)

    def heartbeat(self, group: str, generation: int, member_id: str, instance_id: str | None = None) -> int:
        r = self._req(HEARTBEAT, 3, string(group) + i32(generation) + string(member_id) + string(instance_id))
        r.i32()
        return r.i16()

    def leave_group(self, group: str, members: list[tuple[str, str | None]]) -> tuple[int, list[tuple[str, int]]]:
        body = string(group) + i32(len(members))
        for m, inst in members:
            body += string(m) + string(inst)
        r = self._req(LEAVE_GROUP, 3, body)
        r.i32()
        err = r.i16()
        out = []
        for _ in range(r.i32()):
            m = r.string() or ""
            r.string()
            out.append((m, r.i16()))
        return err, out

    def consumer_group_heartbeat(
        self,
        group: str,
        member_id: str,
        epoch: int,
        topics: list[str] | None = None,
        owned: dict[bytes, list[int]] | None = None,
        rebalance_timeout_ms: int = -1,
    ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat v1: `topics` None and `owned` None mean
        "unchanged" (a join sends both)."""
        body = compact_string(group) + compact_string(member_id) + i32(epoch)
        body += compact_string(None) + compact_string(None) + i32(rebalance_timeout_ms)
        if topics is None:
            body += uvarint(0)
        else:
            body += uvarint(len(topics) + 1) + b"".join(compact_string(t) for t in topics)
        body += compact_string(None) + compact_string(None)  # regex, server assignor
        if owned is None:
            body += uvarint(0)
        else:
            body += uvarint(len(owned) + 1)
            for tid, ps in owned.items():
                body += tid + uvarint(len(ps) + 1) + b"".join(i32(p) for p in ps) + TAGS_NONE
        body += TAGS_NONE
        _, resp = self.request(CONSUMER_GROUP_HEARTBEAT, 1, body, flexible=True)
        r = Reader(resp)
        r.skip_tags()  # response header v1
        r.i32()  # throttle
        err = r.i16()
        r.compact_string()  # message
        mid = r.compact_string() or ""
        ep = r.i32()
        r.i32()  # heartbeat interval
        assignment = None
        if r.i8() >= 0:
            assignment = {}
            for _ in range(r.uvarint() - 1):
                tid = r.uuid()
                assignment[tid] = [r.i32() for _ in range(r.uvarint() - 1)]
                r.skip_tags()
            r.skip_tags()
        r.skip_tags()
        return HeartbeatResult(err, mid, ep, assignment)

    def offset_commit(
        self,
        group: str,
        offsets: dict[str, dict[int, int]],
        generation: int = -1,
        member_id: str = "",
        instance_id: str | None = None,
        metadata: str | None = "",
    ) -> dict[tuple[str, int], int]:
        body = string(group) + i32(generation) + string(member_id) + string(instance_id) + i32(len(offsets))
        for t, parts in offsets.items():
            body += string(t) + i32(len(parts))
            for p, off in parts.items():
                body += i32(p) + i64(off) + i32(-1) + string(metadata)
        r = self._req(OFFSET_COMMIT, 7, body)
        r.i32()
        out = {}
        for _ in range(r.i32()):
            t = r.string() or ""
            for _ in range(r.i32()):
                p = r.i32()
                out[(t, p)] = r.i16()
        return out

    def offset_delete(self, group: str, parts: dict[str, list[int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete v0; returns (group error, {(topic, partition): error})."""
        body = string(group) + i32(len(parts))
        for t, ps in parts.items():
            body += string(t) + i32(len(ps)) + b"".join(i32(p) for p in ps)
        r = self._req(OFFSET_DELETE, 0, body)
        err = r.i16()
        r.i32()  # throttle
        out = {}
        for _ in range(r.i32()):
            t = r.string() or ""
            for _ in range(r.i32()):
                p = r.i32()
                out[(t, p)] = r.i16()
        return err, out

    def describe_group(self, group: str) -> dict:
        r = self._req(DESCRIBE_GROUPS, 4, i32(1) + string(group) + i8(0))
        r.i32()
        n = r.i32()
        assert n == 1, n
        err = r.i16()
        gid = r.string()
        state = r.string()
        ptype = r.string()
        proto = r.string()
        members = []
        for _ in range(r.i32()):
            mid = r.string()
            inst = r.string()
            r.string()  # client id
            r.string()  # client host
            _bytes(r)  # metadata
            assignment = _bytes(r)
            members.append({"member_id": mid, "instance_id": inst, "assignment": assignment})
        r.i32()  # authorized operations
        return {"error": err, "group": gid, "state": state, "protocol_type": ptype, "protocol": proto, "members": members}


def decode_assignment(b: bytes | None) -> dict[str, list[int]]:
    if not b:
        return {}
    r = Reader(b)
    r.i16()
    out = {}
    for _ in range(r.i32()):
        t = r.string() or ""
        out[t] = [r.i32() for _ in range(r.i32())]
    return out


__all__ = ["GroupConn", "HeartbeatResult", "JoinResult", "consumer_assignment", "consumer_subscription", "decode_assignment", "name"]
