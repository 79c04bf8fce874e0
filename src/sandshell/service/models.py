"""One model for many sessions: generations queued fairly, and each session its own backend view.

- llama (in-process): one loaded model, one generation at a time. Sessions wait in one
  first-come-first-served line; a session asks for at most one generation at a time, so the
  line serves them round-robin, a turn each.
- openai: one client for the server; as many generations at once as it has slots (its
  /props `total_slots`, or LLAMA_OPENAI_SLOTS). Each session keeps one slot (`id_slot`, with
  `cache_prompt`), so its prompt cache survives between its turns.
- script: each session reads its own script (a task's `script`, or LLAMA_SCRIPT).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from sandshell.config import ModelSettings, ServiceSettings
from sandshell.errors import ModelError
from sandshell.model.script import ScriptBackend
from sandshell.model.turn import make_backend
from sandshell.model.types import Backend, Message, PromptProgress, Stats


class LeftTheLine(Exception):
    """A session that quit while it waited for the model (see `FairGate.hold`)."""


class FairGate:
    """At most `width` holders at once; the others are served in the order they came."""

    def __init__(self, width: int = 1) -> None:
        self.width = max(1, width)
        self._cond = threading.Condition()
        self._line: deque[object] = deque()
        self.busy = 0

    @property
    def waiting(self) -> int:
        return len(self._line)

    @contextmanager
    def hold(self, cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
        """Wait for a turn. A waiter whose `cancelled()` turns true leaves the line (LeftTheLine)
        instead of waiting for every generation ahead of it to end: a stopping server does not
        wait for sessions that have quit to generate once each."""
        ticket = object()
        with self._cond:
            self._line.append(ticket)
            try:
                while self._line[0] is not ticket or self.busy >= self.width:
                    if cancelled is not None and cancelled():
                        raise LeftTheLine
                    self._cond.wait(None if cancelled is None else 0.25)
            except BaseException:
                self._line.remove(ticket)
                self._cond.notify_all()
                raise
            self._line.popleft()
            self.busy += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self.busy -= 1
                self._cond.notify_all()


class GatedBackend:
    """A session's view of a shared backend: each generation waits its turn at the gate."""

    def __init__(
        self,
        inner: Backend,
        gate: FairGate,
        extra: dict[str, Any] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        self.inner = inner
        self.gate = gate
        self.extra = extra or {}
        self.cancelled = cancelled
        self.name = inner.name
        self.n_ctx = inner.n_ctx
        self.description = getattr(inner, "description", inner.name)

    @property
    def constrained(self) -> bool:
        return self.inner.constrained

    def count(self, messages: list[Message]) -> int:
        return self.inner.count(messages)

    def stream(
        self, messages: list[Message], params: dict[str, Any]
    ) -> Generator[str | Stats | PromptProgress, None, None]:
        try:
            with self.gate.hold(self.cancelled):
                yield from self.inner.stream(messages, {**params, **self.extra})
        except LeftTheLine:
            return  # quit while waiting: no answer, and the session ends as it checks its control


class Models:
    """The server's model: loaded once at start, lent to each session through `backend_for`."""

    def __init__(self, model: ModelSettings, service: ServiceSettings, say: Any = None) -> None:
        self.settings = model
        self.shared: Backend | None = None
        self.slots = 0  # openai: slots to pin sessions to (0: the server does not say)
        self._use: Counter[int] = Counter()
        self._lock = threading.Lock()
        if model.backend == "openai":
            wait_for_health(model.openai_base_url, say=say)
        if model.backend != "script":
            self.shared = make_backend(model)
        width = 1
        if model.backend == "openai":
            self.slots = service.openai_slots or _served_slots(model.openai_base_url)
            width = max(1, self.slots)
        self.gate = FairGate(width)

    @property
    def description(self) -> str:
        return getattr(self.shared, "description", self.settings.backend)

    def backend_for(
        self, script: list[str] | None = None, cancelled: Callable[[], bool] | None = None
    ) -> tuple[Backend, int | None]:
        """A backend for one session, and the slot it holds (give it back with `release`);
        `cancelled`: the session has quit (it then leaves the line for the model at once)."""
        if self.shared is None:
            if script is not None:
                return ScriptBackend(script, self.settings.n_ctx, source="task script"), None
            if not self.settings.script_path:
                raise ModelError("the server runs the script backend: give the task a `script` or set LLAMA_SCRIPT")
            return ScriptBackend.from_file(self.settings.path(self.settings.script_path), self.settings.n_ctx), None
        if script is not None:
            raise ModelError("a task may carry a `script` only when the server runs LLAMA_BACKEND=script")
        if not self.slots:
            return GatedBackend(self.shared, self.gate, cancelled=cancelled), None
        with self._lock:
            slot = min(range(self.slots), key=lambda s: self._use[s])
            self._use[slot] += 1
        return GatedBackend(self.shared, self.gate, {"id_slot": slot, "cache_prompt": True}, cancelled), slot

    def release(self, slot: int | None) -> None:
        if slot is not None:
            with self._lock:
                self._use[slot] -= 1

    def load(self) -> dict[str, int]:
        return {"generating": self.gate.busy, "waiting": self.gate.waiting}


def _root(base_url: str) -> str:
    return base_url.rstrip("/").removesuffix("/v1")


def _served_slots(base_url: str) -> int:
    """llama-server's slot count (`total_slots` in /props); 0 when the server does not say."""
    try:
        props = httpx.get(f"{_root(base_url)}/props", timeout=3.0).json()
        n = props.get("total_slots") if isinstance(props, dict) else None
        return n if isinstance(n, int) and n > 0 else 0
    except (httpx.HTTPError, ValueError):
        return 0


def wait_for_health(base_url: str, timeout: float = 120.0, say: Any = None) -> None:
    """Wait while the server says it is loading (503 on /health); a server without /health is taken as ready."""
    url = f"{_root(base_url)}/health"
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            status = httpx.get(url, timeout=3.0).status_code
            if status != 503:
                return
        except httpx.HTTPError as e:
            status = 0
            if time.monotonic() > deadline:
                raise ModelError(
                    f"the model server at {base_url} does not answer ({type(e).__name__}); "
                    "start it or fix LLAMA_OPENAI_BASE_URL"
                ) from None
        if time.monotonic() > deadline:
            raise ModelError(f"the model server at {base_url} was still loading after {timeout:.0f}s; try again")
        if say and not told:
            say(f"waiting for the model server at {url} (status {status or 'no answer'})")
            told = True
        time.sleep(1.0)
