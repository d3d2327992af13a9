"""Reading a partition's segment files from a broker's data directory
(Kafka's and Moldau's layouts alike: `<log dir>/<topic>-<p>/<base>.log` of
v2 record batches): what the broker really stored, whatever clients see."""

from __future__ import annotations

import struct

CODEC_IDS = {"uncompressed": 0, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def segment_codecs(b, topic: str) -> list[int]:
    """The codec (attribute bits 0-2) of every batch in partition 0's
    segment files of broker `b`, in file order."""
    dirs = [d for d in b.data_dir.rglob(f"{topic}-0") if d.is_dir()]
    assert len(dirs) == 1, dirs
    codecs = []
    for seg in sorted(dirs[0].glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            _base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0:
                break  # preallocated tail
            assert data[pos + 16] == 2, f"magic {data[pos + 16]} at {pos} of {seg}"
            (attributes,) = struct.unpack_from(">h", data, pos + 21)
            codecs.append(attributes & 7)
            pos += 12 + length
    return codecs
