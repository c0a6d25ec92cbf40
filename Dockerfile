# The trajforge project image. Issue "scale out" extends it with the collectors' system
# packages (Chromium, Xvfb, adb, bubblewrap); for now: Python, trajforge and its extras.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
WORKDIR /opt/trajforge
COPY pyproject.toml README.md trajforge.py ./
COPY schemas ./schemas
COPY sandboxes ./sandboxes
COPY collectors ./collectors
COPY pipelines ./pipelines
COPY training ./training
RUN python3 -m pip install --no-cache-dir .
ENTRYPOINT ["trajforge"]
