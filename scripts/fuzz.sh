#!/usr/bin/env bash
# Builds the fuzz targets of fuzz/ (cargo fuzz: libFuzzer + AddressSanitizer,
# optimised, debug assertions on) and runs each for SECONDS_PER_TARGET
# (default 60) on a scratch copy of its committed corpus (fuzz/corpus/<t>/,
# so runs never grow the repo) plus its regression inputs
# (fuzz/regressions/<t>/, which must not crash).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]
#
# Limits: -rss_limit_mb=1024 and -malloc_limit_mb=512 (one allocation of
# 512 MiB or more is a crash: that is how a count read from the input that
# sizes an allocation shows up), -max_len 1 MiB for request_frame and
# 256 KiB for the others, -timeout=10 s per input.
# Exit status: 0 only if no target crashed. A crash's input is kept in
# fuzz/artifacts/<target>/ (printed); reproduce it with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
# The last lines are one summary line per target.
#
# Environment:
#   FUZZ_TARGETS     targets to run (default: all five)
#   FUZZ_KEEP_GOING  1: go on after a crash (libFuzzer -fork=1 with
#                    -ignore_crashes/-ignore_ooms/-ignore_timeouts), to
#                    collect every crash of a long run; still exits 1 if any
#   FUZZ_JOBS        with FUZZ_KEEP_GOING=1: parallel fuzzing processes
#                    per target (default 1)
#   FUZZ_CORPUS_OUT  directory to copy each grown corpus to after its run
#                    (default: none; the scratch copy is removed)
# Needs cargo-fuzz and a nightly toolchain: installed on the first run when
# missing (cargo install, rustup).
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
secs="${1:-60}"
targets="${FUZZ_TARGETS:-request_frame record_batch group_codecs log_recovery txn_codecs auth_exchanges telemetry_payload}"
keep_going="${FUZZ_KEEP_GOING:-0}"
jobs="${FUZZ_JOBS:-1}"

# cargo-fuzz (pinned; built from source with the stable toolchain) and the
# nightly toolchain the targets need (-Zsanitizer): installed here, the first
# time, rather than by scripts/install-test-deps.sh, since only this script
# uses them.
CARGO_FUZZ_VERSION=0.13.1
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  echo "fuzz: cargo install cargo-fuzz $CARGO_FUZZ_VERSION"
  if ! cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked -q; then
    echo "fuzz: cargo-fuzz $CARGO_FUZZ_VERSION could not be installed" >&2
    exit 2
  fi
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: no nightly toolchain: rustup toolchain install nightly --profile minimal"
  if ! rustup toolchain install nightly --profile minimal; then
    echo "fuzz: the nightly toolchain could not be installed" >&2
    exit 2
  fi
fi

t0=$SECONDS
echo "fuzz: building the targets (cargo +nightly fuzz build -O --debug-assertions)"
if ! (cd fuzz && cargo +nightly fuzz build -O --debug-assertions); then
  echo "fuzz: build failed" >&2
  exit 1
fi
build_secs=$((SECONDS - t0))
bin="$repo/fuzz/target/x86_64-unknown-linux-gnu/release"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/moldau-fuzz.XXXXXX")"
# Files of the log_recovery target go to tmpfs when there is one.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  files="$(mktemp -d /dev/shm/moldau-fuzz-files.XXXXXX)"
else
  files="$scratch/files"
  mkdir -p "$files"
fi
cleanup() { rm -rf "$scratch" "$files"; }
trap cleanup EXIT

summary=()
failed=0
for t in $targets; do
  if [ ! -x "$bin/$t" ]; then
    summary+=("fuzz: $t: NOT BUILT")
    failed=1
    continue
  fi
  corpus="$scratch/corpus/$t"
  mkdir -p "$corpus" "$repo/fuzz/artifacts/$t" "$repo/fuzz/regressions/$t"
  [ -d "fuzz/corpus/$t" ] && cp -r "fuzz/corpus/$t/." "$corpus/"
  max_len=262144
  [ "$t" = request_frame ] && max_len=1048576
  before="$(ls "$repo/fuzz/artifacts/$t" | sort)"
  args=(
    -max_total_time="$secs" -rss_limit_mb=1024 -malloc_limit_mb=512
    -max_len="$max_len" -timeout=10 -print_final_stats=1
    -artifact_prefix="$repo/fuzz/artifacts/$t/"
  )
  if [ "$keep_going" = 1 ]; then
    args+=(-fork="$jobs" -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  fi
  log="$scratch/$t.log"
  echo
  echo "=== fuzz $t: ${secs}s, corpus $(ls "$corpus" | wc -l) files + $(ls "fuzz/regressions/$t" | wc -l) regressions"
  start=$SECONDS
  rc=0
  MOLDAU_FUZZ_TMP="$files" "$bin/$t" "${args[@]}" "$corpus" "$repo/fuzz/regressions/$t" >"$log" 2>&1 || rc=$?
  took=$((SECONDS - start))
  grep -E '^(INFO: (seed|Loaded|-max_len)|#[0-9]+ +(INITED|DONE)|==[0-9]+==|SUMMARY|thread .* panicked|stat::)' "$log" | tail -20
  new="$(comm -13 <(echo "$before") <(ls "$repo/fuzz/artifacts/$t" | sort) | grep -v '^$' || true)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  if [ -z "$execs" ]; then
    # fork mode prints no final stats: take the last status line
    execs="$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')"
  fi
  execs="${execs:-0}"
  rate=$((execs / (took > 0 ? took : 1)))
  rss="$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)"
  if [ -n "${FUZZ_CORPUS_OUT:-}" ]; then
    mkdir -p "$FUZZ_CORPUS_OUT/$t" && cp -r "$corpus/." "$FUZZ_CORPUS_OUT/$t/"
  fi
  line="$(printf 'fuzz: %-14s %-7s %10s execs in %4ss (%s exec/s), corpus %s, peak rss %s MB' \
    "$t" "$([ $rc -eq 0 ] && [ -z "$new" ] && echo ok || echo CRASHED)" "$execs" "$took" "$rate" \
    "$(ls "$corpus" | wc -l)" "${rss:-?}")"
  if [ $rc -ne 0 ] || [ -n "$new" ]; then
    failed=1
    for f in $new; do line+=$'\n'"      artifact: fuzz/artifacts/$t/$f"; done
    [ -z "$new" ] && line+=$'\n'"      exit $rc without an artifact; log: see above"
  fi
  summary+=("$line")
done

echo
echo "=== fuzz summary (build ${build_secs}s, total $((SECONDS - t0))s)"
for line in "${summary[@]}"; do echo "$line"; done
exit $failed
