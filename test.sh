#!/usr/bin/env bash
# The test command: set everything up, then lint, type-check and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
# The tests alone need a browser (the web view is tested in headless Chromium): installed here, not for every start.
if ! command -v chromium >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "sandshell: installing chromium for the web view's tests (log: .cache/logs/apt-chromium.log)" >&2
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
    >.cache/logs/apt-chromium.log 2>&1 || { echo "sandshell: apt-get install chromium failed; see .cache/logs/apt-chromium.log" >&2; exit 1; }
fi
# ... and an sshd (tests/test_ssh_engine.py starts its own, on a free port, to reach an engine over ssh://)
if [ ! -x /usr/sbin/sshd ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "sandshell: installing openssh-server for the ssh engine's test (log: .cache/logs/apt-sshd.log)" >&2
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server; } \
    >.cache/logs/apt-sshd.log 2>&1 || { echo "sandshell: apt-get install openssh-server failed; see .cache/logs/apt-sshd.log" >&2; exit 1; }
fi
# ... and strace (tests/test_sandbox.py counts the agent's system calls from the host)
if ! command -v strace >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "sandshell: installing strace for the agent's tests (log: .cache/logs/apt-strace.log)" >&2
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace; } \
    >.cache/logs/apt-strace.log 2>&1 || { echo "sandshell: apt-get install strace failed; see .cache/logs/apt-strace.log" >&2; exit 1; }
fi
# One command a line: under `set -e` a failure inside an `a && b` list (not its last command) ends
# nothing, and a lint error went by with the tests green.
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
.venv/bin/pytest -p no:cacheprovider "$@"
