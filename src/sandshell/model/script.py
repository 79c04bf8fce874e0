"""The script backend: answers read from a JSONL file (replay, rerun, demos and tests)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sandshell.errors import ModelError
from sandshell.model.types import Message, Stats


class ScriptBackend:
    """Replays actions from a JSONL file (one action, or one list of actions, a line)."""

    name = "script"
    constrained = True

    def __init__(self, lines: list[str], n_ctx: int = 4096, source: str = "script") -> None:
        self.lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
        self.n_ctx = n_ctx
        self.index = 0
        self.description = f"{source} ({len(self.lines)} answers)"

    @classmethod
    def from_file(cls, path: str | Path, n_ctx: int = 4096) -> ScriptBackend:
        p = Path(path)
        try:
            return cls(p.read_text(encoding="utf-8").splitlines(), n_ctx, source=p.name)
        except OSError as e:
            raise ModelError(
                f"cannot read the action script {p}: {e.strerror}; set LLAMA_SCRIPT to a JSONL file"
            ) from None

    def count(self, messages: list[Message]) -> int:
        return sum(len(m["content"]) for m in messages) // 4 + 4 * len(messages)

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats]:
        start = time.perf_counter()
        if self.index < len(self.lines):
            line = self.lines[self.index].strip()
        else:
            line = json.dumps([{"done": "the script has no more actions"}])
        text = line if line.startswith("[") else f"[{line}]"
        yield text
        self.index += 1  # only an answer taken whole counts: one dropped by a pause is given again
        yield Stats(seconds=time.perf_counter() - start)  # no tokens: no model evaluated or wrote any
