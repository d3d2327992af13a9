# syntax=docker/dockerfile:1
# Moldau images: `--target broker` and `--target operator`.
#
#   docker build --target broker   -t moldau/broker:dev   .
#   docker build --target operator -t moldau/operator:dev .
#   buildah bud --target broker -t moldau/broker:dev .
#
# Base images are build arguments:
#   BUILDER_IMAGE  Rust toolchain image of the build stage (default rust:1-bookworm)
#   RUNTIME_IMAGE  base of the runtime images: glibc + libgcc_s, nothing else
#                  needed (default distroless cc-debian12, non-root variant)
#   BINARIES       "build" (default): compile the release binaries in the build
#                  stage from this source tree; "prebuilt": copy them from
#                  dist/moldau-broker and dist/moldau-operator of the build
#                  context instead (see scripts/build-images.sh, which builds
#                  them with cargo on the host and also makes a local runtime
#                  base from the host's libraries when no registry is reachable).
# Only the stages a target needs are built, so the build stage's image is not
# pulled in prebuilt mode (BuildKit and buildah >= 1.26 skip unused stages).
#
# The runtime images hold one static-ish binary (dynamically linked to glibc
# only), run as UID/GID 65532, need no writable root filesystem (the broker
# writes only its data directory and /tmp, both volumes in Kubernetes).

ARG BUILDER_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG BINARIES=build

# --- binaries compiled here ----------------------------------------------------
FROM ${BUILDER_IMAGE} AS build
# The source revision the broker reports (--version, moldau_build_info):
# the context has no .git, so it comes from the same build argument as the
# image's revision label.
ARG REVISION=unknown
WORKDIR /src
COPY . .
ENV MOLDAU_BUILD_REVISION=${REVISION} \
    CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TARGET_DIR=/src/target
RUN cargo build --release --locked -p moldau-broker -p moldau-operator \
 && mkdir -p /out \
 && cp target/release/moldau-broker target/release/moldau-operator /out/

# --- or binaries built beforehand (BINARIES=prebuilt) ---------------------------
FROM scratch AS prebuilt
COPY dist/moldau-broker dist/moldau-operator /out/

FROM ${BINARIES} AS binaries

# --- runtime images -------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.vendor="Moldau" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://example.invalid/moldau" \
      org.opencontainers.image.url="https://example.invalid/moldau" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
USER 65532:65532
WORKDIR /

FROM runtime AS operator
LABEL org.opencontainers.image.title="moldau-operator" \
      org.opencontainers.image.description="Moldau Kubernetes operator: KafkaCluster and KafkaTopic controllers"
COPY --from=binaries --chown=0:0 --chmod=0755 /out/moldau-operator /usr/local/bin/moldau-operator
ENV MOLDAU_OPERATOR_HTTP_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/moldau-operator"]

FROM runtime AS broker
LABEL org.opencontainers.image.title="moldau-broker" \
      org.opencontainers.image.description="Moldau: a Kafka-compatible streaming log broker"
COPY --from=binaries --chown=0:0 --chmod=0755 /out/moldau-broker /usr/local/bin/moldau-broker
# Defaults for `docker run`; the operator sets every one of these in Kubernetes.
ENV MOLDAU_LISTEN=0.0.0.0:9092 \
    MOLDAU_HTTP_LISTEN=0.0.0.0:9644 \
    MOLDAU_DATA_DIR=/var/lib/moldau
VOLUME ["/var/lib/moldau"]
EXPOSE 9092 9644
ENTRYPOINT ["/usr/local/bin/moldau-broker"]
