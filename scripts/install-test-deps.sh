#!/usr/bin/env bash
# Installs everything the tests need, on a fresh Debian machine or again on a
# used one (idempotent; each part is skipped when already in place):
#   1. Debian packages: kcat, openssl, iptables (the fault checker's network
#      cuts, e2e/faults) (+ java/maven/python venv if missing)
#   2. the Python venv <repo>/.venv with e2e/clients/requirements.txt (pinned)
#   3. Maven: the Java client driver (e2e/clients/java), the Kafka Streams
#      driver (e2e/clients/streams) and the Apache Kafka
#      reference broker's jars (e2e/clients/kafka-dist/jars)
#   3b. Go: the franz-go client driver (e2e/clients/franz), its modules from
#      the Go module proxy
#   4. buildah, debootstrap (the image tests)
# Rust itself (cargo, rustfmt, clippy) comes with the machine. cargo-fuzz and
# the nightly toolchain, for the optional fuzz stage only, are installed by
# scripts/fuzz.sh when it first runs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
t0=$SECONDS
log() { echo "[install-test-deps +$((SECONDS - t0))s] $*"; }

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
# apt-get that waits for the dpkg/apt locks another process holds (a parallel
# install, unattended-upgrades on a fresh machine) instead of failing at once:
# DPkg::Lock::Timeout for the dpkg lock, and a retry while apt still reports
# a held lock (older apt, or the lists lock of `update`), for up to
# APT_LOCK_WAIT seconds in all (default 600).
APT_LOCK_WAIT="${APT_LOCK_WAIT:-600}"
apt_get() {
  local deadline=$((SECONDS + APT_LOCK_WAIT)) err rc
  err="$(mktemp)"
  while :; do
    if $SUDO env DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" "$@" 2>"$err"; then
      cat "$err" >&2; rm -f "$err"; return 0
    else
      rc=$?
    fi
    if grep -qiE 'could not get lock|unable to (acquire|lock)|another process' "$err" \
        && [ "$SECONDS" -lt "$deadline" ]; then
      log "apt is locked by another process; waiting ($((deadline - SECONDS))s left)"
      sleep 5
      continue
    fi
    cat "$err" >&2; rm -f "$err"; return "$rc"
  done
}

# --- 1. Debian packages --------------------------------------------------------
missing=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
have_pkg kcat || missing+=(kcat)
have_pkg openssl || missing+=(openssl)
have_pkg ca-certificates || missing+=(ca-certificates)
# the benchmark's load generator (bench/, built by the workspace's tests)
# links librdkafka with OpenSSL for the TLS benchmark
have_pkg libssl-dev || missing+=(libssl-dev)
have_pkg pkg-config || missing+=(pkg-config)
# e2e/faults cuts the traffic between two brokers' loopback addresses with it
have_pkg iptables || missing+=(iptables)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present"
fi

# --- 2. Python venv ------------------------------------------------------------
req="$repo/e2e/clients/requirements.txt"
stamp="$repo/.venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -x "$repo/.venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  log "venv up to date"
else
  log "creating/updating .venv from e2e/clients/requirements.txt"
  [ -x "$repo/.venv/bin/python" ] || python3 -m venv "$repo/.venv"
  "$repo/.venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
fi

# --- 3. Maven ------------------------------------------------------------------
java_dir="$repo/e2e/clients/java"
jstamp="$java_dir/target/.build.sha256"
jwant="$(cat "$java_dir/pom.xml" $(find "$java_dir/src" -type f | sort) | sha256sum | cut -d' ' -f1)"
if [ -f "$jstamp" ] && [ "$(cat "$jstamp")" = "$jwant" ] && [ -d "$java_dir/target/lib" ]; then
  log "Java client driver up to date"
else
  log "building the Java client driver (kafka-clients from Maven Central)"
  # a fresh lib/: jars of an older kafka.clients.version would stay on the class path
  rm -rf "$java_dir/target/lib"
  mvn -q -B -Dstyle.color=never -f "$java_dir/pom.xml" package dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$java_dir/target/lib"
  echo "$jwant" > "$jstamp"
fi
# e2e/clients/streams: the Kafka Streams word count (test_streams_eos.py), same way
streams_dir="$repo/e2e/clients/streams"
sstamp="$streams_dir/target/.build.sha256"
swant="$(cat "$streams_dir/pom.xml" $(find "$streams_dir/src" -type f | sort) | sha256sum | cut -d' ' -f1)"
if [ -f "$sstamp" ] && [ "$(cat "$sstamp")" = "$swant" ] && [ -d "$streams_dir/target/lib" ]; then
  log "Kafka Streams driver up to date"
else
  log "building the Kafka Streams driver (kafka-streams 4.4.0 through Maven)"
  rm -rf "$streams_dir/target/lib"
  mvn -q -B -Dstyle.color=never -f "$streams_dir/pom.xml" package dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$streams_dir/target/lib"
  echo "$swant" > "$sstamp"
fi
log "Apache Kafka reference broker jars"
"$repo/e2e/clients/kafka-dist/fetch-jars.sh"

# --- 3b. Go: the franz-go client driver (e2e/clients/franz) ---------------------
# Go itself (the go.mod's `go` line, 1.26) comes with the machine. The modules
# are pinned by the committed go.mod and go.sum (-mod=readonly: a module not
# in go.sum is an error, never a silent update) and land in the module cache
# (GOMODCACHE); the build cache stays in ~/.cache/go-build. The binary goes
# where the tests look for it (harness/clients.py franz_program, which
# rebuilds it from the module cache alone, GOPROXY=off, when its sources are
# newer). The stamp covers the sources and the Go version.
franz_dir="$repo/e2e/clients/franz"
franz_out="$repo/e2e/.state/clients/franz"
fstamp="$franz_out/.build.sha256"
if ! command -v go >/dev/null 2>&1; then
  log "WARNING: Go not found (need >= 1.26); e2e/clients/test_franz.py will fail"
else
  fwant="$( (go version; cat "$franz_dir/go.mod" "$franz_dir/go.sum" "$franz_dir/main.go") | sha256sum | cut -d' ' -f1)"
  if [ -f "$fstamp" ] && [ "$(cat "$fstamp")" = "$fwant" ] && [ -x "$franz_out/franz" ]; then
    log "franz-go client driver up to date"
  else
    log "building the franz-go client driver (modules from the Go module proxy)"
    mkdir -p "$franz_out"
    (cd "$franz_dir" && go mod download \
      && go build -mod=readonly -buildvcs=false -o "$franz_out/franz.tmp" . \
      && mv -f "$franz_out/franz.tmp" "$franz_out/franz")
    echo "$fwant" > "$fstamp"
  fi
fi

# --- 4. Packaging (owner: packaging, e2e/tests/packaging_images.rs) -----------------
# buildah builds the Dockerfile's images without a daemon (--isolation chroot,
# vfs storage); debootstrap can make a Debian minbase runtime base locally.
pkg_missing=()
have_pkg buildah || pkg_missing+=(buildah)
have_pkg debootstrap || pkg_missing+=(debootstrap)
if [ ${#pkg_missing[@]} -gt 0 ]; then
  log "apt-get install ${pkg_missing[*]} (packaging)"
  apt_get install -y -qq --no-install-recommends "${pkg_missing[@]}" >/dev/null \
    || { apt_get update -qq && apt_get install -y -qq --no-install-recommends "${pkg_missing[@]}" >/dev/null; }
else
  log "buildah, debootstrap present"
fi
# --- end of packaging block ---------------------------------------------------------

# cargo-fuzz and its nightly toolchain are not installed here: only the fuzz
# stage uses them (`TEST_ALL_STAGES=fuzz`, off by default), and
# scripts/fuzz.sh installs them itself the first time it runs.

log "done in $((SECONDS - t0))s"
