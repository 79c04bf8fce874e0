"""Building a session: one spec, one assembler for every front end (the TUI, headless runs, the
Bot, the service's tasks and conversations, eval, rerun), and `run_task`."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from sandshell import config, safe_text
from sandshell.config import Settings
from sandshell.model.turn import Model, make_backend
from sandshell.model.types import Backend
from sandshell.sandbox.engine import new_session_id
from sandshell.sandbox.sandbox import Sandbox
from sandshell.session.control import Control
from sandshell.session.events import Event, ModelReplied, ModelText, SessionEnded, Sink
from sandshell.session.loop import Lifecycle, Session
from sandshell.session.outcome import Outcome, StartFailed, outcome_of
from sandshell.session.recorder import Recorder
from sandshell.session.transcript import render
from sandshell.session.types import session_dir
from sandshell.session.world import ModelWorld

LOG_LINES = 400
LINE_CHARS = 2000  # of one kept line (a line of output may be megabytes)
FULL = "\n[sandshell: the transcript reached SANDSHELL_RECORDING_LIMIT; what follows is not shown until the end]\n"


@dataclass
class SessionSpec:
    """Everything one session is made of; `open_session` builds it."""

    settings: Settings
    goal: str | None = None  # None: the model reads /app/goal
    backend: Backend | None = None  # None: made from the settings
    sinks: Sequence[Sink] = ()  # besides the recorder, which every session has
    control: Control | None = None
    world: ModelWorld | None = None  # None: the model's world is read from /app
    session_id: str | None = None
    sandbox: Sandbox | None = None  # a running sandbox to use and leave running; None: a new one
    title: str = "sandshell"  # the recording's title
    log: Callable[[str], None] | None = None  # start-up progress (building the image)


@contextmanager
def open_session(spec: SessionSpec) -> Iterator[Session[Sandbox]]:
    """Load the model, start the sandbox and the recorder, and build the session; all cleaned up on
    exit. A start that fails is said to every sink (its error, the end) and raised as StartFailed;
    it leaves no session folder behind unless the caller named it (`session_id`: the service reads
    a task's folder, where the recording says why it never began)."""
    s = spec.settings
    named = spec.session_id is not None
    session_id = spec.session_id or (spec.sandbox.session_id if spec.sandbox else new_session_id())
    recorder = Recorder(
        session_dir(s.session, session_id),
        f"{spec.title} {session_id}",
        int(s.session.cast_version),
        s.session.cast_idle_limit,
        s.session.recording_limit,
    )
    sinks: list[Sink] = [recorder, *spec.sinks]
    life = Lifecycle(sinks, session_id, s)
    control = spec.control or Control(approval=s.session.approval)
    never_ran = False
    try:
        model = Model(spec.backend or make_backend(s.model), s.model)
        box: AbstractContextManager[Sandbox] = (
            nullcontext(spec.sandbox)
            if spec.sandbox is not None
            else Sandbox(settings=s.sandbox, recording=s.session, session_id=session_id, log=spec.log or safe_text.say)
        )
        with box as sandbox:
            session = Session(
                s, sandbox, model, sinks, control, session_id, spec.goal, spec.world, life, recorder.folder
            )
            control.on_quit.append(sandbox.interrupt)
            yield session
    except (Exception, KeyboardInterrupt) as e:
        if life.outcome is None:  # it never ran: every sink still hears why, and the end
            never_ran = True
            failed = outcome_of(e).replace(recording=str(recorder.folder) if named else None)
            if control.quitting:  # stopped while it started: it ends as the quit said, not as a failure
                failed = failed.replace(status=control.ending[0], error=control.ending[1])
            life.end(failed)  # (its end says the error: once)
            if not isinstance(e, KeyboardInterrupt):
                raise StartFailed(failed) from e
        raise
    finally:
        recorder.close()
        if never_ran and not named:  # nothing ran: no folder to find later with nothing in it
            shutil.rmtree(recorder.folder, ignore_errors=True)


def run_session(spec: SessionSpec) -> Outcome:
    """Build the session, run it to its end and clean up; never raises."""
    try:
        with open_session(spec) as session:
            return session.run()
    except (Exception, KeyboardInterrupt) as e:
        return outcome_of(e)


class LineLog:
    """A sink that keeps the transcript as plain lines (bounded) and can echo them to stderr, at most
    `limit` characters of it (SANDSHELL_RECORDING_LIMIT; 0: no limit) and then the end."""

    def __init__(self, echo: bool = True, limit: int = 0) -> None:
        self.echo, self.limit, self.echoed = echo, limit, 0
        self.lines: list[str] = []
        self._partial = ""

    def emit(self, event: Event) -> None:
        if isinstance(event, ModelText):
            return  # the whole answer comes with ModelReplied, on one line
        if isinstance(event, ModelReplied):
            said = safe_text.visible(" ".join(event.text.split())[:600])
            text = "model: " + said + "\n" + render(event, color=False).lstrip("\n")
        else:
            text = render(event, color=False)
        if not text:
            return
        if self.echo:
            self._echo(text, isinstance(event, SessionEnded))
        parts = (self._partial + text).split("\n")
        self._partial = parts.pop()[:LINE_CHARS]
        self.lines.extend(p if len(p) <= LINE_CHARS else p[:LINE_CHARS] + "…" for p in parts)
        if len(self.lines) > LOG_LINES:
            del self.lines[: len(self.lines) - LOG_LINES]

    def _echo(self, text: str, end: bool) -> None:
        if self.limit and not end and self.echoed + len(text) > self.limit:
            if self.echoed > self.limit:  # said so already
                return
            text, self.echoed = FULL, self.limit + 1
        else:
            self.echoed += len(text)
        sys.stderr.write(text)
        sys.stderr.flush()


def run_headless(
    task: str,
    timeout: float,
    max_iterations: int,
    settings: Settings | None = None,
    read_only: bool = False,
    backend: Backend | None = None,
    control: Control | None = None,
    sinks: Sequence[Sink] = (),
    session_id: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Outcome:
    """Run one task with nobody there to approve, within `timeout` seconds and `max_iterations`
    turns; never raises."""
    try:
        s = settings or config.load()
    except (Exception, KeyboardInterrupt) as e:
        return outcome_of(e)
    s = s.replace(session=s.session.replace(max_steps=max_iterations, max_seconds=timeout, approval=False))
    if read_only:
        s = s.replace(sandbox=s.sandbox.replace(workspace_mode="ro"))
    return run_session(SessionSpec(s, task, backend, sinks, control or Control(), session_id=session_id, log=log))


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
) -> dict[str, Any]:
    """Run one task headless; never raises. Returns `{status, result, error, log}` and the numbers:
    `turns`, `seconds`, `tokens_in` (prompt tokens evaluated), `tokens_out`, `session` (the
    recording's folder; None when the settings could not be read)."""
    log = LineLog(echo=echo, limit=(settings or Settings()).session.recording_limit)
    o = run_headless(
        task,
        timeout,
        max_iterations,
        settings,
        read_only,
        backend,
        control,
        [log, *sinks],
        session_id,
        log.lines.append,
    )
    if o.recording:
        log.lines.insert(0, f"recording: {o.recording}")
    numbers = {"turns": o.turns, "seconds": o.seconds, "tokens_in": o.tokens_in, "tokens_out": o.tokens_out}
    return {
        "status": o.status,
        "result": o.result,
        "error": o.error,
        "log": log.lines,
        **numbers,
        "session": o.recording,
    }


__all__ = ["LineLog", "SessionSpec", "open_session", "run_headless", "run_session", "run_task"]
