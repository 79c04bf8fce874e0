"""The session's seam to a sandbox, and how a session ends."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sandshell.sandbox.protocol import FileContent, ModelState, Output, Result


class SandboxLike(Protocol):
    def execute(
        self, command: str, timeout: float | None = None, on_output: Callable[[Output], None] | None = None
    ) -> Result: ...
    def read_file(self, path: str, limit: int | None = None) -> FileContent: ...
    def write_file(self, path: str, content: str, append: bool = False) -> int: ...
    def state(self) -> ModelState: ...


@dataclass
class Outcome:
    """How a session ended: the headless runner's `{status, result, error}`."""

    status: str
    result: str | None = None
    error: str | None = None
    turns: int = 0
    seconds: float = 0.0
