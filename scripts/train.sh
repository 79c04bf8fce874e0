#!/usr/bin/env bash
# Rebuild the default model's adapter from scratch: generate tasks, run their solutions through real
# sandboxes, train a LoRA adapter on what the sessions sent, and install it with its provenance.
#   scripts/train.sh                      # the shipped configuration (seed 1)
#   SEED=2 TASKS=600 LAYERS=16 scripts/train.sh
# Needs Docker and ./start.sh's set-up (.venv); the training tools go into .cache/train-venv.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'train: %s\n' "$*" >&2; }
SEED="${SEED:-1}" TASKS="${TASKS:-1000}" LIMIT="${LIMIT:-0}" EPOCHS="${EPOCHS:-2}" MINUTES="${MINUTES:-60}"
LAYERS="${LAYERS:-30}" RANK="${RANK:-16}" LR="${LR:-5e-4}" THREADS="${THREADS:-2}" KEEP="${KEEP:-2}"
work=.cache/train
venv=.cache/train-venv
[ -x .venv/bin/python ] || { say "run ./start.sh --help once first: it sets up .venv"; exit 1; }
if [ ! -f "$venv/.installed" ] || [ training/requirements.txt -nt "$venv/.installed" ]; then
  say "installing the training tools into $venv (torch with its CUDA libraries: several GB)"
  .venv/bin/python -m venv "$venv"
  "$venv/bin/pip" install -q --progress-bar off -r training/requirements.txt
  touch "$venv/.installed"
fi
base="$(.venv/bin/python -c 'from sandshell.model.llama import default_model_path; print(default_model_path())')"
mkdir -p "$work"
start=$(date +%s)
say "running $TASKS generated tasks through real sandboxes (seed $SEED)"
PYTHONPATH="$PWD:$PWD/src" .venv/bin/python -m training.collect --seed "$SEED" --n "$TASKS" --out "$work/data.jsonl"
PYTHONPATH="$PWD:$PWD/src" .venv/bin/python -m training.overlap "$work/data.jsonl" tasks bench/heldout
say "training (at most $MINUTES minutes)"
PYTHONPATH="$PWD" "$venv/bin/python" -m training.train --data "$work/data.jsonl" --base "$base" --out "$work/adapter" \
  --seed "$SEED" --layers "$LAYERS" --rank "$RANK" --lr "$LR" --limit "$LIMIT" --epochs "$EPOCHS" --minutes "$MINUTES" --threads "$THREADS" --keep "$KEEP"
cp "$work/adapter/adapter.gguf" "$work/adapter/provenance.json" src/sandshell/model/tuned/
say "done in $(( ($(date +%s) - start) / 60 )) min: src/sandshell/model/tuned/adapter.gguf"
