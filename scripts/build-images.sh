#!/usr/bin/env bash
# Builds the broker and operator images from the Dockerfile with buildah.
#
#   scripts/build-images.sh [--mode prebuilt|build] [--tag TAG]
#       [--runtime-image IMAGE | --local-base] [--builder-image IMAGE]
#       [--targets "broker operator"] [--storage-root DIR]
#
# --mode prebuilt (default): `cargo build --release` on this machine (into
#     $CARGO_TARGET_DIR, default ./target; debug info stripped), then the Dockerfile's
#     BINARIES=prebuilt path copies them from a context holding only dist/.
# --mode build: the Dockerfile compiles them in its build stage
#     (BUILDER_IMAGE, default rust:1-bookworm; needs a registry).
# --local-base: no registry needed: makes localhost/moldau/runtime-base:local
#     from scratch with only the shared libraries the binaries need (ldd) plus
#     /etc/passwd, /etc/group and /tmp, and uses it as RUNTIME_IMAGE.
# --storage-root DIR: buildah storage in DIR instead of the default (tests).
#
# Images: moldau/broker:TAG and moldau/operator:TAG (default TAG: dev). Prints
# "image NAME UNCOMPRESSED_BYTES COMPRESSED_BYTES" per image at the end. Needs buildah (root here:
# --isolation chroot --storage-driver vfs, so no daemon and no overlay mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

mode=prebuilt
tag=dev
runtime_image=""
local_base=0
builder_image=""
targets="broker operator"
storage_root=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) mode="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --runtime-image) runtime_image="$2"; shift 2 ;;
    --local-base) local_base=1; shift ;;
    --builder-image) builder_image="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    --storage-root) storage_root="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
case "$mode" in prebuilt|build) ;; *) echo "--mode is prebuilt or build" >&2; exit 2 ;; esac

t0=$SECONDS
log() { echo "[build-images +$((SECONDS - t0))s] $*" >&2; }

bah=(buildah --storage-driver vfs)
if [ -n "$storage_root" ]; then
  mkdir -p "$storage_root"
  bah+=(--root "$storage_root/root" --runroot "$storage_root/run")
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
revision="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
created="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
build_args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "CREATED=$created")
[ -n "$builder_image" ] && build_args+=(--build-arg "BUILDER_IMAGE=$builder_image")

context="$repo"
if [ "$mode" = prebuilt ]; then
  target_dir="${CARGO_TARGET_DIR:-$repo/target}"
  log "cargo build --release into $target_dir"
  # Run from a test (packaging_images), this script inherits the variables
  # cargo set for that test; ring's build script watches CARGO_MANIFEST_DIR,
  # and a value it did not see in the build stage recompiles ring, rustls,
  # kube and the workspace (minutes). The build gets cargo's own settings only.
  while read -r var; do unset "$var"; done < <(compgen -e | grep -E \
    '^(CARGO_MANIFEST_(DIR|PATH|LINKS)|CARGO_CRATE_NAME|CARGO_BIN_NAME|CARGO_PRIMARY_PACKAGE|CARGO_TARGET_TMPDIR|CARGO_RUSTC_CURRENT_DIR|OUT_DIR|CARGO_PKG_.*|CARGO_BIN_EXE_.*|CARGO_CFG_.*)$')
  CARGO_TARGET_DIR="$target_dir" cargo build --release --locked -p moldau-broker -p moldau-operator >&2
  context="$work/context"
  mkdir -p "$context/dist"
  # The release profile keeps line tables (debug = 1) for profiling; images
  # do without them (the Dockerfile's build stage sets debug = 0 likewise).
  for b in moldau-broker moldau-operator; do
    strip --strip-debug -o "$context/dist/$b" "$target_dir/release/$b"
  done
  build_args+=(--build-arg BINARIES=prebuilt)
fi

if [ "$local_base" = 1 ]; then
  [ "$mode" = prebuilt ] || { echo "--local-base needs --mode prebuilt (the host's libraries must match the binaries)" >&2; exit 2; }
  runtime_image="localhost/moldau/runtime-base:local"
  log "making $runtime_image from scratch with the binaries' shared libraries"
  rootfs="$work/rootfs"
  mkdir -p "$rootfs/etc" "$rootfs/tmp" "$rootfs/var/lib/moldau"
  chmod 1777 "$rootfs/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
  for bin in "$context/dist/moldau-broker" "$context/dist/moldau-operator"; do
    # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
    ldd "$bin" | awk '/=> \//{print $3} /^[ \t]*\//{print $1}'
  done | sort -u | while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
  # the loader path also reached through /lib64 -> usr/lib64 etc. is copied as a file above
  ctr="$("${bah[@]}" from scratch)"
  "${bah[@]}" copy "$ctr" "$rootfs/" / >/dev/null
  "${bah[@]}" copy --chown 65532:65532 "$ctr" "$work/rootfs/var/lib/moldau" /var/lib/moldau >/dev/null
  "${bah[@]}" config --label org.opencontainers.image.title=moldau-runtime-base-local "$ctr"
  "${bah[@]}" commit --rm "$ctr" "$runtime_image" >/dev/null
fi
[ -n "$runtime_image" ] && build_args+=(--build-arg "RUNTIME_IMAGE=$runtime_image")

for t in $targets; do
  log "buildah bud --target $t -t moldau/$t:$tag"
  "${bah[@]}" bud --isolation chroot --layers=false --pull=false \
    -f "$repo/Dockerfile" --target "$t" -t "moldau/$t:$tag" "${build_args[@]}" "$context" >&2
done

# Sizes: uncompressed (the image's root filesystem) and compressed (the
# gzip layers of an OCI archive, what a registry stores and nodes pull).
for t in $targets; do
  ctr="$("${bah[@]}" from --pull-never "moldau/$t:$tag")"
  mnt="$("${bah[@]}" mount "$ctr")"
  raw="$(du -sb "$mnt" | cut -f1)"
  "${bah[@]}" umount "$ctr" >/dev/null
  "${bah[@]}" rm "$ctr" >/dev/null
  "${bah[@]}" push --quiet "moldau/$t:$tag" "oci-archive:$work/$t.tar" >/dev/null
  gz="$(stat -c %s "$work/$t.tar")"
  rm -f "$work/$t.tar"
  echo "image moldau/$t:$tag $raw $gz"
done
log "done"
