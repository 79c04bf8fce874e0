"""Conversations: one model turn and its execution per message, in a sandbox that lives as long as
the conversation (SANDSHELL_MAX_CONVERSATIONS at once; one idle for SANDSHELL_CONVERSATION_IDLE
seconds is ended). The model keeps its history; the latest message is its goal. Each
conversation is recorded like any session, in `SESSIONS_DIR/<id>/`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from sandshell.config import Settings
from sandshell.runner import SessionSpec, open_session
from sandshell.sandbox import engine
from sandshell.sandbox.sandbox import Sandbox
from sandshell.service.models import Models
from sandshell.service.store import ID, TASK_FILE, Store
from sandshell.service.taskqueue import Busy, StreamWaker
from sandshell.session import events as ev
from sandshell.session.control import Control
from sandshell.session.events import Sink
from sandshell.session.loop import Session
from sandshell.session.outcome import Outcome, Status
from sandshell.workspace import init_workspace

OBSERVATION_CHARS = 16 * 1024


class StillAnswering(Busy):
    """A message for a conversation that is still answering the one before (a conflict, not a full server)."""


class ProfileMismatch(ValueError):
    """A message asks an open conversation for another profile than the one it runs."""


class Collect:
    """What one turn did, as the Code Agent answers: thought, code, observation."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.thought: list[str] = []
        self.code: list[str] = []
        self.observation: list[str] = []
        self.size = 0
        self.done: str | None = None
        self.error: str | None = None

    def _observe(self, text: str) -> None:
        room = OBSERVATION_CHARS - self.size
        if room > 0:
            self.observation.append(text[:room])
        self.size += len(text)

    def emit(self, event: ev.Event) -> None:
        if isinstance(event, ev.ModelReplied):
            self.thought += [a.comment for a in event.actions if a.comment]
            if event.error:
                self.error = f"the answer was not valid: {event.error}"
        elif isinstance(event, ev.ActionStarted):
            a = event.action
            if a.kind == "bash":
                self.code.append(a.arg)
            elif a.kind == "done":
                self.done = a.arg
            else:
                self.code.append(f"[{a.kind}] {a.arg}")
        elif isinstance(event, ev.OutputChunk):
            self._observe(event.data)
        elif isinstance(event, ev.ActionFinished) and (event.result is None or not event.result.ok):
            self._observe(f"[{event.summary}]\n")

    def answer(self) -> dict[str, Any]:
        observation = "".join(self.observation)
        if self.size > OBSERVATION_CHARS:
            observation += f"\n[{self.size - OBSERVATION_CHARS:,} more characters not shown]"
        return {
            "thought": "\n".join(self.thought),
            "code": "\n".join(self.code),
            "observation": observation,
            "done": self.done,
            "error": self.error,
        }


@dataclass
class Conversation:
    id: str
    stack: ExitStack
    session: Session[Sandbox]
    collect: Collect
    slot: int | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    used: float = field(default_factory=time.monotonic)
    turns: int = 0


class Conversations:
    def __init__(self, settings: Settings, store: Store, models: Models, notify: Callable[[str], None]) -> None:
        self.settings = settings
        self.store = store
        self.models = models
        self.notify = notify  # wakes the conversation's event streams
        self.open: dict[str, Conversation] = {}
        self.closing: dict[str, Conversation] = {}  # taken out of `open`, their end not yet written
        self._lock = threading.Lock()

    def say(
        self, message: str, conversation_id: str | None, script: list[str] | None = None, profile: str | None = None
    ) -> dict[str, Any]:
        """One turn; `profile` (checked by the caller) is the new conversation's, or must be the open one's."""
        convo = self._get(conversation_id) if conversation_id else self._start(script, profile)
        if profile is not None and convo.session.settings.sandbox.profile != profile:
            raise ProfileMismatch(
                f"conversation {convo.id!r} runs the {convo.session.settings.sandbox.profile} profile; "
                "start a new conversation for another"
            )
        if not convo.lock.acquire(blocking=False):
            raise StillAnswering("this conversation is still answering its last message; wait for it")
        try:
            convo.collect.reset()
            convo.session.answer(message)
            convo.turns += 1
            return {"conversation_id": convo.id, **convo.collect.answer()}
        finally:
            convo.used = time.monotonic()
            convo.lock.release()

    def _get(self, conversation_id: str) -> Conversation:
        with self._lock:
            convo = self.open.get(conversation_id)
        if convo is None:
            raise KeyError(conversation_id)
        return convo

    def _start(self, script: list[str] | None, profile: str | None) -> Conversation:
        self.reap()
        with self._lock:
            if len(self.open) >= self.settings.service.max_conversations:
                raise Busy(
                    f"{len(self.open)} conversations are open (SANDSHELL_MAX_CONVERSATIONS); end one with DELETE first"
                )
            conv_id = self.store.new_folder()
            self.open[conv_id] = None  # type: ignore[assignment]  # holds its place while the sandbox starts
        try:
            return self._open(conv_id, script, profile or self.settings.sandbox.profile)
        except BaseException:
            with self._lock:
                self.open.pop(conv_id, None)
            raise

    def _open(self, conv_id: str, script: list[str] | None, profile: str) -> Conversation:
        folder = self.store.folder(conv_id)
        base = self.settings
        sessions = str(base.session.path(base.session.sessions_dir))
        s = base.replace(
            sandbox=engine.least_loaded(base.sandbox).replace(workspace=str(folder / "workspace"), profile=profile),
            model=base.model.replace(intro=False),
            session=base.session.replace(approval=False, sessions_dir=sessions),
        )
        init_workspace(s)
        control = Control()
        backend, slot = self.models.backend_for(script, cancelled=lambda: control.quitting)
        collect = Collect()
        stack = ExitStack()
        try:
            sinks: list[Sink] = [collect, StreamWaker(self.notify, conv_id)]
            spec = SessionSpec(s, "", backend, sinks, control, session_id=conv_id, log=lambda _m: None)
            session = stack.enter_context(open_session(spec))
            session.begin()
        except BaseException:
            stack.close()
            self.models.release(slot)
            raise
        convo = Conversation(conv_id, stack, session, collect, slot)
        with self._lock:
            self.open[conv_id] = convo
        return convo

    def end(self, conversation_id: str) -> bool:
        with self._lock:
            convo = self.open.get(conversation_id)
            if convo is None:
                return False
            del self.open[conversation_id]
        self._close(convo, "quit", "the conversation was ended")
        return True

    def _close(self, convo: Conversation, status: Status, why: str) -> None:
        """End a conversation taken out of `open`; its streams follow it until its end event is written."""
        with self._lock:
            self.closing[convo.id] = convo
        try:
            convo.session.control.quit(status, why)
            with convo.lock:  # a turn still running stops at its next step
                convo.session.finish(Outcome(status, error=why))
                convo.stack.close()
                self.models.release(convo.slot)
        finally:
            with self._lock:
                self.closing.pop(convo.id, None)
            self.notify(convo.id)

    def reap(self) -> list[str]:
        """End the conversations idle for longer than SANDSHELL_CONVERSATION_IDLE."""
        limit = self.settings.service.conversation_idle
        now = time.monotonic()
        with self._lock:
            idle = [c for c in self.open.values() if c is not None and not c.lock.locked() and now - c.used > limit]
            for c in idle:
                del self.open[c.id]
        for c in idle:
            self._close(c, "timeout", f"the conversation was idle for more than {limit:g}s")
        return [c.id for c in idle]

    def is_open(self, conversation_id: str) -> bool:
        """Open, or still writing its end (a stream that stopped now would miss the end event)."""
        with self._lock:
            return conversation_id in self.open or conversation_id in self.closing

    def known(self, conversation_id: str) -> bool:
        """Open, or ended with its recording kept (a task's folder, with its task.json, is not one)."""
        if self.is_open(conversation_id):
            return True
        folder = self.store.folder(conversation_id)
        return (
            ID.match(conversation_id) is not None
            and (folder / "events.jsonl").is_file()
            and not (folder / TASK_FILE).exists()
        )

    def count(self) -> int:
        with self._lock:
            return len(self.open)

    def close_all(self) -> None:
        with self._lock:
            convos = [c for c in self.open.values() if c is not None]
            self.open.clear()
        for c in convos:
            self._close(c, "quit", "the server stopped")
