"""The model's world, read before each turn: its goal, its own notes and its own generation settings.

What changed since the last turn and what is wrong with the model's files come back with it;
a problem that lasts (a binary goal) is new only once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandshell.config import Settings
from sandshell.model import tuned
from sandshell.model.context import cut
from sandshell.model.genconfig import ModelConfig
from sandshell.resources import fixed_system_prompt
from sandshell.sandbox.protocol import ModelState
from sandshell.session.events import ConfigChanged, StateRead

SYSTEM_PART_CHARS = 4000  # of the model's own /app/system.md, and of the goal


@dataclass
class WorldView:
    """One read of the world: the prompt's system text, the sampling parameters, and what to tell."""

    system: str
    params: dict[str, Any]
    state: StateRead
    change: ConfigChanged | None
    new_problems: list[str]


class ModelWorld:
    """Reads the model's files from a ModelState and keeps what is needed to see changes."""

    def __init__(self, settings: Settings, goal: str | None = None) -> None:
        self.settings = settings
        self.goal_override = goal
        self.fixed_system = tuned.system_prompt() if tuned.short_prompt(settings.model) else fixed_system_prompt()
        self.config = ModelConfig(settings.model.max_tokens)
        self.last: dict[str, str] = {}
        self.reported: set[str] = set()  # problems with the model's files already told

    def read(self, state: ModelState) -> WorldView:
        s = self.settings
        goal = self.goal_override or state.goal.content or s.session.default_goal
        own = state.system.content or ""
        current = {"goal": goal, "system": own, "config": state.config.content or ""}
        changed = tuple(k for k, v in current.items() if self.last and self.last.get(k) != v)
        self.last = current
        outcome = self.config.update(state.config.content, state.config.error)
        problems = list(outcome.problems)
        for name, part in (("goal", state.goal), ("system.md", state.system)):
            if part.error and part.error != "missing":
                problems.append(f"/app/{name}: {part.error}")
            elif part.truncated:
                problems.append(f"/app/{name} is over {s.sandbox.state_limit:,} bytes; only its start is used")
        new = [p for p in problems if p not in self.reported]
        self.reported = set(problems)
        params = {**s.model.sampling, **outcome.params}
        params["max_tokens"] = min(params.get("max_tokens", s.model.max_tokens), s.model.max_tokens)
        system = self.fixed_system.rstrip() + f"\n\nYour goal: {cut(goal, SYSTEM_PART_CHARS)}\n"
        if own.strip():
            system += f"\nYour own notes (/app/system.md):\n{cut(own, SYSTEM_PART_CHARS)}\n"
        read = StateRead(goal, own, current["config"], changed, tuple(problems))
        change = ConfigChanged(*outcome.change) if outcome.change else None
        return WorldView(system, params, read, change, new)
