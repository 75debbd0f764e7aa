# syntax=docker/dockerfile:1
# The one image of ares-mesh: every service is `ares run <service>`, every one-shot job an
# `ares` command (e.g. `ares topics apply`). Build: docker build -t ares-mesh:dev .
#
# Stage 1 builds the wheel of ares-mesh and installs it with its dependencies into a
# virtualenv; stage 2 is a clean slim Python with that virtualenv only: no compiler, no
# build backend, no source tree. Every dependency ships manylinux wheels for CPython 3.11,
# so the builder needs no compiler either (pip would fail loudly if one were needed).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY services/ services/
RUN pip wheel --no-cache-dir --wheel-dir /wheels . \
    && python -m venv /opt/ares \
    && /opt/ares/bin/pip install --no-cache-dir --no-index --find-links /wheels \
        /wheels/ares_mesh-*.whl \
    && /opt/ares/bin/ares --version

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="ares-mesh" \
      org.opencontainers.image.description="Crash-proof long-running agents on Apache Kafka" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed numeric uid/gid: Kubernetes' runAsNonRoot can only verify a numeric USER.
RUN groupadd --system --gid 10001 ares \
    && useradd --system --uid 10001 --gid ares --home-dir /home/ares --create-home \
        --shell /usr/sbin/nologin ares
COPY --from=builder /opt/ares /opt/ares

# Bytecode was compiled at install time: nothing is written at run time, so the chart can
# mount the root filesystem read-only.
ENV PATH=/opt/ares/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ARES_HTTP_PORT=8080
USER 10001:10001
WORKDIR /home/ares
# /healthz, /readyz and /metrics of the services (ARES_HTTP_PORT).
EXPOSE 8080
# No HEALTHCHECK: the same image runs one-shot commands (topics apply) and services, and
# the orchestrators define the probes per service (docker-compose.yml, the Helm chart).
ENTRYPOINT ["ares"]
CMD ["--help"]
