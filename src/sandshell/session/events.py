"""What a session emits, as it happens. Sinks (the TUI, the headless runner, the recorder) consume them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sandshell.model.actions import Action
from sandshell.model.types import PromptProgress as PromptProgress  # an event too: the prompt's evaluation
from sandshell.model.types import Stats
from sandshell.sandbox.protocol import Result
from sandshell.session.outcome import STATUSES, Outcome, Status


@dataclass(frozen=True)
class SessionStarted:
    session_id: str
    model: str
    profile: str
    workspace: str
    settings: dict[str, Any]


@dataclass(frozen=True)
class StateRead:
    """The model's world as read before a turn; `changed` names what differs from last turn."""

    goal: str
    system: str
    config: str
    changed: tuple[str, ...]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfigChanged:
    before: dict[str, Any]
    after: dict[str, Any]


@dataclass(frozen=True)
class TurnStarted:
    turn: int
    prompt_tokens: int
    limit: int
    n_ctx: int
    dropped_turns: int


@dataclass(frozen=True)
class ModelText:
    """A chunk of the model's answer as it is generated."""

    text: str


@dataclass(frozen=True)
class ModelReplied:
    text: str
    actions: tuple[Action, ...]
    error: str | None
    stats: Stats


@dataclass(frozen=True)
class ActionStarted:
    action: Action
    prompt: str  # the shell prompt before it, e.g. "0 root@sandbox:/app #"
    by_user: bool = False


@dataclass(frozen=True)
class ApprovalNeeded:
    """An action waits for the user to approve, edit or reject it (`answered`: a rerun's recorded
    verdict answers it at once, and nobody waits)."""

    action: Action
    prompt: str
    answered: bool = False


@dataclass(frozen=True)
class OutputChunk:
    stream: str
    data: str


@dataclass(frozen=True)
class ActionFinished:
    action: Action
    summary: str  # one line: how it ended
    result: Result | None = None
    ok: bool = True


@dataclass(frozen=True)
class Notice:
    """Something the user should know: a warning, an error, a hint delivered, a stuck model."""

    level: str  # info, warning, error
    text: str


@dataclass(frozen=True)
class Phase:
    """What the session is doing: thinking, running, paused, approval, done."""

    name: str


@dataclass(frozen=True)
class SessionEnded:
    """The last event of every session, emitted once by the session itself: its `Outcome`, flat."""

    status: str  # an outcome.Status
    result: str | None
    error: str | None
    turns: int
    seconds: float
    tokens_in: int = 0  # prompt tokens evaluated (not counting those reused from the cache)
    tokens_out: int = 0

    @classmethod
    def of(cls, o: Outcome) -> SessionEnded:
        return cls(o.status, o.result, o.error, o.turns, o.seconds, o.tokens_in, o.tokens_out)

    @property
    def outcome(self) -> Outcome:
        status: Status = self.status if self.status in STATUSES else "error"  # type: ignore[assignment]
        return Outcome(status, self.result, self.error, self.turns, self.seconds, self.tokens_in, self.tokens_out)

    def line(self) -> str:
        """How it ended, in one line: `session done: the result (the error) · 3 turns · 4.2s`."""
        return self.outcome.line()


Event = (
    SessionStarted
    | StateRead
    | ConfigChanged
    | TurnStarted
    | PromptProgress
    | ModelText
    | ModelReplied
    | ApprovalNeeded
    | ActionStarted
    | OutputChunk
    | ActionFinished
    | Notice
    | Phase
    | SessionEnded
)


class Sink(Protocol):
    """Receives every event, in order, on the session's thread; must return quickly."""

    def emit(self, event: Event) -> None: ...
