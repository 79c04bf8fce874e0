"""Tasks: a first-come-first-served queue, SANDSHELL_MAX_SESSIONS worker threads, each task its own sandbox.

A task's workspace is a fresh folder, `SESSIONS_DIR/<id>/workspace`, laid out with the starter
files (goal, system.md, config.json) and mounted at /app as the task asks (rw, ro or copy); the
server's own workspace is never given to an API task. What the model wrote stays there.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.model.genconfig import STARTER
from sandshell.runner import LineLog, run_headless
from sandshell.sandbox import engine
from sandshell.service.models import Models
from sandshell.service.store import Store, TaskRecord
from sandshell.session.control import Control
from sandshell.session.events import Event, ModelReplied, Sink, TurnStarted
from sandshell.session.outcome import outcome_of
from sandshell.workspace import init_workspace

QUEUE_LIMIT = 200  # tasks waiting at once


class Busy(SandshellError):
    """Too much is waiting already."""


@dataclass
class StreamWaker:
    """A sink that tells the event streams of a task that its log grew."""

    notify: Callable[[str], None]
    task_id: str

    def emit(self, event: Event) -> None:
        self.notify(self.task_id)


@dataclass
class Progress:
    """A sink that keeps a running task's numbers live in its record (turns, tokens), and saves the
    record at each turn so a server that dies keeps what the task ran."""

    manager: TaskManager
    record: TaskRecord

    def emit(self, event: Event) -> None:
        if isinstance(event, TurnStarted):
            self.manager.progress(self.record, turns=event.turn)
        elif isinstance(event, ModelReplied):
            evaluated = event.stats.prompt_tokens - event.stats.cached_tokens
            self.manager.progress(self.record, tokens_in=evaluated, tokens_out=event.stats.completion_tokens)


def place(settings: Settings, record: TaskRecord) -> Settings:
    """Where and how a task's session runs: its own workspace, its request's mode, profile and model
    settings, on the engine of SANDSHELL_DOCKER_HOSTS running the fewest sessions (or the one
    configured when that list is empty; an engine elsewhere gets the workspace as a copy)."""
    req = record.request
    sessions = settings.session.path(settings.session.sessions_dir)
    s = settings.replace(
        sandbox=engine.least_loaded(settings.sandbox).replace(
            workspace=str(sessions / record.id / "workspace"),
            workspace_mode=req.get("workspace_mode") or settings.sandbox.workspace_mode,
            profile=req.get("profile") or settings.sandbox.profile,
        ),
        session=settings.session.replace(sessions_dir=str(sessions)),
    )
    model = req.get("model") or {}
    if model:
        sampling = {k: v for k, v in model.items() if k != "max_tokens" and v is not None}
        s = s.replace(model=s.model.replace(sampling={**s.model.sampling, **sampling}))
        if model.get("max_tokens"):
            s = s.replace(model=s.model.replace(max_tokens=min(int(model["max_tokens"]), settings.model.max_tokens)))
    return s


class TaskManager:
    """Accepts tasks, runs them in order, at most `max_sessions` at once; cancels; lists."""

    def __init__(self, settings: Settings, store: Store, models: Models, notify: Callable[[str], None]) -> None:
        self.settings = settings
        self.store = store
        self.models = models
        self.notify = notify
        self.tasks: dict[str, TaskRecord] = {r.id: r for r in store.recover()}
        for r in self.tasks.values():
            r.log = []  # kept on disk; read back for one task when asked
        waiting = sorted((r for r in self.tasks.values() if r.status == "queued"), key=lambda r: r.created)
        self.queue: deque[str] = deque(r.id for r in waiting)  # in the order they came (ids share a second)
        self.controls: dict[str, Control] = {}
        self.logs: dict[str, list[str]] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._workers = [
            threading.Thread(target=self._work, name=f"sandshell-task-{i}", daemon=True)
            for i in range(settings.service.max_sessions)
        ]

    def start(self) -> None:
        for w in self._workers:
            w.start()

    # -- asked by the API ---------------------------------------------------------------------
    def submit(self, goal: str, request: dict[str, Any]) -> TaskRecord:
        with self._cond:
            if self._stopping:
                raise Busy("the server is stopping; send the task again when it is back")
            if len(self.queue) >= QUEUE_LIMIT:
                raise Busy(f"{QUEUE_LIMIT} tasks are waiting already; try again later or cancel some")
        task_id = self.store.new_folder()
        record = TaskRecord(task_id, goal, request, created=time.time())
        folder = self.store.folder(task_id)
        s = self.settings
        init_workspace(
            s.replace(
                sandbox=s.sandbox.replace(workspace=str(folder / "workspace")),
                session=s.session.replace(default_goal=goal),
            )
        )
        chosen = {k: v for k, v in (request.get("model") or {}).items() if v is not None}
        if chosen:  # the model's own settings start as the task chose (the model may still change them)
            starter = json.dumps({**STARTER, **chosen}, indent=2) + "\n"
            (folder / "workspace" / "config.json").write_text(starter, encoding="utf-8")
        if request.get("script") is not None:
            lines = [s if isinstance(s, str) else json.dumps(s) for s in request["script"]]
            (folder / "script.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.store.save(record)
        with self._cond:
            self.tasks[task_id] = record
            self.queue.append(task_id)
            self._cond.notify_all()
        return record

    def view(self, task_id: str) -> dict[str, Any] | None:
        """A task as the API shows it: the numbers, its log, and its place in the queue while it waits."""
        with self._cond:
            record = self.tasks.get(task_id)
            if record is None:
                return None
            out = record.summary()
            out["queue_position"] = self.queue.index(task_id) + 1 if task_id in self.queue else None
            live = self.logs.get(task_id)
            if live is None and record.log:  # ended, its record not yet on disk
                live = record.log
            log = list(live) if live is not None else None
        if log is None:
            stored = self.store.load(task_id)
            log = stored.log if stored else []
        out["log"] = log
        return out

    def cancel(self, task_id: str) -> TaskRecord | None:
        """Stop a task (idempotent): a waiting one never starts, a running one is stopped and its sandbox removed."""
        with self._cond:
            record = self.tasks.get(task_id)
            if record is None or not record.active:
                return record
            if task_id in self.queue:
                self.queue.remove(task_id)
                self._finish(record, "cancelled", error="cancelled before it started")
                self.notify(task_id)  # a long poll on it answers now
                return record
            control = self.controls.get(task_id)
            record.error = "cancelling"
        if control is not None:
            control.quit("cancelled", "cancelled")
        return record

    def page(self, offset: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
        with self._cond:
            newest = sorted(self.tasks.values(), key=lambda r: (r.created, r.id), reverse=True)
            chosen = newest[offset : offset + limit]
            return len(newest), [r.summary() for r in chosen]

    def counts(self) -> dict[str, int]:
        with self._cond:
            return {"running": len(self.controls), "queued": len(self.queue), "tasks": len(self.tasks)}

    def is_active(self, task_id: str) -> bool:
        record = self.tasks.get(task_id)
        return record is not None and record.active

    # -- the workers ----------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self.queue and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                task_id = self.queue.popleft()
                record = self.tasks[task_id]
                control = Control()
                self.controls[task_id] = control
                record.status, record.started = "running", time.time()
                self.logs[task_id] = []
            self._save(record)
            self.notify(task_id)
            self._run(record, control)

    def _run(self, record: TaskRecord, control: Control) -> None:
        slot = None
        try:
            req = record.request
            script = None
            if req.get("script") is not None:
                script = (self.store.folder(record.id) / "script.jsonl").read_text(encoding="utf-8").splitlines()
            backend, slot = self.models.backend_for(script, cancelled=lambda: control.quitting)
            line_log = LineLog(echo=False)
            with self._cond:
                self.logs[record.id] = line_log.lines  # the live log, as GET /v1/tasks/{id} shows it
            sinks: list[Sink] = [line_log, Progress(self, record), StreamWaker(self.notify, record.id)]
            outcome = run_headless(
                record.goal,
                float(req.get("timeout", 300.0)),
                int(req.get("max_steps", 20)),
                place(self.settings, record),
                backend=backend,
                control=control,
                sinks=sinks,
                session_id=record.id,
                log=line_log.lines.append,
            )
        except Exception as e:  # a bug: the task still ends with a reason, the worker lives on
            outcome = outcome_of(e)
        finally:
            self.models.release(slot)
        with self._cond:
            self.controls.pop(record.id, None)
            record.log = list(self.logs.get(record.id) or [])
            if outcome.recording:
                record.log.insert(0, f"recording: {outcome.recording}")
            self.logs.pop(record.id, None)
            record.end(outcome)
        self._save(record)  # outside the lock: an fsync holds up no other worker and no reader
        with self._cond:
            record.log = []  # on disk now; read back when asked
        self.notify(record.id)

    def progress(self, record: TaskRecord, turns: int | None = None, tokens_in: int = 0, tokens_out: int = 0) -> None:
        """A running task's numbers as they grow; at each new turn its record (and its log so far) is
        saved, so a server that dies leaves what the task had done."""
        with self._cond:
            if turns is not None:
                record.turns = turns
            record.tokens_in += tokens_in
            record.tokens_out += tokens_out
            if record.started is not None:
                record.seconds = round(time.time() - record.started, 3)
            snapshot = None
            if turns is not None:
                snapshot = dataclasses.replace(record, log=list(self.logs.get(record.id) or []))
        if snapshot is not None:
            self._save(snapshot)  # outside the lock, as at the end

    def _finish(self, record: TaskRecord, status: str, error: str | None = None) -> None:
        record.status, record.error, record.ended = status, error, time.time()
        self._save(record)
        record.log = []

    def _save(self, record: TaskRecord) -> None:
        try:
            self.store.save(record)
        except SandshellError:
            pass  # the recording (events.jsonl) says so; the record in memory is still right

    def stop(self, wait: float = 30.0) -> None:
        """Stop taking tasks; end the running ones (marked interrupted); waiting ones stay queued on disk."""
        with self._cond:
            self._stopping = True
            controls = list(self.controls.values())
            self._cond.notify_all()
        for c in controls:
            c.quit("interrupted", "the server stopped")
        deadline = time.monotonic() + wait
        for w in self._workers:
            w.join(max(0.0, deadline - time.monotonic()))
