#!/usr/bin/env bash
# The test command: set everything up, then lint, type-check and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
echo "== ruff" && .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "== mypy" && .venv/bin/mypy
echo "== pytest" && .venv/bin/pytest -p no:cacheprovider "$@"
