#!/usr/bin/env bash
# Stops a broker started with `kafka-up.sh --daemon PORT DATADIR`.
# Usage: kafka-down.sh [--kill] DATADIR
#   default: SIGTERM (clean shutdown), waiting up to 60 s, then SIGKILL
#   --kill:  SIGKILL at once (unclean stop)
set -euo pipefail
sig=TERM
if [ "${1:-}" = "--kill" ]; then sig=KILL; shift; fi
[ $# -eq 1 ] || { echo "usage: kafka-down.sh [--kill] DATADIR" >&2; exit 2; }
pidfile="$1/kafka.pid"
[ -f "$pidfile" ] || { echo "kafka-down.sh: no $pidfile" >&2; exit 0; }
pid="$(cat "$pidfile")"
if kill -0 "$pid" 2>/dev/null; then
  kill -s "$sig" "$pid"
  for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "kafka-down.sh: pid $pid still alive after 60 s, SIGKILL" >&2
    kill -s KILL "$pid" || true
  fi
fi
rm -f "$pidfile"
