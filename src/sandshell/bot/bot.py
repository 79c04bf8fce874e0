"""A bot: a type, a permission, a prompt, a model and an environment; `run(task)` carries a task out.

`run` drives the same session loop as the terminal UI and headless runs (recorded in the
sessions folder), with the bot's own system prompt: the action format, its role, its tools.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandshell import config
from sandshell.bot.environment import Environment
from sandshell.bot.kinds import BotType, Permission
from sandshell.bot.llm import LLM
from sandshell.bot.tools import ToolDefinition, usage_prompt
from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.runner import LineLog, SessionSpec, run_session
from sandshell.sandbox.protocol import FileContent, ModelState
from sandshell.sandbox.sandbox import Sandbox
from sandshell.session.control import Control
from sandshell.session.outcome import Outcome, outcome_of
from sandshell.session.world import ModelWorld, WorldView

log = logging.getLogger(__name__)

BROWSER = ToolDefinition(
    installation_command="command -v lynx >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
    "apt-get install -y -qq --no-install-recommends lynx >/dev/null && rm -rf /var/lib/apt/lists/*; }",
    verification_command="lynx -version | head -1",
    usage_instructions="lynx -dump -nolist URL prints a web page as text (file:///path works for local files).",
    name="lynx",
)

BASE_PROMPT = """You work inside a Linux shell (Debian, bash) in a sandboxed container, only through actions;
their results come back to you as observations.

Answer every turn with a JSON list of 1 to 4 actions and nothing else. Each action has an
optional "comment" (your short reasoning) first, then exactly one of:
- {{"bash": "ls -la"}} runs a command in one persistent bash (cd and exports persist); add
  "timeout": 60 for a slow command.
- {{"read": "/app/notes.md"}} shows a file.
- {{"write": "/app/notes.md", "content": "text"}} creates or replaces a file.
- {{"done": "the result"}} ends the task: put the answer or what you did in it.
Example answer: [{{"comment": "see the files", "bash": "ls -la /app"}}]

The folder you work on is /app{access}. Commands are killed after their timeout; stdin is
empty, so use non-interactive flags. Long output is cut to its head and tail. If a command
fails, read its error and try another way."""


class BotWorld(ModelWorld):
    """The bot's world: its own system prompt; the mounted folder's system.md and config.json are the
    user's files, not the model's notes and settings, so they are not read as such."""

    def __init__(self, settings: Settings, goal: str, prompt: str) -> None:
        super().__init__(settings, goal)
        self.fixed_system = prompt

    def read(self, state: ModelState) -> WorldView:
        missing = FileContent("", None, error="missing")
        return super().read(dataclasses.replace(state, system=missing, config=missing))


class Bot:
    """`Bot(name, bot_type, permission, ...)`; `run(task, timeout, max_iterations)` returns
    `{status, result, error, log}`: status is True when the model said it finished (`done`); the
    log says how the run ended and holds its transcript (bounded)."""

    def __init__(
        self,
        name: str,
        bot_type: BotType = BotType.CUSTOM,
        permission: Permission = Permission.READ_ONLY,
        system_prompt: str | None = None,
        llm: LLM | None = None,
        environment: Environment | None = None,
        additional_tools: Sequence[ToolDefinition] = (),
        folder_to_mount: str | Path | None = None,
        settings: Settings | None = None,
    ) -> None:
        if not isinstance(bot_type, BotType):
            raise SandshellError(f"bot_type must be a BotType (READING, WRITING, BROWSING, CUSTOM), not {bot_type!r}")
        if not isinstance(permission, Permission):
            raise SandshellError(f"permission must be Permission.READ_ONLY or READ_WRITE, not {permission!r}")
        self.name = name
        self.bot_type = bot_type
        self.permission = permission
        self.settings = settings or config.load()
        self.tools = ((BROWSER,) if bot_type is BotType.BROWSING else ()) + tuple(additional_tools)
        if environment is not None and not set(self.tools) <= set(environment.tools):
            raise SandshellError("the environment given to the bot lacks its tools; pass them to the Environment")
        self.role = (system_prompt or bot_type.default_prompt).strip()
        self.llm = llm
        self.environment = environment
        self.folder = folder_to_mount
        self._lock = threading.Lock()

    @property
    def profile(self) -> Any:
        """BROWSING needs the network (the standard profile); the others follow the settings."""
        return "standard" if self.bot_type is BotType.BROWSING else self.settings.sandbox.profile

    def system_prompt(self, tools: Sequence[ToolDefinition]) -> str:
        given = self.environment.permission if self.environment is not None else self.permission
        ro = given is Permission.READ_ONLY  # a given environment's permission is the one in force
        access = " (read-only: you cannot change it; write scratch files in /tmp)" if ro else ""
        parts = [BASE_PROMPT.format(access=access), f"Your role: {self.role}", usage_prompt(tools)]
        return "\n\n".join(p for p in parts if p) + "\n"

    def run(self, task: str, timeout: float = 300.0, max_iterations: int = 20) -> dict[str, Any]:
        """Carry `task` out; never raises. The environment is the one given, or a fresh one for this run."""
        lines = LineLog(echo=False)
        with self._lock:
            started = time.monotonic()
            try:
                outcome = self._run(task, timeout, max_iterations, lines, started)
            except (Exception, KeyboardInterrupt) as e:
                if not isinstance(e, SandshellError | KeyboardInterrupt):
                    log.exception("the bot %s failed unexpectedly", self.name)
                outcome = outcome_of(e)
        took = time.monotonic() - started
        head = f"{self.name}: {outcome.status} after {outcome.turns} turn(s), {took:.1f}s"
        lines.lines.insert(0, head + (f": {outcome.error}" if outcome.error else ""))
        log.info("%s", lines.lines[0])
        return {
            "status": outcome.ok,
            "result": outcome.result,
            "error": outcome.error,
            "log": lines.lines,
        }

    def _run(self, task: str, timeout: float, max_iterations: int, lines: LineLog, started: float) -> Outcome:
        if not isinstance(task, str) or not task.strip():
            return Outcome("error", error="the task is empty; say what the bot should do")
        if not 0 < timeout < float("inf") or max_iterations < 1:
            return Outcome(
                "error", error="timeout must be a finite number of seconds above 0, max_iterations 1 or more"
            )
        env = self.environment or Environment(self.folder, self.permission, self.tools, self.settings, self.profile)
        llm = self.llm or LLM(self.role, self.settings.model, timeout_cap=self.settings.sandbox.max_exit_timeout)
        self.llm = llm  # the model is loaded once per bot
        try:
            env.start()
            assert env.sandbox is not None
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                return Outcome("timeout", error=f"starting took longer than the whole timeout ({timeout:g}s)")
            s = env.settings.replace(
                sandbox=env.sandbox.settings,
                session=env.settings.session.replace(max_steps=max_iterations, max_seconds=left, approval=False),
            )
            return self._session(s, env.sandbox, llm, task, env.tools, lines)
        finally:
            if self.environment is None:
                env.kill()

    def _session(
        self, s: Settings, sandbox: Sandbox, llm: LLM, task: str, tools: Sequence[ToolDefinition], lines: LineLog
    ) -> Outcome:
        world = BotWorld(s, task, self.system_prompt(tools))
        spec = SessionSpec(
            s, task, llm.backend, [lines], Control(), world, sandbox=sandbox, title=f"sandshell bot {self.name}"
        )
        outcome = run_session(spec)
        if outcome.recording:
            lines.lines.insert(0, f"recording: {outcome.recording}")
        return outcome


__all__ = ["BROWSER", "Bot", "BotWorld"]
