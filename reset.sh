#!/usr/bin/env bash
# Return the workspace to its starter state; the old one is archived under workspace-archive/.
# --yes skips the question.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || ./scripts/setup.sh
exec .venv/bin/python -m sandshell.cli reset "$@"
