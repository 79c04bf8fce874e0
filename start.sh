#!/usr/bin/env bash
# Set up (first time: installs everything; later: a quick check) and start a sandshell session.
# Arguments pass through, e.g. ./start.sh --headless --goal "..." --max-steps 20 --timeout 300
set -euo pipefail
cd "$(dirname "$0")"
say() { printf 'sandshell: %s\n' "$*" >&2; }

for a in "$@"; do  # help needs no set-up once there is something to run it with
  case "$a" in -h|--help) [ -x .venv/bin/python ] && exec .venv/bin/python -m sandshell.cli "$@" ;; esac
done
headless=0
for a in "$@"; do case "$a" in --headless|-h|--help|prepare|serve|eval|rerun) headless=1 ;; esac; done
if [ $headless -eq 0 ] && { [ ! -t 0 ] || [ ! -t 1 ]; }; then
  say "the UI needs a terminal; run ./start.sh in one, or use ./start.sh --headless --goal \"...\""
  exit 2
fi
if ! command -v docker >/dev/null 2>&1; then
  say "Docker is not installed; install Docker Engine (https://docs.docker.com/engine/install/) and run again"
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  say "no Docker engine answers; start it (e.g. sudo systemctl start docker) and check that your user may use it"
  exit 1
fi
home="${SANDSHELL_HOME:-.}"
[ -f "$home/.env" ] || { mkdir -p "$home" && cp .env.example "$home/.env" && say "created $home/.env from .env.example"; }
./scripts/setup.sh --for-start
exec .venv/bin/python -m sandshell.cli "$@"
