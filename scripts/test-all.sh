#!/usr/bin/env bash
# The project's one test command: every test, on a fresh machine too.
#
# Stages (each named, timed, and reported in the summary):
#   install      scripts/install-test-deps.sh (apt, .venv, Maven, Go, buildah)
#   fmt          cargo fmt --all -- --check
#   clippy       cargo clippy --workspace --all-targets -- -D warnings
#   build        cargo build --release -p moldau-broker (the README's first
#                command's build), then with -p moldau-operator too (what the
#                image tests build); the second compiles only what the
#                operator adds, else `one-build` fails naming the crates
#                compiled twice (their features differ between the two builds)
#   unit         cargo test --workspace (includes the bounded fuzz run:
#                fuzz-checks/tests/bounded.rs, every fuzz check on its corpus
#                and 15 s of seeded mutations, no coverage guidance)
#   fuzz         only when named in TEST_ALL_STAGES: scripts/fuzz.sh 30, the
#                coverage-guided cargo-fuzz run (its cold nightly build with
#                AddressSanitizer alone takes 15-25 minutes on 2 cores, which
#                the 90-minute CI budget cannot hold next to the rest);
#                installs cargo-fuzz and nightly itself the first time
#   clients      pytest e2e/clients: real Kafka clients against the built broker
#   faults       e2e/faults/run.sh test: the fault checker's units and a bounded
#                2-minute run of faults on a 3-broker cluster (0 acknowledged lost)
#   k8s-tools, k8s-up, k8s-e2e, k8s-down
#                the Kubernetes e2e stage, once e2e/scripts/build-tools.sh exists;
#                the tools' cold Go build (10-40 minutes on 2 cores) starts
#                right after the install stage, in the background at the
#                lowest CPU and I/O priority, so it uses what the Rust and
#                client stages leave idle; the k8s-tools stage then waits
#                for it (its output is that stage's log)
#                k8s-down runs whenever k8s-up was started, whatever the budget
#                (it has its own time beyond it) and on SIGINT/SIGTERM too
#
# A stage whose prerequisite failed is skipped (and counted as failed).
# Each stage's output also goes to $TEST_ALL_LOGS/<stage>.log. When a stage
# fails or runs out of time, the tests it left unfinished (started, no result)
# and the tests that failed are named, from cargo test's and pytest -v's output,
# after the stage and again above the summary.
# Exit status: 0 only if every stage passed. The last line is the summary.
#
# Environment:
#   TEST_ALL_STAGES    space-separated stages to run (default: all)
#   TEST_ALL_SKIP      space-separated stages not to run
#   TEST_ALL_BUDGET    seconds for the whole run (default 5100 = 85 min); a stage
#                      gets at most what is left, and is failed when it runs out.
#                      k8s-down has its own TEST_ALL_TEARDOWN seconds (default
#                      240) beyond the budget.
#   TEST_ALL_LOGS      directory of the stage logs (default target/test-all)
#   MOLDAU_TEST_TARGET broker for the clients stage: moldau (default) | kafka
#   PYTEST_ARGS        extra arguments for the clients stage's pytest
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
self="$repo/scripts/test-all.sh"

budget="${TEST_ALL_BUDGET:-5100}"
teardown_limit="${TEST_ALL_TEARDOWN:-240}"
only="${TEST_ALL_STAGES:-}"
skip_list="${TEST_ALL_SKIP:-}"
logs="${TEST_ALL_LOGS:-$repo/target/test-all}"
mkdir -p "$logs"
start=$SECONDS
# One build of everything, no incremental caches: CI's disk is finite and each
# copy of the dependency tree costs gigabytes.
export CARGO_INCREMENTAL=0

# What a fresh machine's run writes, measured (2026-12-07): target/ 8.6 GB
# (debug 7.1, release 1.4), Go's build cache and modules 4.9 GB, Maven, the
# venv and Debian packages about 1 GB: about 15 GB. Less free space fails a
# build stage with "No space left on device"; say so before it starts.
need_gb=16
free_kb="$(df --output=avail -k . | tail -1 | tr -d ' ')"
echo "=== test-all: $((free_kb / 1048576)) GB free here; a run from a fresh machine writes about 15 GB"
if [ "$free_kb" -lt $((need_gb * 1048576)) ]; then
  echo "=== test-all: WARNING: less than ${need_gb} GB free: the build stages may run out of disk"
fi

# The build stage's command (`test-all.sh __build`, so that `timeout` can run
# it): the broker alone as `cargo run --release -p moldau-broker` builds it,
# then broker and operator together as the image tests build them. The second
# must compile only what the operator adds; crates of the broker's tree that it
# compiles again are written to $logs/build-twice.txt (the `one-build` check).
if [ "${1:-}" = __build ]; then
  rm -f "$logs/build-twice.txt"
  cargo build --release -p moldau-broker || exit
  cargo build --release -p moldau-broker -p moldau-operator 2>&1 | tee "$logs/build-both.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || exit "$rc"
  again="$(LC_ALL=C comm -12 \
    <(sed -n 's/^ *Compiling \([^ ]*\) \(v[^ ]*\).*/\1 \2/p' "$logs/build-both.log" | LC_ALL=C sort -u) \
    <(cargo tree -p moldau-broker -e normal,build --prefix none -f '{p}' 2>/dev/null \
      | awk 'NF >= 2 { print $1 " " $2 }' | LC_ALL=C sort -u))"
  if [ -n "$again" ]; then
    echo "$again" >"$logs/build-twice.txt"
    echo "=== build: broker and operator together compiled again what the broker's own build had:" \
      "$(echo "$again" | tr '\n' ' ')(their features differ: compare" \
      "\`cargo tree -e features -p moldau-broker\` with \`... -p moldau-broker -p moldau-operator\`)"
  fi
  exit 0
fi

# The k8s-tools stage's command when the tools build in the background
# (`test-all.sh __wait_tools RC_FILE LOG PID`): waits for the build's exit
# code, then prints its output and exits with it. Run under the stage's timeout.
if [ "${1:-}" = __wait_tools ]; then
  while [ ! -s "$2" ] && kill -0 "$4" 2>/dev/null; do sleep 2; done
  sleep 1
  cat "$3"
  [ -s "$2" ] || { echo "k8s-tools: the background build ended without an exit code"; exit 1; }
  exit "$(cat "$2")"
fi

# The test binaries that need the Kubernetes control plane (they return at once
# under MOLDAU_E2E=0); the k8s-e2e stage runs exactly these.
K8S_TEST_TARGETS=(store apiserver cluster_dns cluster_kubernetes cluster_kubernetes_clients helm lease
  packaging_chart packaging_helm packaging_images packaging_install_manifest podspec
  statefulset e2e_operator e2e_pod_dns certs_secrets e2e_tls_cluster)
declare -A status=()
declare -A started=()
order=()
summary=()
reports=()
running_pid=""
running_name=""
# test targets a stage runs, to name those a budget cut never reached
declare -A stage_targets=()

want() {
  [[ " $skip_list " == *" $1 "* ]] && return 1
  [ -z "$only" ] || [[ " $only " == *" $1 "* ]]
}

# The tests a stage left unfinished or failed, from its log: cargo test's
# "Running <target> (<binary>)" ... "test result:" blocks and "test X ... ok|
# FAILED" lines (libtest prints a test when it ends, and "has been running for
# over 60 seconds" for long ones), pytest -v's "file::test RESULT" lines (the
# node id is written when a test starts, its result when it ends).
test_report() {
  awk '
    function binname(line,   l, p, n) {
      l = line; sub(/^ *Running /, "", l); p = l
      if (match(l, /\(.*\)$/)) { p = substr(l, RSTART + 1, RLENGTH - 2); l = substr(l, 1, RSTART - 2) }
      n = p; sub(/.*\//, "", n); sub(/-[0-9a-f]+$/, "", n)
      return n " (" l ")"
    }
    function close_bin(   t, msg) {
      if (bin != "" && !finished) {
        msg = ""
        for (t in long) msg = msg ", " t " (running over 60 s)"
        for (t in begun) if (!(t in long)) msg = msg ", " t
        if (msg == "") msg = ", no test had reported a result"
        print "unfinished: " bin ": " substr(msg, 3)
      }
      split("", long); split("", begun); bin = ""; finished = 0
    }
    /^ *Running .*\(.*\)$/ { close_bin(); bin = binname($0); next }
    /^ *Doc-tests / { close_bin(); bin = "doc-tests " $2; next }
    /^test result: / { finished = 1; next }
    /process didn.t exit successfully/ {
      if (bin != "" && !finished) { print "crashed: " bin; finished = 1 }
      next
    }
    /^test .* has been running for over [0-9]+ seconds$/ {
      t = $0; sub(/^test /, "", t); sub(/ has been running for over [0-9]+ seconds$/, "", t)
      long[t] = 1; next
    }
    /^test .* \.\.\. *$/ { t = $0; sub(/^test /, "", t); sub(/ \.\.\. *$/, "", t); begun[t] = 1; next }
    /^test .* \.\.\. [A-Za-z]/ {
      t = $0; r = $0; sub(/^test /, "", t); sub(/ \.\.\. [A-Za-z].*$/, "", t); sub(/.* \.\.\. /, "", r)
      delete long[t]; delete begun[t]
      if (r ~ /^FAILED/) print "failed: " (bin != "" ? bin ": " : "") t
      next
    }
    /^(FAILED|ERROR) [^ ]+\.py::/ {
      delete pending[$2]
      if (!($2 in failed)) { failed[$2] = 1; print "failed: " $2 }
      next
    }
    /^[^ ]+\.py::[^ ]+/ {
      id = $1
      if ($0 ~ / (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)( |$)/) {
        delete pending[id]
        if ($0 ~ / (FAILED|ERROR)( |$)/ && !(id in failed)) { failed[id] = 1; print "failed: " id }
      } else pending[id] = 1
      next
    }
    END {
      close_bin()
      for (id in pending) print "unfinished: " id
    }
  ' "$1"
}

# stage NAME LIMIT_SECONDS [needs=STAGE,...] [reserved] -- COMMAND...
# `reserved`: the stage has its own LIMIT_SECONDS whatever is left of the
# budget, and runs unless TEST_ALL_SKIP names it (teardown).
stage() {
  local name="$1" limit="$2"
  shift 2
  local needs="" reserved=0
  if [[ "${1:-}" == needs=* ]]; then needs="${1#needs=}"; shift; fi
  if [ "${1:-}" = reserved ]; then reserved=1; shift; fi
  [ "${1:-}" = "--" ] && shift
  if [ $reserved = 1 ]; then
    [[ " $skip_list " == *" $name "* ]] && return 0
  else
    want "$name" || return 0
  fi
  order+=("$name")
  local dep
  for dep in ${needs//,/ }; do
    if [ -n "${status[$dep]:-}" ] && [ "${status[$dep]}" != pass ]; then
      status[$name]=skip
      summary+=("$(printf '%-10s SKIPPED (needs %s)' "$name" "$dep")")
      echo "=== stage $name: skipped, $dep did not pass"
      return 0
    fi
  done
  local left=$((budget - (SECONDS - start)))
  if [ $reserved = 0 ]; then
    if [ "$left" -le 30 ]; then
      status[$name]=fail
      summary+=("$(printf '%-10s FAILED (no time left of the %ss budget)' "$name" "$budget")")
      echo "=== stage $name: no time left"
      return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
  fi
  local log="$logs/$name.log"
  echo
  echo "=== stage $name (limit ${limit}s, log $log): $*"
  started[$name]=1
  local t=$SECONDS rc=0
  # The output goes to the log and is followed from there: a process the stage
  # leaves running (a broker, a pod runner) may hold it open, and a pipe would
  # wait for it.
  : >"$log"
  timeout --kill-after=30 "$limit" "$@" >>"$log" 2>&1 &
  running_pid=$! running_name=$name
  tail -n +1 -s 0.5 -f --pid="$running_pid" "$log" &
  local tail_pid=$!
  wait "$running_pid" || rc=$?
  running_pid=""
  wait "$tail_pid" 2>/dev/null
  # a cut leaves the last line open (pytest's "file::test " before its result)
  [ -n "$(tail -c1 "$log")" ] && echo
  local dt=$((SECONDS - t))
  if [ $rc -eq 0 ]; then
    status[$name]=pass
    summary+=("$(printf '%-10s passed  %5ss' "$name" "$dt")")
  else
    status[$name]=fail
    local why="exit $rc"
    [ $rc -eq 124 ] && why="timed out after ${limit}s"
    [ $rc -eq 137 ] && why="killed after ${limit}s + 30s"
    summary+=("$(printf '%-10s FAILED  %5ss  (%s)' "$name" "$dt" "$why")")
    stage_report "$name" "$log" "$rc"
  fi
  # disk is a resource the suite can exhaust; say what each stage left
  echo "=== stage $name: ${status[$name]} in ${dt}s ($(df -h --output=avail . | tail -1 | tr -d ' ') free)"
}

# After a failed stage: its unfinished and failed tests, then (after a budget
# cut) the test targets it never reached, or its last output line.
stage_report() {
  local name="$1" log="$2" rc="$3" lines=() line t
  while IFS= read -r line; do lines+=("$line"); done < <(test_report "$log")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    local missed=()
    for t in ${stage_targets[$name]:-}; do
      grep -q "Running tests/$t\.rs" "$log" || missed+=("$t")
    done
    [ ${#missed[@]} -gt 0 ] && lines+=("not started: ${missed[*]}")
    if [ ${#lines[@]} -eq 0 ]; then
      line="$(grep -v '^[[:space:]]*$' "$log" | tail -1 | cut -c1-200)"
      lines+=("cut during: ${line:-no output}")
    fi
  fi
  [ ${#lines[@]} -gt 0 ] || return 0
  echo "=== stage $name: what it left"
  for line in "${lines[@]}"; do
    echo "  $line"
    reports+=("$(printf '%-10s %s' "$name" "$line")")
  done
}

# The background build of the control plane's tools (started after the
# install stage): stopped when its stage fails or the run ends without it.
tools_rc="$logs/k8s-tools.rc"
tools_pid=""
stop_tools_build() {
  [ -n "$tools_pid" ] || return 0
  [ -s "$tools_rc" ] || kill -TERM -- "-$tools_pid" 2>/dev/null
  tools_pid=""
}

# Teardown of the control plane: whenever k8s-up was started (also when
# TEST_ALL_STAGES does not name k8s-down; TEST_ALL_SKIP=k8s-down keeps the
# plane up), once, with its own time beyond the budget.
k8s_down_done=0
k8s_teardown() {
  [ -n "${started[k8s-up]:-}" ] && [ $k8s_down_done = 0 ] || return 0
  k8s_down_done=1
  [ -x e2e/scripts/controlplane-down.sh ] || return 0
  stage k8s-down "$teardown_limit" reserved -- e2e/scripts/controlplane-down.sh
}

finish() {
  echo
  echo "=== summary (total $((SECONDS - start))s)"
  local passed=0 failed=0 skipped=0 line name
  for line in "${summary[@]}"; do echo "  $line"; done
  if [ ${#reports[@]} -gt 0 ]; then
    echo "  tests left unfinished or failed:"
    for line in "${reports[@]}"; do echo "    $line"; done
  fi
  for name in "${order[@]}"; do
    case "${status[$name]:-fail}" in
      pass) passed=$((passed + 1)) ;;
      skip) skipped=$((skipped + 1)) ;;
      *) failed=$((failed + 1)) ;;
    esac
  done
  # skipped stages were skipped because another failed: they count as failed
  echo "test-all: $passed passed, $((failed + skipped)) failed"
  [ $((failed + skipped)) -eq 0 ]
}

# Interrupted (Ctrl-C, CI's cancel): stop the running stage, tear down, report.
# shellcheck disable=SC2317  # called from the traps below
on_signal() {
  trap '' INT TERM
  echo
  echo "=== test-all: $1 received"
  if [ -n "$running_pid" ]; then
    echo "=== stage $running_name: interrupted"
    kill -TERM "$running_pid" 2>/dev/null
    wait "$running_pid"
    running_pid=""
    status[$running_name]=fail
    summary+=("$(printf '%-10s FAILED  (interrupted by %s)' "$running_name" "$1")")
    stage_report "$running_name" "$logs/$running_name.log" 124
  fi
  stop_tools_build
  k8s_teardown
  finish
  exit 130
}
trap 'on_signal SIGINT' INT
trap 'on_signal SIGTERM' TERM

stage install 1200 -- ./scripts/install-test-deps.sh

# The control plane's tools, built from here on in the background (see the
# header): `nice`/`ionice` give the stages in front of it the CPU and disk.
rm -f "$tools_rc"
if [ -x e2e/scripts/build-tools.sh ] && want k8s-e2e && want k8s-tools; then
  : >"$logs/k8s-tools-build.log"
  # its own process group (setsid), so that stopping it stops `go build` too
  setsid bash -c 'rc=0; nice -n 19 ionice -c 3 e2e/scripts/build-tools.sh >>"$1" 2>&1 || rc=$?; echo "$rc" >"$2"' \
    build-tools "$logs/k8s-tools-build.log" "$tools_rc" </dev/null &
  tools_pid=$!
  echo "=== k8s-tools: building in the background (pid $tools_pid, log $logs/k8s-tools-build.log)"
fi
stage fmt 300 -- cargo fmt --all -- --check
stage clippy 1800 -- cargo clippy --workspace --all-targets -- -D warnings
# the operator too: the image tests package both release binaries
rm -f "$logs/build-twice.txt"
stage build 1800 -- "$self" __build
if [ -s "$logs/build-twice.txt" ]; then
  order+=(one-build)
  status[one-build]=fail
  summary+=("$(printf '%-10s FAILED  (compiled twice: %s)' one-build "$(paste -sd, "$logs/build-twice.txt")")")
fi
k8s=0
if [ -x e2e/scripts/build-tools.sh ] && want k8s-e2e; then k8s=1; fi
# The moldau-e2e crate's tests (a workspace member) need the control plane:
# when the k8s stages run them, the unit stage tells them to return at once.
if [ $k8s = 1 ]; then
  stage unit 1800 -- env MOLDAU_E2E=0 cargo test --workspace
else
  stage unit 1800 -- cargo test --workspace
fi
if [[ " $only " == *" fuzz "* ]]; then
  stage fuzz 1800 needs=install -- ./scripts/fuzz.sh 30
fi
# -v: pytest names each test as it starts, so a budget cut can name it;
# --durations: the slowest tests, where the stage's time goes
# shellcheck disable=SC2086
stage clients 1800 needs=install,build -- e2e/clients/run.sh -v --durations=25 ${PYTEST_ARGS:-}
stage faults 900 needs=install,build -- e2e/faults/run.sh test -v

if [ -x e2e/scripts/build-tools.sh ]; then
  if [ -n "$tools_pid" ]; then
    stage k8s-tools 1800 -- "$self" __wait_tools "$tools_rc" "$logs/k8s-tools-build.log" "$tools_pid"
    [ "${status[k8s-tools]:-}" = pass ] || stop_tools_build
  else
    stage k8s-tools 1800 -- e2e/scripts/build-tools.sh
  fi
  stage k8s-up 600 needs=k8s-tools,build -- e2e/scripts/controlplane-up.sh
  # The unit stage's own test binaries, run by name: `cargo test --test …`
  # would resolve other features and compile the tree a second time (see
  # scripts/run-test-binaries.py).
  stage_targets[k8s-e2e]="${K8S_TEST_TARGETS[*]}"
  stage k8s-e2e 2400 needs=k8s-up -- ./scripts/run-test-binaries.py "${K8S_TEST_TARGETS[@]}"
  # tear down whenever bring-up was started, whatever the tests or the budget did
  k8s_teardown
fi
# a budget cut before the k8s-tools stage leaves no build behind
stop_tools_build

finish
