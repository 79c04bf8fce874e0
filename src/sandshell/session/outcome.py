"""How a session ended: the one type every front end reports from, and the ladder that turns an
exception into one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

from sandshell.errors import SandshellError

# done: the model said so. max_steps, timeout: a limit. stuck: the model repeated itself or kept
# answering in a shape that is not actions. quit: the user. cancelled: a client of the service.
# interrupted: the process running it stopped. error: anything else, in `error`.
Status = Literal["done", "max_steps", "timeout", "stuck", "quit", "cancelled", "interrupted", "error"]
STATUSES: tuple[Status, ...] = get_args(Status)


@dataclass(frozen=True)
class Outcome:
    """A session's ending: how (`status`), what it achieved (`result`), why it stopped short (`error`),
    and what it cost."""

    status: Status
    result: str | None = None
    error: str | None = None
    turns: int = 0
    seconds: float = 0.0
    tokens_in: int = 0  # prompt tokens evaluated (not counting those reused from the cache)
    tokens_out: int = 0
    recording: str | None = None  # the session's folder (events.jsonl, session.cast); None: never recorded

    @property
    def ok(self) -> bool:
        """The model reached its goal (it said `done`)."""
        return self.status == "done"

    @property
    def turns_said(self) -> str:
        return f"{self.turns} turn" + ("" if self.turns == 1 else "s")

    def line(self) -> str:
        """How it ended, in one line: `session done: the result (the error) · 3 turns · 4.2s`."""
        text = f"session {self.status}" + (f": {self.result}" if self.result else "")
        return text + (f" ({self.error})" if self.error else "") + f" · {self.turns_said} · {self.seconds:.1f}s"

    def replace(self, **changes: Any) -> Outcome:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class StartFailed(SandshellError):
    """A session that ended before it ran: its start failed (or was cancelled), as `outcome` says."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.error or f"the session ended {outcome.status} before it started")
        self.outcome = outcome


def outcome_of(error: BaseException) -> Outcome:
    """What an exception that ended a session means to its user: never raised further, never a traceback."""
    if isinstance(error, StartFailed):
        return error.outcome
    if isinstance(error, SandshellError):
        return Outcome("error", error=str(error))
    if isinstance(error, KeyboardInterrupt):
        return Outcome("quit", error="interrupted")
    return Outcome("error", error=f"sandshell failed unexpectedly ({type(error).__name__}: {error})")
