# syntax=docker/dockerfile:1
# tidal's container image. One image per cloud, with only that cloud's SDK installed:
#   docker build --build-arg EXTRAS=aws   -t registry.example.com/tidal-autoscaler:0.2.0-aws .
#   docker build --build-arg EXTRAS=gcp   -t registry.example.com/tidal-autoscaler:0.2.0-gcp .
#   docker build --build-arg EXTRAS=azure -t registry.example.com/tidal-autoscaler:0.2.0-azure .
# EXTRAS is a comma-separated list of the package's extras (aws, gcp, azure, all); empty installs none
# (enough for `cloud: simulated` and `tidal plan`).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a virtualenv with tidal and the chosen extras -------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=aws
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/tidal
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY autoscaler ./autoscaler
COPY providers ./providers
RUN if [ -n "$EXTRAS" ]; then target=".[$EXTRAS]"; else target="."; fi \
    && /opt/tidal/bin/pip install --no-compile "$target" \
    && /opt/tidal/bin/tidal --version

# --- runtime: the virtualenv on a clean slim image, run as an unprivileged user ----------------------------
FROM ${PYTHON_IMAGE}
ARG EXTRAS=aws
LABEL org.opencontainers.image.title="tidal" \
      org.opencontainers.image.description="Queue-aware, cost-aware cluster autoscaler for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      dev.tidal.extras="${EXTRAS}"
RUN groupadd --system --gid 65532 tidal \
    && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin tidal
COPY --from=build /opt/tidal /opt/tidal
# Sample catalogs: the offline price fallback, and the offerings of `cloud: simulated`.
COPY config/catalogs /usr/share/tidal/catalogs
ENV PATH=/opt/tidal/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["tidal"]
CMD ["run", "--config", "/etc/tidal/config.yaml"]
