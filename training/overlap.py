"""How much of an eval suite the training data holds: shared goals, shared commands, n-gram overlap.

    python -m training.overlap .cache/train/data.jsonl tasks bench/heldout

A goal or a command shared verbatim with the suite fails the check (exit 1). The n-gram figure
is, per suite goal, the share of its word 5-grams found in any training goal (the mean and the
worst task are printed): templates teach a skill, and a high figure would mean they copy a task.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from sandshell.eval.task import load_tasks

N = 5


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_./-]+", text.lower())


def grams(text: str, n: int = N) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def commands(messages: list[dict[str, Any]]) -> set[str]:
    out = set()
    for m in messages:
        if m["role"] != "assistant":
            continue
        for action in json.loads(m["content"]):
            for key in ("bash", "write"):
                if key in action:
                    out.add(action[key].strip())
    return out


def report(data: Path, suites: list[str]) -> tuple[list[str], list[str]]:
    records = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    goals = {" ".join(words(r["goal"])) for r in records}
    train_grams: set[tuple[str, ...]] = set().union(*(grams(r["goal"]) for r in records))
    train_cmds: set[str] = set().union(*(commands(r["messages"]) for r in records))
    lines, shared = [], []
    for suite in suites:
        tasks = load_tasks([suite])
        shares = []
        for t in tasks:
            if " ".join(words(t.goal)) in goals:
                shared.append(f"{suite}/{t.name}: goal")
            for answer in t.solution:
                for action in answer if isinstance(answer, list) else [answer]:
                    for key in ("bash", "write"):
                        if key in action and action[key].strip() in train_cmds:
                            shared.append(f"{suite}/{t.name}: command {action[key]!r}")
            g = grams(t.goal)
            shares.append((len(g & train_grams) / len(g) if g else 0.0, t.name))
        mean = sum(s for s, _ in shares) / max(1, len(shares))
        worst = max(shares, default=(0.0, "-"))
        lines.append(
            f"{suite}: {len(tasks)} tasks; {N}-gram overlap of goals mean {mean:.1%}, worst {worst[0]:.1%} ({worst[1]})"
        )
    return lines, shared


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m training.overlap DATA.jsonl SUITE [SUITE ...]", file=sys.stderr)
        return 2
    lines, shared = report(Path(args[0]), args[1:])
    print("\n".join(lines))
    for s in shared:
        print(f"shared with the training data: {s}")
    return 1 if shared else 0


if __name__ == "__main__":
    sys.exit(main())
