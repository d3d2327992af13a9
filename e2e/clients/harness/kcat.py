"""kcat (Debian package `kcat`) driven as a shell user would.

kcat sets one header list per invocation (-H name=value) and timestamps at
produce time (CreateTime = now); keys come from the -K delimiter.
Consumption prints with -f and length fields (%K, %S) so that values are
parsed exactly, whatever bytes they contain.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

FORMAT = r"%o|%T|%K|%S|%k|%s|%h\n"  # offset|ts|keylen|valuelen|key|value|headers


class KcatError(AssertionError):
    pass


def kcat_bin() -> str:
    b = shutil.which("kcat") or shutil.which("kafkacat")
    if not b:
        raise KcatError("kcat not installed: run scripts/install-test-deps.sh (apt-get install kcat)")
    return b


def run(args: list[str], stdin: bytes = b"", timeout: float = 60) -> bytes:
    p = subprocess.run([kcat_bin(), *args], input=stdin, capture_output=True, timeout=timeout)
    if p.returncode != 0:
        raise KcatError(f"kcat {' '.join(args)} exited {p.returncode}: {p.stderr.decode(errors='replace')[-2000:]}")
    return p.stdout


def produce_lines(bootstrap: str, topic: str, partition: int, lines: list[str], headers: list[str] = (), extra: list[str] = ()) -> None:
    """Each line is KEY:VALUE; every record gets `headers` (name=value)."""
    args = ["-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", ":", "-X", "acks=all", "-X", "enable.idempotence=false"]
    for h in headers:
        args += ["-H", h]
    args += list(extra)
    run(args, ("\n".join(lines) + "\n").encode())


def consume(bootstrap: str, topic: str, partition: int, count: int, offset: str = "beginning", extra: list[str] = ()) -> list[dict]:
    out = run(["-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", offset, "-c", str(count), "-e", "-f", FORMAT, *extra])
    return parse(out)


_HEAD = re.compile(rb"(-?\d+)\|(-?\d+)\|(-?\d+)\|(-?\d+)\|")


def parse(out: bytes) -> list[dict]:
    recs = []
    pos = 0
    while pos < len(out):
        m = _HEAD.match(out, pos)
        if not m:
            raise KcatError(f"cannot parse kcat output at {pos}: {out[pos:pos + 80]!r}")
        off, ts, klen, vlen = (int(x) for x in m.groups())
        pos = m.end()
        key = None if klen < 0 else out[pos : pos + klen]
        pos += max(klen, 0)
        assert out[pos : pos + 1] == b"|", out[pos : pos + 20]
        pos += 1
        value = None if vlen < 0 else out[pos : pos + vlen]
        pos += max(vlen, 0)
        assert out[pos : pos + 1] == b"|", out[pos : pos + 20]
        pos += 1
        end = out.index(b"\n", pos)
        headers = out[pos:end].decode()
        pos = end + 1
        recs.append({"offset": off, "timestamp": ts, "key": key, "value": value, "headers": headers})
    return recs


def metadata(bootstrap: str, topic: str | None = None) -> dict:
    args = ["-L", "-J", "-b", bootstrap]
    if topic:
        args += ["-t", topic]
    return json.loads(run(args))
