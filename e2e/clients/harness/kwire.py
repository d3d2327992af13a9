"""A deliberately small, hand-written Kafka wire-protocol client for tests.

Owns: framing (int32 size prefix), request headers v1/v2, the handful of
requests the malformed-input tests send (ApiVersions, Produce, CreateTopics,
Metadata-free), record batch v2 encoding with CRC-32C, and just enough response
decoding to read error codes. It is written from the protocol specification
(kafka.apache.org/protocol) so that a test can send bytes no real client would.
It must not depend on any client library.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

# API keys
PRODUCE = 0
METADATA = 3
API_VERSIONS = 18
CREATE_TOPICS = 19

# error codes
NONE = 0
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35


class ProtocolError(Exception):
    pass


# ---------------------------------------------------------------------------
# CRC-32C (Castagnoli), table driven
_CRC32C_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    tbl = _CRC32C_TABLE
    for b in data:
        crc = tbl[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------------------
# primitive encoders
def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(v: int) -> bytes:  # zigzag, 64-bit
    return uvarint((v << 1) ^ (v >> 63))


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def compact_bytes(b: bytes | None) -> bytes:
    if b is None:
        return uvarint(0)
    return uvarint(len(b) + 1) + b


def nbytes(b: bytes | None) -> bytes:
    if b is None:
        return i32(-1)
    return i32(len(b)) + b


TAGS_NONE = uvarint(0)


# ---------------------------------------------------------------------------
# decoder
class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"short response: need {n} bytes at {self.pos}, have {len(self.data) - self.pos}")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def i8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        shift = 0
        v = 0
        while True:
            b = self._take(1)[0]
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
            shift += 7
            if shift > 63:
                raise ProtocolError("varint too long")

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode()

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode()

    def uuid(self) -> bytes:
        return self._take(16)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())

    def remaining(self) -> int:
        return len(self.data) - self.pos


# ---------------------------------------------------------------------------
# record batch v2
@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_delta: int = 0


def record_batch(records: list[Rec], base_timestamp: int | None = None, corrupt_crc: bool = False) -> bytes:
    """An uncompressed, non-transactional, non-idempotent v2 batch at base offset 0."""
    if base_timestamp is None:
        base_timestamp = int(time.time() * 1000)
    body = bytearray()
    for i, r in enumerate(records):
        rec = bytearray()
        rec += i8(0)  # attributes
        rec += varint(r.timestamp_delta)
        rec += varint(i)  # offset delta
        rec += varint(-1) if r.key is None else varint(len(r.key)) + r.key
        rec += varint(-1) if r.value is None else varint(len(r.value)) + r.value
        rec += varint(len(r.headers))
        for hk, hv in r.headers:
            hkb = hk.encode()
            rec += varint(len(hkb)) + hkb
            rec += varint(-1) if hv is None else varint(len(hv)) + hv
        body += varint(len(rec)) + rec
    max_ts = base_timestamp + max((r.timestamp_delta for r in records), default=0)
    after_crc = (
        i16(0)  # attributes: no compression, CreateTime
        + i32(len(records) - 1)  # last offset delta
        + i64(base_timestamp)
        + i64(max_ts)
        + i64(-1)  # producer id
        + i16(-1)  # producer epoch
        + i32(-1)  # base sequence
        + i32(len(records))
        + bytes(body)
    )
    crc = crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    after_length = i32(0) + i8(2) + struct.pack(">I", crc) + after_crc  # leader epoch, magic, crc
    return i64(0) + i32(len(after_length)) + after_length


# ---------------------------------------------------------------------------
# connection
@dataclass
class ApiVersionsResult:
    error_code: int
    versions: dict[int, tuple[int, int]]
    raw_version: int


class Conn:
    def __init__(self, host: str, port: int, timeout: float = 10.0, client_id: str = "moldau-e2e-kwire"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation = 0
        self.versions: dict[int, tuple[int, int]] | None = None

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- raw framing -----------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed by broker after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        if size < 0 or size > 256 * 1024 * 1024:
            raise ProtocolError(f"bad response size {size}")
        return self.recv_exact(size)

    def closed_by_peer(self, wait: float = 10.0) -> bool:
        """True if the broker closes (EOF or reset) within `wait` seconds without sending anything.

        Raises ProtocolError if the broker sends bytes instead.
        """
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        if data == b"":
            return True
        raise ProtocolError(f"expected the connection to be closed, got {len(data)} bytes: {data[:64]!r}")

    # -- requests --------------------------------------------------------
    def request(self, api_key: int, version: int, body: bytes, flexible: bool) -> tuple[int, bytes]:
        """Send one request; return (correlation id, response bytes after the correlation id)."""
        self.correlation += 1
        header = i16(api_key) + i16(version) + i32(self.correlation) + string(self.client_id)
        if flexible:
            header += TAGS_NONE
        frame = header + body
        self.send_raw(i32(len(frame)) + frame)
        resp = self.recv_frame()
        r = Reader(resp)
        corr = r.i32()
        if corr != self.correlation:
            raise ProtocolError(f"correlation id {corr}, expected {self.correlation}")
        return corr, resp[4:]

    def api_versions(self, version: int = 0) -> ApiVersionsResult:
        flexible = version >= 3
        body = b""
        if flexible:
            body = compact_string("moldau-e2e") + compact_string("0.1") + TAGS_NONE
        _, resp = self.request(API_VERSIONS, version, body, flexible)
        res = parse_api_versions(resp, version)
        if res.error_code == 0:
            self.versions = res.versions
        return res

    def pick_version(self, api_key: int, lo: int, hi: int) -> int:
        if self.versions is None:
            self.api_versions()
        assert self.versions is not None
        if api_key not in self.versions:
            raise ProtocolError(f"broker does not advertise api {api_key}")
        bmin, bmax = self.versions[api_key]
        v = min(hi, bmax)
        if v < max(lo, bmin):
            raise ProtocolError(f"no common version for api {api_key}: broker {bmin}-{bmax}, test {lo}-{hi}")
        return v

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 10000) -> tuple[int, int]:
        """Produce one batch; return (version used, partition error code)."""
        v = self.pick_version(PRODUCE, 3, 12)
        flexible = v >= 9
        if flexible:
            body = (
                compact_string(None)  # transactional id
                + i16(acks)
                + i32(timeout_ms)
                + uvarint(1 + 1)
                + compact_string(topic)
                + uvarint(1 + 1)
                + i32(partition)
                + compact_bytes(batch)
                + TAGS_NONE
                + TAGS_NONE
                + TAGS_NONE
            )
        else:
            body = (
                string(None)
                + i16(acks)
                + i32(timeout_ms)
                + i32(1)
                + string(topic)
                + i32(1)
                + i32(partition)
                + nbytes(batch)
            )
        _, resp = self.request(PRODUCE, v, body, flexible)
        r = Reader(resp)
        if flexible:
            r.skip_tags()  # response header v1
            n_topics = r.uvarint() - 1
            assert n_topics == 1, n_topics
            r.compact_string()
            n_parts = r.uvarint() - 1
        else:
            n_topics = r.i32()
            assert n_topics == 1, n_topics
            r.string()
            n_parts = r.i32()
        assert n_parts == 1, n_parts
        r.i32()  # index
        return v, r.i16()

    def create_topics(
        self,
        topics: list[tuple[str, int, int]],
        timeout_ms: int = 10000,
        validate_only: bool = False,
    ) -> tuple[int, dict[str, int]]:
        """CreateTopics for (name, partitions, replication factor); return (version, {name: error code})."""
        v = self.pick_version(CREATE_TOPICS, 2, 7)
        flexible = v >= 5
        if flexible:
            body = uvarint(len(topics) + 1)
            for name, parts, rf in topics:
                body += compact_string(name) + i32(parts) + i16(rf) + uvarint(1) + uvarint(1) + TAGS_NONE
            body += i32(timeout_ms) + i8(1 if validate_only else 0) + TAGS_NONE
        else:
            body = i32(len(topics))
            for name, parts, rf in topics:
                body += string(name) + i32(parts) + i16(rf) + i32(0) + i32(0)
            body += i32(timeout_ms) + i8(1 if validate_only else 0)
        _, resp = self.request(CREATE_TOPICS, v, body, flexible)
        r = Reader(resp)
        out: dict[str, int] = {}
        if flexible:
            r.skip_tags()
            r.i32()  # throttle
            n = r.uvarint() - 1
            for _ in range(n):
                name = r.compact_string()
                if v >= 7:
                    r.uuid()
                code = r.i16()
                r.compact_string()  # error message
                r.i32()  # num partitions
                r.i16()  # replication factor
                nconf = r.uvarint()
                for _ in range(max(nconf - 1, 0)):
                    r.compact_string()
                    r.compact_string()
                    r.i8()
                    r.i8()
                    r.i8()
                    r.skip_tags()
                r.skip_tags()
                out[name or ""] = code
        else:
            r.i32()  # throttle
            n = r.i32()
            for _ in range(n):
                name = r.string()
                code = r.i16()
                r.string()  # error message (v1+)
                out[name or ""] = code
        return v, out


def parse_api_versions(resp: bytes, version: int) -> ApiVersionsResult:
    """Body of an ApiVersions response (after the correlation id; its header never has tags).

    When the error code is UNSUPPORTED_VERSION the broker answers in the v0 layout
    whatever version was asked (KIP-511), so that layout is tried first then.
    """
    r = Reader(resp)
    code = r.i16()
    flexible = version >= 3 and code != UNSUPPORTED_VERSION
    versions: dict[int, tuple[int, int]] = {}
    n = (r.uvarint() - 1) if flexible else r.i32()
    if n < 0 or n > 1000:
        raise ProtocolError(f"bad ApiVersions array length {n}")
    for _ in range(n):
        k, lo, hi = r.i16(), r.i16(), r.i16()
        if flexible:
            r.skip_tags()
        versions[k] = (lo, hi)
    return ApiVersionsResult(code, versions, version)
