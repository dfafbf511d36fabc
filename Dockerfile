# The `processor` image: coordinator, workers and the one-shot commands all run from it.
#
#   docker build -t processor .
#   docker run --rm processor --help
#   docker run --rm -e PROCESSOR_BOOTSTRAP_SERVERS=kafka:9092 processor worker
#
# Both stages must use the same Python image: the virtual environment built in the first one
# links to the interpreter at /usr/local/bin/python3 and is copied as it is into the second.
# PYTHON_IMAGE is that image. Pin it by digest where a registry is reachable:
#   bash deploy/pin-base-images.sh      (rewrites the default below to python:3.11-slim@sha256:...)
# deploy/compose-test.sh passes the plain tag when it has to build a local stand-in.

ARG PYTHON_IMAGE=python:3.11-slim

# --------------------------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN python -m venv /opt/venv
WORKDIR /src

# Dependencies first, from the lock file, so that this layer is rebuilt only when the lock
# changes, not on every source edit. Exact versions with their hashes (pip refuses anything
# else), so two builds install the same files. Binary wheels only: the slim image has no
# compiler, and confluent-kafka and rocksdict ship manylinux wheels for amd64 and arm64.
# requirements.lock is pip-compile's output for pyproject.toml (its header says how). The
# build backend is locked the same way (requirements-build.lock), in a venv of its own that
# stays out of the image.
COPY requirements.lock requirements-build.lock ./
RUN /opt/venv/bin/pip install --require-hashes --only-binary=:all: -r requirements.lock \
    && python -m venv /opt/build \
    && /opt/build/bin/pip install --require-hashes --only-binary=:all: -r requirements-build.lock

# Then the project itself, as a wheel (no editable install, no source tree in the image).
# .dockerignore lets only the files the wheel needs into the build context.
COPY . .
RUN /opt/build/bin/pip wheel --no-build-isolation --no-deps --wheel-dir /tmp/wheels . \
    && /opt/venv/bin/pip install --no-deps /tmp/wheels/processor-*.whl \
    && /opt/venv/bin/pip check \
    && /opt/venv/bin/processor --help > /dev/null

# --------------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="processor" \
      org.opencontainers.image.description="Exactly-once stream processing on Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed, numeric, non-root user (numeric so that Kubernetes' runAsNonRoot can verify it).
# Not --system: system accounts have ids below 1000, and useradd warns about 10001.
# Its directories are created here with its ownership: a named volume mounted over one of
# them starts as a copy of it, ownership included, so the user can write to the volume.
RUN groupadd --gid 10001 processor \
    && useradd --uid 10001 --gid processor --no-create-home --no-log-init \
        --home-dir /var/lib/processor --shell /usr/sbin/nologin processor \
    && install -d -o processor -g processor -m 0750 \
        /var/lib/processor /var/lib/processor/state /var/lib/processor/checkpoints

COPY --from=builder /opt/venv /opt/venv
# The example pipelines: PROCESSOR_PIPELINE=/opt/processor/examples/<file>.py:pipeline runs one;
# a pipeline of your own is mounted (or COPYed into an image FROM this one) the same way.
COPY --from=builder /src/examples /opt/processor/examples

# State: each container's own RocksDB working copy, rebuilt from checkpoints on restore; it
# must never be shared between containers. Checkpoints: the storage every coordinator and
# worker of a job shares (a shared volume). Metrics bind every interface so that a scraper
# in another container can reach them; 0 as the port turns them (and the health check) off.
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONFAULTHANDLER=1 \
    PROCESSOR_STATE_DIR=/var/lib/processor/state \
    PROCESSOR_CHECKPOINT_DIR=/var/lib/processor/checkpoints \
    PROCESSOR_METRICS_HOST=0.0.0.0 \
    PROCESSOR_METRICS_PORT=9400

WORKDIR /var/lib/processor
USER 10001:10001
EXPOSE 9400

# Healthy while /healthz answers 200: the service's main loop went round recently
# (PROCESSOR_HEALTH_TIMEOUT_MS). /metrics would answer from its own thread while the loop is
# stuck. Needs nothing but the Python the image already has.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; p = os.environ.get('PROCESSOR_METRICS_PORT', '0'); h = os.environ.get('PROCESSOR_METRICS_HOST', '127.0.0.1'); h = '127.0.0.1' if h in ('', '0.0.0.0') else h; p in ('', '0') or r.urlopen(f'http://{h}:{p}/healthz', timeout=4).close()"]

# Exec form: `processor` is PID 1's program and gets SIGTERM itself, which makes coordinator
# and workers stop cleanly (run with --init, or `init: true` in compose, to reap children).
ENTRYPOINT ["processor"]
CMD ["--help"]
