#!/usr/bin/env python3
"""Runs named integration-test binaries of the workspace as the unit stage
built them, without building anything else.

A second compile of ring, rustls, kube and the workspace in the k8s-e2e
stage came from test binaries that start cargo themselves (the workspace
binaries they need, the images): they passed on the CARGO_MANIFEST_DIR
cargo had set for the test, which ring's build script watches, so ring
was rebuilt with everything above it, and once more by the next cargo
without it. Those builds now drop the variable (moldau_e2e::paths::
cargo_command, scripts/build-images.sh). Running the unit stage's own
binaries by name stays: `cargo test --test …` per package is one more
feature resolution to keep equal, for nothing. Here that command
names the binaries, and each named one
runs as `cargo test` would run it: from its package's directory, with
CARGO_MANIFEST_DIR set, its output headed by cargo's
"Running tests/<name>.rs (<binary>)" line (which scripts/test-all.sh reads
to name unfinished tests). All of them run, like --no-fail-fast; the exit
status is 1 if any failed.

Usage: scripts/run-test-binaries.py NAME... [-- TEST ARGS]
"""
import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    names, extra = argv, []
    if "--" in argv:
        i = argv.index("--")
        names, extra = argv[:i], argv[i + 1:]
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"],
        stdout=subprocess.PIPE, text=True,
    )
    if out.returncode != 0:
        print(f"run-test-binaries: cargo test --no-run exited {out.returncode}", flush=True)
        return out.returncode
    found: dict[str, tuple[str, str, str]] = {}
    for line in out.stdout.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        t = m.get("target") or {}
        if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in t.get("kind", []):
            pkg_dir = os.path.dirname(m["manifest_path"])
            found[t["name"]] = (m["executable"], pkg_dir, os.path.relpath(t["src_path"], pkg_dir))
    missing = [n for n in names if n not in found]
    if missing:
        print(f"run-test-binaries: no test binary named {' '.join(missing)}", flush=True)
        return 1
    failed = []
    for name in names:
        exe, pkg_dir, src = found[name]
        print(f"     Running {src} ({os.path.relpath(exe)})", flush=True)
        env = {**os.environ, "CARGO_MANIFEST_DIR": pkg_dir}
        rc = subprocess.run([exe, *extra], cwd=pkg_dir, env=env).returncode
        if rc != 0:
            failed.append(name)
            # cargo's words, which test-all.sh reads to name a crashed binary
            print(f"error: test failed, to rerun pass `--test {name}`\n\nCaused by:\n"
                  f"  process didn't exit successfully: `{exe}` (exit status: {rc})", flush=True)
    if failed:
        print(f"run-test-binaries: {len(failed)} failed: {' '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
