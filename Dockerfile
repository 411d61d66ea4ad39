# syntax=docker/dockerfile:1
#
# kmutate's container image: `kmutate serve`, the admission webhook.
#
#   docker build -t kmutate:dev .
#
# The build stage runs the same release build as CI (`cargo build --release
# --locked`, the lock file decides every dependency version); the final stage
# is distroless: glibc and libgcc (the `cc` flavour, which the Rust binary
# links), CA certificates, no shell, running as the `nonroot` user (65532).
# Both stages are Debian 12 (bookworm) so the binary's glibc matches.
# tests/deploy.rs checks this file against Cargo.toml and the `serve` flags.

FROM docker.io/library/rust:1.95.0-slim-bookworm AS build
WORKDIR /src
# Only what the build reads: the manifest, the lock file, the sources and
# kmutate's CRDs, which `conformance --cluster --implementation kmutate.dev`
# installs (every include_str! in src/ points inside src/ or deploy/crds/,
# checked by tests/deploy.rs).
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY deploy/crds ./deploy/crds
# Cache mounts keep the registry and the target directory between builds; the
# binary is copied out of the cached target directory, and its DWARF debug info
# (the release profile keeps line tables for profiling) stripped; symbols stay, so
# panics still print readable backtraces.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
    && install -D target/release/kmutate /out/kmutate \
    && strip --strip-debug /out/kmutate

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/kmutate /usr/local/bin/kmutate
# The numeric id, so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# 8443: HTTPS (POST /mutate, GET /healthz, GET /readyz); 9090: GET /metrics.
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/kmutate", "serve"]
