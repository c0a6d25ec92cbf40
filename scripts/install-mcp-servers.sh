#!/usr/bin/env bash
# The published MCP servers the MCP collector is tested against, each in its own virtual
# environment under .venv-mcp/<program> (as uvx would run them): mcp-server-sqlite is
# built on the 1.x SDK, the others on 2.x, so they cannot share one environment.
set -euo pipefail
PYTHON=${PYTHON:-python3}
ROOT=${MCP_VENVS:-.venv-mcp}
SERVERS=(
  "mcp-server-time|mcp-server-time==2026.10.19"
  "mcp-server-git|mcp-server-git==2026.10.19"
  "mcp-server-sqlite|mcp-server-sqlite==2025.4.25 mcp>=1.26,<2"
)
for entry in "${SERVERS[@]}"; do
  program=${entry%%|*}
  specs=${entry#*|}
  venv="$ROOT/$program"
  marker="$venv/.installed-$(echo "$specs" | tr -c 'A-Za-z0-9.=' '_')"
  [ -f "$marker" ] && continue
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q $specs
  "$venv/bin/$program" --help >/dev/null
  touch "$marker"
done
