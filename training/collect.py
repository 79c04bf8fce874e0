"""Run generated tasks with their solutions through real sessions and keep what the model would see.

Each task runs as `sandshell eval` runs one: a fresh sandbox, the setup, then a `Session` whose
backend replays the solution and records the messages the session built for every turn. The
check must fail before the session and pass after it, or the task is dropped (and counted).
The records are the chat exactly as the llama backend would send it: the fixed prompt the
settings choose, the goal, the intro and every observation as the session rendered it.

    python -m training.collect --seed 1 --n 400 --out .cache/train/data.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sandshell import config
from sandshell.model import actions
from sandshell.model.script import ScriptBackend
from sandshell.model.types import Message, Stats
from sandshell.runner import SessionSpec, open_session
from sandshell.session.control import Control
from training.families import Spec, generate

SETUP_TIMEOUT = 30.0


class RecordingBackend(ScriptBackend):
    """A script backend that keeps the messages of every turn it answers."""

    def __init__(self, lines: list[str], n_ctx: int) -> None:
        super().__init__(lines, n_ctx, source="training solution")
        self.calls: list[tuple[list[Message], str]] = []

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats]:
        line = self.lines[self.index] if self.index < len(self.lines) else ""
        self.calls.append((copy.deepcopy(messages), line))
        yield from super().stream(messages, params)


def settings_for(spec: Spec, variant: dict[str, str], workspace: str, sessions: str) -> config.Settings:
    environ = {"LLAMA_BACKEND": "script", "LLAMA_PROMPT": "short", **variant}
    s = config.load(env_file=None, environ=environ)
    return s.replace(
        sandbox=s.sandbox.replace(workspace=workspace, workspace_mode="copy"),
        session=s.session.replace(
            sessions_dir=sessions, approval=False, max_steps=len(spec.answers) + 1, max_seconds=120.0
        ),
    )


def canonical(answer: list[dict[str, Any]]) -> str:
    return actions.dumps(actions.parse(json.dumps(answer)))


def run_one(spec: Spec, variant: dict[str, str], goal_in_file: bool) -> dict[str, Any]:
    """One task through a real session; the record, with `ok` False and a reason when it is unusable."""
    lines = [canonical(a) for a in spec.answers]
    record: dict[str, Any] = {
        "family": spec.family,
        "goal": spec.goal,
        "variant": variant,
        "goal_in_file": goal_in_file,
    }
    with tempfile.TemporaryDirectory(prefix="sandshell-train-") as ws, tempfile.TemporaryDirectory() as rec:
        s = settings_for(spec, variant, ws, rec)
        backend = RecordingBackend(lines, s.model.n_ctx)
        goal = None if goal_in_file else spec.goal
        with open_session(SessionSpec(s, goal, backend, (), Control(), log=lambda _: None)) as session:
            box = session.sandbox
            setup = list(spec.setup) + [f"export {k}={v}" for k, v in spec.env.items()]
            if goal_in_file:
                setup.append(f"printf '%s\\n' {shlex.quote(spec.goal)} > /app/goal")
            for command in setup:
                r = box.execute(command, SETUP_TIMEOUT)
                if not r.ok:
                    return {**record, "ok": False, "why": f"setup failed: {command[:80]}: {r.output[-200:]}"}
            box.execute("cd /app", 5)
            if box.execute(f"cd /app && {spec.check}", SETUP_TIMEOUT).ok:
                return {**record, "ok": False, "why": "the check passes before the session"}
            box.execute("cd /app", 5)
            outcome = session.run()
            after = box.execute(f"cd /app && {spec.check}", SETUP_TIMEOUT)
            if not after.ok:
                return {
                    **record,
                    "ok": False,
                    "why": f"the check fails after the solution ({outcome.status}): {after.output[-200:]}",
                }
    if outcome.status != "done" or len(backend.calls) != len(lines):
        return {**record, "ok": False, "why": f"the session ended {outcome.status} after {len(backend.calls)} turns"}
    final, answer = backend.calls[-1]
    messages = [*final, {"role": "assistant", "content": answer}]
    # Every earlier turn's prompt must be a prefix of the last one: then one sequence teaches every turn.
    for prompt, said in backend.calls[:-1]:
        if messages[: len(prompt) + 1] != [*prompt, {"role": "assistant", "content": said}]:
            return {**record, "ok": False, "why": "the history changed between turns"}
    return {**record, "ok": True, "messages": messages, "train_from": 3}  # 0 system, 1 opening, 2 the intro


VARIANTS: list[tuple[float, dict[str, str]]] = [
    (0.7, {}),
    (0.3, {"LLAMA_ERROR_FIX": "true"}),
]


def plan(seed: int, n: int, more: bool = False) -> list[tuple[Spec, dict[str, str], bool]]:
    rng = random.Random(seed + 1)
    out = []
    for spec in generate(seed, n, more):
        variant = VARIANTS[0][1] if rng.random() < VARIANTS[0][0] else VARIANTS[1][1]
        out.append((spec, variant, rng.random() < 0.25))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.collect", description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--n", type=int, default=400, help="tasks to generate and run")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--out", required=True)
    p.add_argument("--more", action="store_true", help="add the families beyond the shipped adapter's (MORE)")
    args = p.parse_args(argv)
    jobs = plan(args.seed, args.n, args.more)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started, kept, dropped = time.monotonic(), 0, 0
    with out.open("w", encoding="utf-8") as f, ThreadPoolExecutor(args.parallel) as ex:
        for i, rec in enumerate(ex.map(lambda j: run_one(*j), jobs), 1):
            if rec["ok"]:
                kept += 1
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            else:
                dropped += 1
                print(f"dropped {rec['family']}: {rec['why']} ({rec['goal'][:80]})", file=sys.stderr)
            if i % 20 == 0:
                print(
                    f"{i}/{len(jobs)} run, {kept} kept, {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True
                )
    print(f"{kept} trajectories kept, {dropped} dropped, {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
