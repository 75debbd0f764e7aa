# syntax=docker/dockerfile:1
# The one image of ares-mesh: every service is `ares run <service>`, every one-shot job an
# `ares` command (e.g. `ares topics apply`). Build: docker build -t ares-mesh:dev .
#
# Stage 1 builds the wheel of ares-mesh, its append path compiled to C by mypyc
# (services/ares/native.py), and installs it with its dependencies into a virtualenv.
# It is the full Python image of the same version and Debian release as the slim one, for
# its C compiler. Stage 2 is a clean slim Python with that virtualenv only: no compiler, no
# build backend, no source tree. Every dependency ships manylinux wheels for CPython 3.11.
ARG PYTHON_IMAGE=python:3.11-slim
ARG BUILDER_IMAGE=python:3.11

FROM ${BUILDER_IMAGE} AS builder
# ARES_REQUIRE_NATIVE: a failed compilation fails the build (elsewhere it falls back to
# the same modules run as Python, only slower).
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    ARES_REQUIRE_NATIVE=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY services/ services/
RUN pip wheel --no-cache-dir --wheel-dir /wheels . \
    && python -m venv /opt/ares \
    && /opt/ares/bin/pip install --no-cache-dir --no-index --find-links /wheels \
        /wheels/ares_mesh-*.whl \
    && /opt/ares/bin/ares --version \
    && /opt/ares/bin/python -m ares.native --check

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
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /home/ares
# /healthz, /readyz and /metrics of the services, each on its own port unless ARES_HTTP_PORT
# says otherwise (ares.probes.DEFAULT_PORTS): replay-reader 8080 (also its HTTP API),
# runtime-manager 8081, health-checker 8082, compactor 8083. No ARES_HTTP_PORT here: it
# would put every service on one port.
EXPOSE 8080 8081 8082 8083
# No HEALTHCHECK: the same image runs one-shot commands (topics apply) and services, and
# the orchestrators define the probes per service (docker-compose.yml, the Helm chart).
ENTRYPOINT ["ares"]
CMD ["--help"]
