# syntax=docker/dockerfile:1
#
# The admission webhook's image: `gate webhook serve` as uid 65532 on a read-only root filesystem,
# as charts/prune-gate runs it.
#
#   docker build -t registry.example/prune-gate:0.2.0 .
#
# One recipe: scripts/image-rootfs makes everything below /opt/prune-gate, here in the build stage
# and in tests/e2e/test_image.py, which serves the webhook from its output as uid 65532 on a
# read-only root (no container engine needed) against a real control plane.
#
# Both stages are the same image: the console script's #! names the build stage's Python. Pinned by
# tag here; in a release, pin it by digest as well (python:3.11.15-slim-trixie@sha256:...).
ARG PYTHON_IMAGE=python:3.11.15-slim-trixie

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# .dockerignore admits only what the recipe builds from (its SOURCES) and the recipe itself.
COPY . .
# Dependencies from the package index, binary wheels only; pip's cache survives between builds.
RUN --mount=type=cache,target=/root/.cache/pip python3 scripts/image-rootfs /rootfs

FROM ${PYTHON_IMAGE}
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="prune-gate" \
      org.opencontainers.image.description="Admission webhook that refuses destructive prunes" \
      org.opencontainers.image.source="https://github.com/prune-gate/prune-gate" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /rootfs/ /
# Bytecode is compiled at build time; nothing writes outside $TMPDIR (the chart mounts an emptyDir
# on /tmp), so the root filesystem can be read-only.
# MALLOC_MMAP_THRESHOLD_: glibc hands a closed TLS connection's 256 KiB read buffer back at once
# instead of keeping a burst's worth for good (400 connections opened and closed: RSS +12 MiB
# kept, not +112 MiB; webhook.serve.MALLOC_ENV, which the chart sets too).
ENV PATH=/opt/prune-gate/bin:$PATH \
    PYTHONPATH=/opt/prune-gate/lib \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp \
    MALLOC_MMAP_THRESHOLD_=131072
USER 65532:65532
# 8443: /validate over TLS; 8081: /healthz, /readyz and /metrics over plain HTTP.
EXPOSE 8443 8081
ENTRYPOINT ["gate"]
# The chart's arguments, less what depends on the release: mount the serving certificate on /tls
# and prune-gate.yaml on /config; the cluster is the pod's service account.
CMD ["webhook", "serve", \
     "--cert-file=/tls/tls.crt", "--key-file=/tls/tls.key", \
     "--listen=0.0.0.0:8443", "--health-port=8081", \
     "--config=/config/prune-gate.yaml"]
