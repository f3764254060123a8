# gpucluster: the operator image (webhook, controller, certificate rotation, the chart's hook Jobs).
# `gpucluster` is the entrypoint; the chart passes the command (webhook | controller | certs rotate |
# apply | cleanup) as arguments. Runs as UID 65532 with a read-only root filesystem (the chart mounts
# /tmp), needs no shell, and holds no compiler, no pip and no pip cache.
#
# The build needs no network: it installs the wheels of the project and of its dependencies from
# dist/wheels, which `make wheels` fills on the host (`make image` does it all, with buildah).
#   make wheels && docker build -t ghcr.io/gpucluster/gpucluster:0.1.0 .
# BASE is any image with python3 >= 3.11 and its venv module: python:3.11-slim by default;
# `make image` uses a Debian bookworm base it builds with mmdebstrap.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PYTHONDONTWRITEBYTECODE=1
COPY dist/wheels /wheels
# The bytecode is compiled with checked hashes rather than timestamps: the root filesystem is
# read-only at run time (no .pyc can be written then) and the layer is the same on every build.
RUN python3 -m venv /opt/gpucluster \
    && /opt/gpucluster/bin/python -m pip install --no-index --find-links /wheels gpucluster \
    && /opt/gpucluster/bin/python -m pip uninstall --yes pip \
    && rm -rf /opt/gpucluster/bin/activate* /opt/gpucluster/bin/Activate.ps1 \
    && find /opt/gpucluster -name __pycache__ -type d -prune -exec rm -rf {} + \
    && /opt/gpucluster/bin/python -m compileall -q --invalidation-mode checked-hash /opt/gpucluster

FROM ${BASE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="gpucluster" \
      org.opencontainers.image.description="The GPU Operator's DRA model: GPUCluster controller and admission webhook" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/gpucluster/gpucluster" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=build /opt/gpucluster /opt/gpucluster
ENV PATH=/opt/gpucluster/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
# No user database entry is needed: the numeric user is what the kubelet checks against
# runAsNonRoot, and nothing here looks its name up.
USER 65532:65532
WORKDIR /
ENTRYPOINT ["gpucluster"]
CMD ["--help"]
