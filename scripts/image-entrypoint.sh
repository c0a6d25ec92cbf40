#!/bin/sh
# The project image's entrypoint: trajforge's CLI, unless Beam started the container as an SDK
# worker (the runner passes --id=... --control_endpoint=...): then Beam's boot launcher, when
# the image was built with one (BEAM_BOOT_IMAGE, see the Dockerfile).
case "${1:-}" in
  --id=*|--semi_persist_dir=*|--provision_endpoint=*|--control_endpoint=*|--logging_endpoint=*|--artifact_endpoint=*)
    if [ -x /opt/apache/beam/boot ]; then exec /opt/apache/beam/boot "$@"; fi
    echo "trajforge image: started as a Beam SDK worker, but it has no /opt/apache/beam/boot (rebuild with BEAM_BOOT_IMAGE)" >&2
    exit 2 ;;
esac
exec trajforge "$@"
