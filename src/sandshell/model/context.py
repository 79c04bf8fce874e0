"""The prompt: system text, goal and history, always fitting `n_ctx - max_tokens - margin`.

Each observation is cut to a budget derived from `n_ctx` (head and tail, with a line saying
what was left out and where the full output is). When the history no longer fits, older
observations shrink to one line (in batches, so the prompt's prefix, and llama.cpp's KV cache,
stay stable between turns), then the oldest turns are dropped. The system prompt, the goal,
the last turn and the last error are always kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sandshell.model.actions import Action
from sandshell.model.types import Message
from sandshell.sandbox.protocol import Result

CHARS_PER_TOKEN = 3.5
LOW_WATER = 0.6  # after a shrink the prompt takes at most this share of the room


def cut(text: str, limit: int, where: str | None = None) -> str:
    """Keep the head and tail of `text` within about `limit` characters."""
    if len(text) <= limit:
        return text
    head = int(limit * 0.6)
    tail = max(0, limit - head)
    left_out = len(text) - head - tail
    place = f"; full output in {where}" if where else ""
    return f"{text[:head]}\n[... {left_out:,} characters left out{place} ...]\n{text[len(text) - tail :]}"


@dataclass
class Step:
    """One action and what came of it."""

    action: Action
    observation: str  # full text (already cut to the observation budget)
    brief: str  # one line, for when the history must shrink
    failed: bool = False


@dataclass
class Turn:
    """One answer of the model and its observations."""

    answer: str
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # config problems, repeat warnings, hints
    compact: bool = False

    @property
    def failed(self) -> bool:
        return any(s.failed for s in self.steps)

    def observation(self) -> str:
        parts = [s.brief if self.compact else s.observation for s in self.steps]
        parts += [f"[note] {n}" for n in self.notes]
        return "\n\n".join(parts) if parts else "(no observation)"


def observe_command(result: Result, limit_chars: int) -> str:
    """Render a command's result for the model (returns the observation text)."""
    lines = [f"$ {result.command}"]
    body = result.output
    if body:
        lines.append(cut(body, limit_chars, result.spill_path).rstrip("\n"))
    if result.truncated and result.spill_path:
        lines.append(f"[output was {result.output_bytes:,} bytes; all of it is in {result.spill_path}]")
    failed = not result.ok
    if failed and result.stderr_tail and result.stderr_tail.strip() not in body[-len(result.stderr_tail) - 200 :]:
        lines.append("stderr (end): " + result.stderr_tail[-600:].rstrip())
    if failed or result.restarted or result.notice:
        lines.append(f"[{result.status_line()}]")
    lines.append(result.prompt())
    return "\n".join(lines)


def brief_command(result: Result) -> str:
    size = f"{result.output_bytes:,} bytes" if result.output_bytes else "no output"
    line = f"$ {_one_line(result.command)} -> {result.status_line()}, {size}"
    if not result.ok and result.stderr_tail:
        line += " | " + _one_line(result.stderr_tail[-160:])
    return line


def _one_line(text: str, width: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass
class Context:
    """The conversation so far, and the rules to fit it into the window."""

    n_ctx: int
    max_tokens: int
    margin: int
    count: Callable[[list[Message]], int]
    turns: list[Turn] = field(default_factory=list)
    dropped: int = 0
    observation_tokens: int = 0  # a cap on one observation (0: none but the room's fifth)

    @property
    def limit(self) -> int:
        return self.n_ctx - self.max_tokens - self.margin

    @property
    def low_water(self) -> int:
        return int(self.limit * LOW_WATER)

    @property
    def observation_chars(self) -> int:
        """Characters one observation may take: a fifth of the room left for history, or less if capped."""
        room = int((self.n_ctx - self.max_tokens) / 5 * CHARS_PER_TOKEN)
        cap = int(self.observation_tokens * CHARS_PER_TOKEN) if self.observation_tokens > 0 else room
        return max(400, min(room, cap))

    def messages(self, system: str, opening: str) -> tuple[list[Message], int]:
        """The messages for the next turn and their token count; shrinks history until they fit."""
        msgs = self._render(system, opening)
        used = self.count(msgs)
        if used > self.limit:
            # Shrink well below the limit, so that the next turns fit without touching the history
            # again: every shrink moves the prompt's prefix and costs a re-evaluation of the cache.
            while used > self.low_water and self._shrink():
                msgs = self._render(system, opening)
                used = self.count(msgs)
        if used > self.limit:
            # Only the system prompt and the last turn are left and still too long: cut them.
            overflow = int((used - self.limit) * CHARS_PER_TOKEN) + 200
            msgs[0]["content"] = cut(msgs[0]["content"], max(400, len(msgs[0]["content"]) - overflow))
            if len(msgs) > 2:
                last = msgs[-1]["content"]
                msgs[-1]["content"] = cut(last, max(200, len(last) - overflow))
            used = self.count(msgs)
        return msgs, used

    def _render(self, system: str, opening: str) -> list[Message]:
        msgs: list[Message] = [{"role": "system", "content": system}, {"role": "user", "content": opening}]
        if self.dropped:
            msgs[1]["content"] += f"\n[{self.dropped} earlier turn(s) were dropped to fit the context window]"
        for turn in self.turns:
            msgs.append({"role": "assistant", "content": turn.answer})
            msgs.append({"role": "user", "content": turn.observation()})
        return msgs

    def _shrink(self) -> bool:
        """One step of shrinking; False when nothing more can go."""
        full = [t for t in self.turns[:-1] if not t.compact]
        if full:
            for t in full[: max(1, (len(full) + 1) // 2)]:  # half at once keeps the prefix stable longer
                t.compact = True
            return True
        last_error = max((i for i, t in enumerate(self.turns) if t.failed), default=-1)
        droppable = [i for i in range(len(self.turns) - 1) if i != last_error]
        if not droppable:
            return False
        gone = set(droppable[: max(1, len(droppable) // 4)])
        self.turns = [t for i, t in enumerate(self.turns) if i not in gone]
        self.dropped += len(gone)
        return True
