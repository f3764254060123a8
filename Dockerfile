# gpucluster: the operator image (webhook, controller, certificate rotation). `gpucluster` is the
# entrypoint; the chart passes the command (webhook | controller | certs rotate) as arguments.
# Runs as a non-root user and with a read-only root filesystem (the chart mounts /tmp).

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpucluster ./gpucluster
COPY webhook ./webhook
COPY controller ./controller
COPY certs ./certs
COPY sandbox ./sandbox
RUN python -m venv /opt/gpucluster \
    && /opt/gpucluster/bin/pip install . \
    && /opt/gpucluster/bin/python -m compileall -q /opt/gpucluster

FROM python:3.11-slim
LABEL org.opencontainers.image.title="gpucluster" \
      org.opencontainers.image.description="The GPU Operator's DRA model: GPUCluster controller and admission webhook" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 65532 gpucluster && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin gpucluster
COPY --from=build /opt/gpucluster /opt/gpucluster
ENV PATH=/opt/gpucluster/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["gpucluster"]
CMD ["--help"]
