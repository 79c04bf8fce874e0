"""Event streams: a task's `events.jsonl` read as it grows, woken by the session's thread.

The recording is the source: every event is on disk before any other sink sees it, so a
stream reads the file from where the client is (its Last-Event-ID) and waits for a wake-up
when it reaches the end. An event's SSE id is its line number in `events.jsonl` (from 1), so a
resumed or a late stream gets exactly the events it has not seen, and a finished task's stream
is its whole recording, replayed from the start.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandshell.safe_text import json_line, shown

READ_CHUNK = 256 * 1024
KEEPALIVE_SECONDS = 15.0


@dataclass(frozen=True)
class Item:
    """One event for a stream: its sequence number, its type and its JSON line."""

    seq: int
    type: str
    data: str


class Feeds:
    """Who waits for which task's events; `notify` may be called from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def notify(self, task_id: str) -> None:
        with self._lock:
            waiters = list(self._waiting.get(task_id, ()))
        for loop, event in waiters:
            if not event.is_set():  # a reader clears before it reads, so a skipped set loses nothing
                try:
                    loop.call_soon_threadsafe(event.set)
                except RuntimeError:
                    pass  # the loop has closed: the server is stopping

    @asynccontextmanager
    async def subscribe(self, task_id: str) -> AsyncIterator[asyncio.Event]:
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiting.setdefault(task_id, set()).add(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                waiters = self._waiting.get(task_id)
                if waiters is not None:
                    waiters.discard(entry)
                    if not waiters:
                        del self._waiting[task_id]


class LogReader:
    """Reads complete lines of a growing file; a half-written last line waits for its end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def lines(self) -> list[bytes]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(READ_CHUNK)
        except FileNotFoundError:
            return []
        self.offset += len(data)
        parts = (self.partial + data).split(b"\n")
        self.partial = parts.pop()
        return parts

    @property
    def more(self) -> bool:
        """Whether the last read stopped at its size limit (more may be there already)."""
        try:
            return self.path.stat().st_size > self.offset
        except OSError:
            return False


def item(seq: int, raw: bytes, inert: bool) -> Item:
    """One recorded line as a stream item; `inert` shows it as the terminal would (controls as text)."""
    text = raw.decode("utf-8", "replace")
    try:
        obj: Any = json.loads(text)
        kind = str(obj.get("type", "event")) if isinstance(obj, dict) else "event"
    except ValueError:
        return Item(seq, "broken", json_line({"type": "broken", "text": text}))
    if inert:
        text = json_line(shown(obj))
    return Item(seq, kind, text)


async def follow(
    feeds: Feeds, task_id: str, path: Path, after: int, active: Callable[[], bool], inert: bool, max_seconds: float
) -> AsyncIterator[Item | None]:
    """The task's events after number `after`, as they come; None now and then to keep the line alive.

    Ends when the task is over and everything is sent, or after `max_seconds` (the client
    resumes with Last-Event-ID)."""
    reader = LogReader(path)
    seq = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_seconds
    async with feeds.subscribe(task_id) as wake:
        while loop.time() < deadline:
            wake.clear()
            running = active()  # asked before reading: an end after this is seen by the next pass
            for raw in reader.lines():
                seq += 1
                if seq > after:
                    yield item(seq, raw, inert)
            if reader.more:
                continue
            if not running:
                return
            try:
                await asyncio.wait_for(wake.wait(), timeout=min(KEEPALIVE_SECONDS, max(0.0, deadline - loop.time())))
            except TimeoutError:
                yield None


async def until_ended(feeds: Feeds, task_id: str, active: Callable[[], bool], seconds: float) -> None:
    """Return once `active()` is false (the task has ended), or after `seconds`; woken by the task's events."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    async with feeds.subscribe(task_id) as wake:
        while active():
            left = deadline - loop.time()
            if left <= 0:
                return
            wake.clear()
            if not active():  # ended between the check and the clear: its wake-up may be gone
                return
            try:
                await asyncio.wait_for(wake.wait(), timeout=left)
            except TimeoutError:
                return
