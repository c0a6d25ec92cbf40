#!/usr/bin/env bash
# Build the project image (the top-level Dockerfile) with Podman or Docker: `make image`.
#   IMAGE=trajforge:latest            the tag
#   BASE_IMAGE=...                    the base (default: the offline debootstrapped root that
#                                     `trajforge sandboxes build` imports, if the engine has it,
#                                     else debian:bookworm-slim from a registry)
#   BEAM_BOOT_IMAGE=...               copy Beam's boot launcher from this image (a registry's
#                                     apache/beam_python3.11_sdk:<version>); default: none (offline)
#   ENGINE=podman|docker              default: podman if installed, else docker
#   IMAGE_EXTRAS=curate,web,mcp,search,android  the extras (the build arg EXTRAS)
# With Podman, the host's apt archive and a pip cache under the trajforge cache are mounted
# into the build, so a rebuild (or a first build on a machine whose apt cache holds the
# packages already) downloads little; Podman's layer cache makes a rebuild with nothing
# changed take seconds. Podman runs with the project's containers.conf (runc, cgroupfs).
# The host's CA bundle is mounted too: pip in the build trusts what pip on the host trusts.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-trajforge:latest}
EXTRAS=${IMAGE_EXTRAS:-curate,web,mcp,search,android}
ENGINE=${ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}
command -v "$ENGINE" >/dev/null || { echo "build-image: neither podman nor docker is installed (make system-deps)" >&2; exit 2; }
CACHE=${TRAJFORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trajforge}
args=()
if [ "$ENGINE" = podman ]; then
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/sandboxes/containers.conf}
  mkdir -p "$CACHE/image-pip"
  args+=(--layers --network=host -v "$CACHE/image-pip:/root/.cache/pip")
  ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
  [ -s "$ca" ] && args+=(-v "$(readlink -f "$ca"):/run/host-ca.crt:ro")
  if [ -d /var/cache/apt/archives ] && [ -w /var/cache/apt/archives ]; then
    mkdir -p /var/cache/apt/archives/partial
    args+=(-v /var/cache/apt/archives:/var/cache/apt/archives)
  fi
else
  args+=(--network=host)
fi
if [ -z "${BASE_IMAGE:-}" ]; then
  if "$ENGINE" image inspect localhost/trajforge-base:bookworm >/dev/null 2>&1; then
    BASE_IMAGE=localhost/trajforge-base:bookworm
  else
    BASE_IMAGE=debian:bookworm-slim
  fi
fi
BEAM_BOOT_IMAGE=${BEAM_BOOT_IMAGE:-$BASE_IMAGE}
echo "build-image: $ENGINE build -t $IMAGE from $BASE_IMAGE (extras $EXTRAS, Beam boot from $BEAM_BOOT_IMAGE)" >&2
exec "$ENGINE" build "${args[@]}" --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "BEAM_BOOT_IMAGE=$BEAM_BOOT_IMAGE" \
  --build-arg "EXTRAS=$EXTRAS" -t "$IMAGE" -f Dockerfile .
