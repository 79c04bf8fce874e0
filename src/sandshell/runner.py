"""Putting a session together (one factory for the TUI, headless runs and tests), and `run_task`."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from sandshell import config, inert
from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.model.turn import Model, make_backend
from sandshell.model.types import Backend
from sandshell.sandbox.engine import new_session_id
from sandshell.sandbox.sandbox import Sandbox
from sandshell.session.control import Control
from sandshell.session.events import Event, ModelReplied, ModelText, Notice, SessionEnded, Sink
from sandshell.session.loop import Session
from sandshell.session.recorder import Recorder
from sandshell.session.transcript import render
from sandshell.session.types import Outcome, session_dir

LOG_LINES = 400


@dataclass
class Parts:
    """A ready session and what it is made of."""

    session: Session
    sandbox: Sandbox
    recorder: Recorder


@contextmanager
def open_session(
    settings: Settings,
    sinks: list[Sink],
    control: Control | None = None,
    goal: str | None = None,
    backend: Backend | None = None,
    log: Any = None,
    session_id: str | None = None,
) -> Iterator[Parts]:
    """Load the model, start the sandbox and the recorder; everything is cleaned up on exit."""
    session_id = session_id or new_session_id()
    say = log or inert.say
    recorder = Recorder(session_dir(settings, session_id), f"sandshell {session_id}", int(settings.cast_version),
                        settings.cast_idle_limit)  # fmt: skip
    started = False
    try:
        model = Model(backend or make_backend(settings), settings)
        with Sandbox(settings=settings, session_id=session_id, log=say) as sandbox:
            session = Session(settings, sandbox, model, [recorder, *sinks], control, session_id, goal)
            session.control.on_quit.append(sandbox.interrupt)
            started = True
            yield Parts(session, sandbox, recorder)
    except SandshellError as e:
        if not started:  # the recording says why it never began, and ends with its end event
            for event in (Notice("error", str(e)), SessionEnded("error", None, str(e), 0, 0.0)):
                with suppress(SandshellError):
                    recorder.emit(event)
        raise
    finally:
        recorder.close()


class LineLog:
    """A sink that keeps the transcript as plain lines (bounded) and can echo them to stderr."""

    def __init__(self, echo: bool = True) -> None:
        self.echo = echo
        self.lines: list[str] = []
        self._partial = ""

    def emit(self, event: Event) -> None:
        if isinstance(event, ModelText):
            return  # the whole answer comes with ModelReplied, on one line
        if isinstance(event, ModelReplied):
            said = inert.inert(" ".join(event.text.split())[:600])
            text = "model: " + said + "\n" + render(event, color=False).lstrip("\n")
        else:
            text = render(event, color=False)
        if not text:
            return
        if self.echo:
            sys.stderr.write(text)
            sys.stderr.flush()
        parts = (self._partial + text).split("\n")
        self._partial = parts.pop()
        self.lines.extend(parts)
        if len(self.lines) > LOG_LINES:
            del self.lines[: len(self.lines) - LOG_LINES]


def run_task(
    task: str,
    timeout: float = 300.0,
    max_iterations: int = 20,
    settings: Settings | None = None,
    read_only: bool = False,
    echo: bool = False,
    backend: Backend | None = None,
    control: Control | None = None,
    sinks: Sequence[Sink] = (),
    session_id: str | None = None,
    log: LineLog | None = None,
) -> dict[str, Any]:
    """Run one task headless; never raises. Returns `{status, result, error, log}` and the numbers:
    `turns`, `seconds`, `tokens_in` (prompt tokens evaluated), `tokens_out`, `session` (the
    recording's folder, None when the session never started). `log`: the transcript's sink, for a
    caller that reads its lines while the task runs (the HTTP service)."""
    log = log if log is not None else LineLog(echo=echo)
    folder: str | None = None
    try:
        s = settings or config.load()
        s = s.replace(max_steps=max_iterations, max_seconds=timeout, approval=False)  # nobody is there to approve
        if read_only:
            s = s.replace(workspace_mode="ro")
        with open_session(s, [log, *sinks], control or Control(), task, backend, log.lines.append, session_id) as parts:
            folder = str(parts.recorder.folder)
            outcome = parts.session.run()
            log.lines.insert(0, f"recording: {folder}")
    except SandshellError as e:
        outcome = Outcome("error", error=str(e))
    except KeyboardInterrupt:
        outcome = Outcome("quit", error="interrupted")
    except Exception as e:  # a bug, not a user error: still a result, never a traceback
        outcome = Outcome("error", error=f"sandshell failed unexpectedly ({type(e).__name__}: {e})")
    o = outcome
    numbers = {"turns": o.turns, "seconds": o.seconds, "tokens_in": o.tokens_in, "tokens_out": o.tokens_out}
    return {"status": o.status, "result": o.result, "error": o.error, "log": log.lines, **numbers, "session": folder}


__all__ = ["LineLog", "Parts", "open_session", "run_task"]
