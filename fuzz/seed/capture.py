#!/usr/bin/env python3
"""Recording TCP proxy for the fuzz seed corpus (Python stdlib only).

Listens on a 127.0.0.0/8 address, forwards every connection to a running
moldau-broker (also on 127.0.0.0/8), and writes each request frame a client
sends, without its 4-byte size prefix (the input of the `request_frame` fuzz
target), to OUT/<api key>-v<version>-<sha1 prefix>.bin. Identical frames are
written once; at most --max-per-kind distinct frames per (api key, version)
and none larger than --max-bytes. Responses are forwarded untouched.

Start the broker with --advertised-listener set to this proxy's address, so
that clients come back through the proxy after their first Metadata request.

    capture.py --listen 127.0.0.1:19092 --upstream 127.0.0.1:19093 --out DIR

Stops on SIGTERM/SIGINT. fuzz/seed/make_corpus.py runs it with real clients.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import socket
import struct
import sys
import threading


def loopback(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host.startswith("127."):
        raise SystemExit(f"{addr}: only 127.0.0.0/8 addresses are allowed")
    return host, int(port)


class Recorder:
    def __init__(self, out: str, max_per_kind: int, max_bytes: int) -> None:
        self.out = out
        self.max_per_kind = max_per_kind
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self.seen: set[str] = set()
        self.per_kind: dict[tuple[int, int], int] = {}
        self.frames = 0
        os.makedirs(out, exist_ok=True)

    def record(self, frame: bytes) -> None:
        if len(frame) < 4 or len(frame) > self.max_bytes:
            return
        api, version = struct.unpack(">hh", frame[:4])
        digest = hashlib.sha1(frame).hexdigest()
        with self.lock:
            self.frames += 1
            kind = (api, version)
            if digest in self.seen or self.per_kind.get(kind, 0) >= self.max_per_kind:
                return
            self.seen.add(digest)
            self.per_kind[kind] = self.per_kind.get(kind, 0) + 1
        name = f"{api:02d}-v{version:02d}-{digest[:12]}.bin"
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(frame)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def client_to_broker(client: socket.socket, broker: socket.socket, rec: Recorder) -> None:
    try:
        while True:
            head = recv_exact(client, 4)
            if head is None:
                break
            (size,) = struct.unpack(">i", head)
            if size < 0:
                broker.sendall(head)
                break
            frame = recv_exact(client, size)
            if frame is None:
                broker.sendall(head)
                break
            rec.record(frame)
            broker.sendall(head + frame)
    except OSError:
        pass
    finally:
        for s in (client, broker):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def broker_to_client(broker: socket.socket, client: socket.socket) -> None:
    try:
        while True:
            data = broker.recv(65536)
            if not data:
                break
            client.sendall(data)
    except OSError:
        pass
    finally:
        for s in (client, broker):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listen: tuple[str, int], upstream: tuple[str, int], rec: Recorder) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(listen)
    server.listen(128)

    def stop(*_: object) -> None:
        print(f"capture: {rec.frames} frames seen, {len(rec.seen)} written", file=sys.stderr)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"capture: {listen[0]}:{listen[1]} -> {upstream[0]}:{upstream[1]}", file=sys.stderr, flush=True)
    while True:
        client, _ = server.accept()
        try:
            broker = socket.create_connection(upstream, timeout=10)
            broker.settimeout(None)
        except OSError:
            client.close()
            continue
        threading.Thread(target=client_to_broker, args=(client, broker, rec), daemon=True).start()
        threading.Thread(target=broker_to_client, args=(broker, client), daemon=True).start()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True, help="127.x.y.z:port to accept clients on")
    p.add_argument("--upstream", required=True, help="127.x.y.z:port of the broker")
    p.add_argument("--out", required=True, help="directory for the captured frames")
    p.add_argument("--max-per-kind", type=int, default=6, help="distinct frames kept per (api, version)")
    p.add_argument("--max-bytes", type=int, default=64 * 1024, help="larger frames are not kept")
    a = p.parse_args()
    serve(loopback(a.listen), loopback(a.upstream), Recorder(a.out, a.max_per_kind, a.max_bytes))


if __name__ == "__main__":
    main()
