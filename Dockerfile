# syntax=docker/dockerfile:1
# Citegate's image: `docker build -t citegate .`, then see docker-compose.yml.
# Nothing secret is baked in: ANTHROPIC_API_KEY, CITEGATE_BOOTSTRAP_API_KEY and the database URL
# come from the environment at run time.

# The base of both stages. CI builds on a Debian bookworm base of its own with the same Python
# (scripts/image-check: --build-arg PYTHON_IMAGE=...); anyone else needs nothing but this default.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: a virtualenv with the pinned dependencies and the app (migrations included) ----
FROM ${PYTHON_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv

WORKDIR /src

# The dependencies first, from pyproject's list pinned by requirements.lock, so that a change to
# the code alone reuses this layer.
COPY pyproject.toml requirements.lock ./
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" > /tmp/dependencies.txt \
    && pip install --no-cache-dir -c requirements.lock -r /tmp/dependencies.txt

# Then the app itself, as a wheel would install it (app/ and the migrations/ package with its
# revisions and script.py.mako). The lock constrains the resolution again: nothing new comes in.
COPY README.md ./
COPY app ./app
COPY migrations ./migrations
RUN pip install --no-cache-dir -c requirements.lock . \
    && pip check

# ---- runtime: the virtualenv alone, run by an unprivileged user ----
FROM ${PYTHON_IMAGE} AS runtime

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONFAULTHANDLER=1 \
    PATH=/opt/venv/bin:$PATH

RUN groupadd --system --gid 10001 citegate \
    && useradd --system --no-log-init --uid 10001 --gid citegate --home-dir /srv/citegate \
        --shell /usr/sbin/nologin citegate \
    && mkdir -p /srv/citegate/data \
    && chown -R citegate:citegate /srv/citegate

# Tesseract reads the PDF pages that have no usable text layer (OCR), in the languages the
# default CITEGATE_OCR_LANGUAGES names, plus its orientation and script detection (osd).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        tesseract-ocr=5.3.0-2 tesseract-ocr-osd=1:4.1.0-2 tesseract-ocr-eng=1:4.1.0-2 \
        tesseract-ocr-deu=1:4.1.0-2 tesseract-ocr-fra=1:4.1.0-2 tesseract-ocr-spa=1:4.1.0-2 \
        tesseract-ocr-ita=1:4.1.0-2 tesseract-ocr-por=1:4.1.0-2 tesseract-ocr-rus=1:4.1.0-2 \
        tesseract-ocr-ara=1:4.1.0-2 tesseract-ocr-chi-sim=1:4.1.0-2 tesseract-ocr-jpn=1:4.1.0-2 \
    && rm -rf /var/lib/apt/lists/*

COPY --from=build /opt/venv /opt/venv

# The default database (sqlite under ./data) works here too; docker-compose.yml uses PostgreSQL.
WORKDIR /srv/citegate
USER 10001:10001

EXPOSE 8000

# Liveness: /healthz does no I/O. (Readiness, with the database, is /readyz.) Slim has no curl.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

# Forwarded headers are trusted from any proxy: in a deployment only the proxy or load balancer
# reaches the container. On SIGTERM in-flight requests get 30 s (--graceful-timeout): give the
# container a longer stop timeout (docker-compose.yml sets stop_grace_period).
CMD ["citegate", "serve", "--host", "0.0.0.0", "--port", "8000", "--proxy-headers", "--forwarded-allow-ips", "*"]
