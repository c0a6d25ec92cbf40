#!/usr/bin/env bash
# Debian packages trajforge's sandboxes need (Podman serving the Docker API, runc,
# debootstrap for offline images, bubblewrap for the local backend, tmux for shells) and
# Chromium for web episodes (Playwright drives it; it cannot download its own browser here),
# git for the SWE tasks and the MCP git server; a desktop for OS episodes (Xvfb, openbox,
# D-Bus, AT-SPI with the GTK bridge, Debian's pyatspi, xdotool, ImageMagick, GTK apps); the
# adb server for Android episodes (real devices, emulators, or the shipped simulator); Slurm
# and MUNGE for the Slurm array's test and benchmark (tests/deploy/slurm_cluster.py runs its
# own munged, slurmctld and slurmd; their services are not started or needed).
# Idempotent and quick when everything is present; `make test` and `make demo` call it.
set -euo pipefail
PKGS=(podman runc debootstrap bubblewrap tmux curl ca-certificates chromium git
      xvfb openbox dbus-x11 at-spi2-core python3-pyatspi libatk-adaptor libgail-common xdotool zenity imagemagick mousepad xterm x11-utils adb
      slurm-wlm munge)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root (or sudo) to apt-get install ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "installing Debian packages: ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
