#!/usr/bin/env python3
"""Rebuilds the committed fuzz seed corpus, fuzz/corpus/<target>/, from real
clients (Python stdlib only; the clients themselves run from the repo's
.venv, made by scripts/install-test-deps.sh, and kcat).

1. starts the release moldau-broker on 127.0.0.1 (free ports, temp data dir),
   advertising the address of fuzz/seed/capture.py, a recording proxy;
2. runs fuzz/seed/traffic.py (confluent-kafka, kafka-python, aiokafka) and
   kcat through the proxy: produce with every codec, consume, groups, admin;
3. stops the broker cleanly (SIGTERM) and turns what it saw and wrote into
   seeds:
   - request_frame: the captured request frames (no size prefix);
   - record_batch: stored batches of each client and codec, base offset 0,
     as produce payloads (one batch, and two in a row);
   - log_recovery: the broker's own segment files (flags byte, indexes, log;
     see fuzz/fuzz_targets/log_recovery.rs), unclean, clean and torn;
   - group_codecs: JoinGroup protocol metadata (mode 0), offset-commit
     records of __consumer_offsets (mode 1) and its segments (mode 2).

    fuzz/seed/make_corpus.py [--broker PATH] [--python PATH]

Then `cargo +nightly fuzz cmin <target>` may shrink a corpus further.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
FUZZ = HERE.parent
REPO = FUZZ.parent
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(http_port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("broker exited during start")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("broker not ready")


def run_kcat(boot: str) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if not kcat:
        print("make_corpus: kcat not found, skipping its traffic", flush=True)
        return
    base = [kcat, "-b", boot, "-q"]

    def run(args: list[str], stdin: bytes | None = None) -> None:
        r = subprocess.run(base + args, input=stdin, capture_output=True, timeout=60)
        if r.returncode != 0:
            print(f"make_corpus: kcat {' '.join(args)}: {r.stderr.decode(errors='replace')[:200]}", flush=True)

    run(["-L"])
    for c in CODECS:
        lines = b"".join(b"kcat-k%d:kcat-%s-value-%d\n" % (i % 5, c.encode(), i) for i in range(50))
        run(["-P", "-t", f"seed-kcat-{c}", "-K:", "-z", c, "-X", "linger.ms=20"], lines)
    run(["-C", "-t", "seed-kcat-lz4", "-o", "beginning", "-e", "-c", "50"])
    run(["-C", "-t", "seed-kcat-zstd", "-o", "s@0", "-e", "-c", "10"])
    run(["-Q", "-t", f"seed-kcat-none:0:{int(time.time() * 1000) - 60_000}"])
    run(["-G", "seed-g-kcat", "-o", "beginning", "-e", "-c", "20", "seed-kcat-gzip"])


# --- parsing helpers (Kafka wire and record formats) --------------------------------
def uvarint(b: bytes, p: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        x = b[p]
        p += 1
        v |= (x & 0x7F) << shift
        if not x & 0x80:
            return v, p
        shift += 7


def varint(b: bytes, p: int) -> tuple[int, int]:
    v, p = uvarint(b, p)
    return (v >> 1) ^ -(v & 1), p


def join_group_metadata(frame: bytes) -> list[bytes]:
    """Protocol metadata of every protocol of a JoinGroup request frame."""
    api, ver = struct.unpack(">hh", frame[:4])
    assert api == 11
    flexible = ver >= 6
    p = 8
    (n,) = struct.unpack(">h", frame[p : p + 2])  # client id, nullable string
    p += 2 + max(n, 0)

    def tagged(p: int) -> int:
        count, p = uvarint(frame, p)
        for _ in range(count):
            _, p = uvarint(frame, p)
            size, p = uvarint(frame, p)
            p += size
        return p

    def string(p: int) -> int:
        if flexible:
            n, p = uvarint(frame, p)
            return p + max(n - 1, 0)
        (n,) = struct.unpack(">h", frame[p : p + 2])
        return p + 2 + max(n, 0)

    if flexible:
        p = tagged(p)
    p = string(p)  # group id
    p += 4  # session timeout
    if ver >= 1:
        p += 4  # rebalance timeout
    p = string(p)  # member id
    if ver >= 5:
        p = string(p)  # group instance id
    p = string(p)  # protocol type
    if flexible:
        count, p = uvarint(frame, p)
        count -= 1
    else:
        (count,) = struct.unpack(">i", frame[p : p + 4])
        p += 4
    out = []
    for _ in range(max(count, 0)):
        p = string(p)  # protocol name
        if flexible:
            n, p = uvarint(frame, p)
            n -= 1
        else:
            (n,) = struct.unpack(">i", frame[p : p + 4])
            p += 4
        out.append(frame[p : p + n])
        p += n
        if flexible:
            p = tagged(p)
    return out


def batches(log: bytes):
    """(position, bytes) of each whole batch of a segment."""
    p = 0
    while p + 12 <= len(log):
        (length,) = struct.unpack(">i", log[p + 8 : p + 12])
        if length < 49 or p + 12 + length > len(log):
            return
        yield p, log[p : p + 12 + length]
        p += 12 + length


def uncompressed_records(batch: bytes):
    """(key, value) of each record of an uncompressed v2 batch."""
    (attributes,) = struct.unpack(">h", batch[21:23])
    if attributes & 7:
        return
    (count,) = struct.unpack(">i", batch[57:61])
    p = 61
    for _ in range(count):
        length, p = varint(batch, p)
        end = p + length
        q = p + 1
        _, q = varint(batch, q)  # timestamp delta
        _, q = varint(batch, q)  # offset delta
        klen, q = varint(batch, q)
        key = batch[q : q + klen] if klen >= 0 else None
        q += max(klen, 0)
        vlen, q = varint(batch, q)
        value = batch[q : q + vlen] if vlen >= 0 else None
        yield key, value
        p = end


def rebased(batch: bytes) -> bytes:
    """A stored batch as a client sent it: base offset 0, no leader epoch."""
    return struct.pack(">q", 0) + batch[8:12] + struct.pack(">i", -1) + batch[16:]


# --- harvest -------------------------------------------------------------------------
class Corpus:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.count: dict[str, int] = {}

    def add(self, target: str, name: str, data: bytes) -> None:
        d = self.root / target
        d.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha1(data).hexdigest()[:12]
        (d / f"{name}-{digest}.bin").write_bytes(data)
        self.count[target] = self.count.get(target, 0) + 1


def harvest(frames: Path, data_dir: Path, corpus: Corpus) -> None:
    for f in sorted(frames.iterdir()):
        frame = f.read_bytes()
        corpus.add("request_frame", f.stem.rsplit("-", 1)[0], frame)
        if frame[:2] == b"\x00\x0b":
            try:
                for meta in join_group_metadata(frame):
                    corpus.add("group_codecs", "subscription", b"\x00" + meta)
            except (IndexError, struct.error) as e:
                print(f"make_corpus: cannot parse {f.name}: {e}", flush=True)

    for part in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        logs = sorted(part.glob("*.log"))
        if not logs:
            continue
        seg = logs[0]
        log = seg.read_bytes()
        if not log:
            continue
        found = list(batches(log))
        topic = part.name
        if topic.startswith("__consumer_offsets"):
            for _, b in found[:4]:
                for key, value in uncompressed_records(b):
                    if key is not None:
                        value = value or b""
                        corpus.add("group_codecs", "offset-record", b"\x01" + struct.pack(">H", len(key)) + key + value)
            corpus.add("group_codecs", "offsets-log", b"\x02" + log[: 16 * 1024])
            continue
        if not topic.startswith("seed-"):
            continue
        # record_batch: first, middle and last batch, and the first two in a row.
        picks = {0, len(found) // 2, len(found) - 1}
        for i in sorted(picks):
            corpus.add("record_batch", f"{topic}-b{i}", rebased(found[i][1]))
        if len(found) >= 2:
            corpus.add("record_batch", f"{topic}-pair", rebased(found[0][1]) + rebased(found[1][1]))
        # log_recovery: the segment as the broker left it (small ones only).
        if len(log) > 60 * 1024:
            continue
        index = seg.with_suffix(".index").read_bytes() if seg.with_suffix(".index").exists() else b""
        tindex = seg.with_suffix(".timeindex").read_bytes() if seg.with_suffix(".timeindex").exists() else b""
        corpus.add("log_recovery", f"{topic}-unclean", b"\x40" + log)
        if len(index) < 65536 and len(tindex) < 65536:
            clean = bytes([0x47]) + struct.pack(">H", len(index)) + index + struct.pack(">H", len(tindex)) + tindex + log
            corpus.add("log_recovery", f"{topic}-clean", clean)
        if len(found) >= 2:
            corpus.add("log_recovery", f"{topic}-torn", b"\x00" + log[: found[-1][0] + 20])
            split = found[len(found) // 2][0]
            (base,) = struct.unpack(">q", log[split : split + 8])
            corpus.add("log_recovery", f"{topic}-two", b"\x20" + struct.pack(">QI", base, split) + log)
        if topic == "seed-compacted":
            corpus.add("log_recovery", f"{topic}-compacted", b"\x50" + log)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    ap.add_argument("--broker", default=os.environ.get("MOLDAU_BROKER_BIN", str(target_dir / "release" / "moldau-broker")))
    ap.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"), help="python with the client libraries")
    ap.add_argument("--out", default=str(FUZZ / "corpus"))
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="moldau-seed-"))
    data_dir, frames = work / "data", work / "frames"
    proxy_port, broker_port, http_port = free_port(), free_port(), free_port()
    proxy = f"127.0.0.1:{proxy_port}"
    broker = subprocess.Popen(
        [
            a.broker,
            "--listen", f"127.0.0.1:{broker_port}",
            "--advertised-listener", proxy,
            "--http-listen", f"127.0.0.1:{http_port}",
            "--data-dir", str(data_dir),
            "--log", "warn",
        ]
    )  # fmt: skip
    capture = None
    try:
        wait_ready(http_port, broker)
        capture = subprocess.Popen(
            [sys.executable, str(HERE / "capture.py"), "--listen", proxy, "--upstream", f"127.0.0.1:{broker_port}", "--out", str(frames)]
        )
        time.sleep(0.5)
        subprocess.run([a.python, str(HERE / "traffic.py"), proxy], timeout=600, check=False)
        run_kcat(proxy)
    finally:
        if capture is not None:
            capture.send_signal(signal.SIGTERM)
            capture.wait(30)
        broker.send_signal(signal.SIGTERM)
        broker.wait(60)

    out = Path(a.out)
    for t in ("request_frame", "record_batch", "log_recovery", "group_codecs"):
        shutil.rmtree(out / t, ignore_errors=True)
    corpus = Corpus(out)
    harvest(frames, data_dir, corpus)
    shutil.rmtree(work, ignore_errors=True)
    for t, n in sorted(corpus.count.items()):
        print(f"make_corpus: {t}: {n} seeds", flush=True)


if __name__ == "__main__":
    main()
