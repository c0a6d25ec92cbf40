# The trajforge project image: trajforge and everything its collectors need, one image for
# every scheduler (Kubernetes, Slurm, cron fleets) and a Beam SDK container for `trajforge
# collect --runner ...` and `trajforge curate --runner ...` on Dataflow, Flink or Spark.
#   make image                                   # Podman or Docker, see scripts/build-image.sh
#   podman run --rm trajforge:latest --help
#   podman run --rm -v "$PWD/store:/data/store" trajforge:latest collect examples/jobs/terminal-swe.yaml --store /data/store
#
# BASE_IMAGE: any Debian bookworm image (debian:bookworm-slim with a registry; offline, the
#   debootstrapped root `trajforge sandboxes build` imports as localhost/trajforge-base:bookworm).
# BEAM_BOOT_IMAGE: an image holding Beam's boot launcher in /opt/apache/beam, normally the
#   official SDK image of the same Beam release (apache/beam_python3.11_sdk:2.77.0); it is
#   copied in and the entrypoint hands Beam's worker arguments to it. By default it is the
#   base image itself (which has no launcher): offline there is nothing to copy, and the image
#   runs trajforge, but is no Dataflow SDK container until rebuilt with a registry at hand.
# EXTRAS: the project's extras; collection and Beam, no training (torch stays out: ~1 GB less).
ARG BASE_IMAGE=debian:bookworm-slim
ARG BEAM_BOOT_IMAGE=${BASE_IMAGE}
FROM ${BEAM_BOOT_IMAGE} AS beam-boot
# Beam's launcher, where this image has one (the base image has none: the copy is then empty).
RUN mkdir -p /opt/beam-boot && { cp -a /opt/apache/beam/. /opt/beam-boot/ 2>/dev/null || true; }

FROM ${BASE_IMAGE}
ARG EXTRAS=curate,web,mcp,search,android,serve
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/trajforge/venv PATH=/opt/trajforge/venv/bin:$PATH \
    TRAJFORGE_CHROMIUM=/usr/bin/chromium TRAJFORGE_CACHE=/var/cache/trajforge

# System packages (the list of scripts/install-system-deps.sh, less the container engine):
# Chromium, the desktop with its accessibility tree (Xvfb, openbox, D-Bus, AT-SPI, pyatspi,
# xdotool, GTK apps), adb, bubblewrap and tmux for local sandboxes, git for SWE tasks.
# A debootstrapped base lists only the release suite: add its updates and security suites so
# versions match the host's (whose apt archive the build script mounts as a cache).
RUN set -eu; rm -f /etc/apt/apt.conf.d/docker-clean; \
    if [ -f /etc/apt/sources.list ] && ! grep -qs bookworm-updates /etc/apt/sources.list /etc/apt/sources.list.d/*; then \
      mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list); mirror=${mirror:-http://deb.debian.org/debian}; \
      echo "deb $mirror bookworm-updates main" >> /etc/apt/sources.list; \
      echo "deb ${mirror%/debian}/debian-security bookworm-security main" >> /etc/apt/sources.list; \
    fi; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends \
      python3 python3-venv ca-certificates curl git bubblewrap tmux procps chromium fonts-dejavu-core \
      xvfb openbox dbus-x11 at-spi2-core python3-pyatspi libatk-adaptor libgail-common xdotool zenity imagemagick \
      mousepad xterm x11-utils adb >/dev/null; \
    rm -rf /var/lib/apt/lists/*

WORKDIR /opt/trajforge
# Dependencies first, from pyproject.toml alone, so a code change does not reinstall them.
COPY pyproject.toml ./
COPY scripts/image-requirements.py scripts/
# The build script mounts the host's CA bundle at /run/host-ca.crt: where PyPI is reached
# through a TLS-inspecting proxy, pip must trust what the host trusts.
RUN if [ -s /run/host-ca.crt ]; then export PIP_CERT=/run/host-ca.crt; fi; \
    python3 -m venv "$VIRTUAL_ENV" && pip install -q --upgrade pip \
    && python scripts/image-requirements.py pyproject.toml "$EXTRAS" > /tmp/requirements.txt \
    && pip install -q -r /tmp/requirements.txt && rm /tmp/requirements.txt
# The published MCP servers, each in its own venv under .venv-mcp/ (where the collector looks).
COPY scripts/install-mcp-servers.sh scripts/
RUN if [ -s /run/host-ca.crt ]; then export PIP_CERT=/run/host-ca.crt; fi; PYTHON=/usr/bin/python3 bash scripts/install-mcp-servers.sh

COPY README.md trajforge.py ./
COPY schemas ./schemas
COPY llm ./llm
COPY sandboxes ./sandboxes
COPY collectors ./collectors
COPY formats ./formats
COPY pipelines ./pipelines
COPY training ./training
COPY simulate ./simulate
COPY serve ./serve
COPY openenv.yaml ./
COPY examples ./examples
COPY deploy ./deploy
# Bytecode in the image: a container writes none that outlives it, so each job would compile
# every module it imports again.
RUN if [ -s /run/host-ca.crt ]; then export PIP_CERT=/run/host-ca.crt; fi; pip install -q --no-deps -e . \
    && python -m compileall -q -j0 trajforge.py schemas llm sandboxes collectors formats pipelines training simulate serve >/dev/null \
    && trajforge --help >/dev/null

COPY --from=beam-boot /opt/beam-boot /opt/apache/beam
COPY scripts/image-entrypoint.sh /usr/local/bin/trajforge-entrypoint
RUN chmod +x /usr/local/bin/trajforge-entrypoint && mkdir -p /work /data
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/trajforge-entrypoint"]
CMD ["--help"]
