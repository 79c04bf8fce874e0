#!/usr/bin/env bash
# The test command: set everything up, then lint, type-check and run the whole suite.
# `./test.sh --unit`: the unit tier alone (no Docker, model, network or browser; under a minute).
set -euo pipefail
cd "$(dirname "$0")"
if [ "${1:-}" = "--unit" ]; then
  shift
  ./scripts/setup.sh --python-only
  .venv/bin/ruff check .
  .venv/bin/ruff format --check .
  .venv/bin/mypy
  exec .venv/bin/pytest -p no:cacheprovider -m unit -n 2 "$@"
fi
./scripts/setup.sh
# What the tests alone need, installed here, not for every start: `tool COMMAND PACKAGE WHY`.
tool() {
  command -v "$1" >/dev/null && return 0
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "sandshell: installing $2 $3 (log: .cache/logs/apt-$2.log)" >&2
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2"; } \
    >".cache/logs/apt-$2.log" 2>&1 || { echo "sandshell: apt-get install $2 failed; see .cache/logs/apt-$2.log" >&2; exit 1; }
}
tool chromium chromium "for the web view's tests (headless Chromium)"
tool /usr/sbin/sshd openssh-server "for the ssh engine's test (tests/sandbox/test_ssh_engine.py starts its own sshd)"
tool strace strace "for the agent's tests (tests/sandbox/test_sandbox.py counts its system calls from the host)"
# One command a line: under `set -e` a failure inside an `a && b` list (not its last command) ends
# nothing, and a lint error went by with the tests green.
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
# Two workers, a test module to each at a time (a module shares its sandbox); the slowest tests listed.
.venv/bin/pytest -p no:cacheprovider -n 2 --dist loadfile --durations=15 "$@"
