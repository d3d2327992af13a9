"""Test records and their comparison: what "byte-identical" means in this suite.

A Record is key, value, headers (ordered, duplicates allowed) and a CreateTime
timestamp in ms. Generated records are deterministic for a seed and cover null
keys and values, empty values, binary bytes, multi-byte header names,
duplicate header names, empty and (optionally) null header values, and one
large value.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int

    def short(self) -> str:
        def b(x):
            if x is None:
                return "None"
            return repr(x[:24]) + (f"...({len(x)}B)" if len(x) > 24 else "")

        return f"Record(key={b(self.key)}, value={b(self.value)}, headers={len(self.headers)}, ts={self.timestamp})"


@dataclass(frozen=True)
class Consumed:
    offset: int
    record: Record
    timestamp_type: str = "CreateTime"  # "CreateTime" | "LogAppendTime" | "?"


HEADER_NAMES = ["trace-id", "content-type", "héader-ü", "x", "dup"]


def gen_records(
    n: int,
    seed: int,
    *,
    null_header_values: bool = True,
    large_value: bool = True,
    ts_base: int | None = None,
) -> list[Record]:
    rnd = random.Random(seed)
    if ts_base is None:
        # one day in the past: inside every broker's accepted window
        # (Kafka 4 rejects CreateTime more than 1 h in the future by default).
        ts_base = int(time.time() * 1000) - 24 * 3600 * 1000
    ts = ts_base
    out = []
    for i in range(n):
        ts += rnd.randint(1, 5000)
        if i % 7 == 3:
            key = None
        elif i % 5 == 1:
            key = b""
        else:
            key = f"key-{seed}-{i}".encode() + bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 8)))
        if i % 11 == 5 and key is not None:
            # (kafka-python and aiokafka refuse a record with neither key nor value)
            value = None
        elif i % 13 == 2:
            value = b""
        elif large_value and i == n // 2 and n >= 4:
            value = bytes(rnd.getrandbits(8) for _ in range(100 * 1024))
        else:
            value = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 600)))
        headers: list[tuple[str, bytes | None]] = []
        for j in range(i % 4):
            name = HEADER_NAMES[(i + j) % len(HEADER_NAMES)]
            if j == 2:
                name = "dup"
                headers.append(("dup", b"first"))
            hv: bytes | None = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 40)))
            if null_header_values and i % 9 == 4 and j == 0:
                hv = None
            headers.append((name, hv))
        out.append(Record(key, value, tuple(headers), ts))
    return out


def assert_same(produced: list[Record], consumed: list[Consumed], first_offset: int = 0) -> None:
    """Consumed records are byte-identical to produced ones, at contiguous offsets from first_offset."""
    offsets = [c.offset for c in consumed]
    expect = list(range(first_offset, first_offset + len(produced)))
    assert offsets == expect, f"offsets not contiguous from {first_offset}: got {offsets[:10]}... expected {expect[:10]}..."
    assert len(consumed) == len(produced), f"{len(consumed)} consumed, {len(produced)} produced"
    for i, (p, c) in enumerate(zip(produced, consumed)):
        got = c.record
        assert got.key == p.key, f"record {i}: key differs: {got.short()} vs {p.short()}"
        assert got.value == p.value, f"record {i}: value differs: {got.short()} vs {p.short()}"
        assert got.headers == p.headers, f"record {i}: headers differ: {got.headers!r} vs {p.headers!r}"
        assert got.timestamp == p.timestamp, f"record {i}: timestamp {got.timestamp} vs {p.timestamp}"
        assert c.timestamp_type in ("CreateTime", "?"), f"record {i}: timestamp type {c.timestamp_type}"
