"""The one buffered sink between the session thread and the UI: events in, bounded batches out.

The session thread only appends to a deque; the app drains it on a timer (≤ 30 Hz) with a
bounded amount of work a frame, so a flood never freezes the UI.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from app.events import Event, ModelText, OutputChunk

MAX_PARTIAL = 4096
MAX_PENDING_CHARS = 2_000_000  # output waiting for the screen beyond this is skipped (the recording has it)


@dataclass
class Batch:
    """What one frame should show: events in order, with output already split into lines."""

    items: list[Event | tuple[str, str]] = field(default_factory=list)  # (stream, line) for output lines
    skipped_lines: int = 0
    more: bool = False


class UIBuffer:
    """A sink (thread-safe) that the UI drains in bounded batches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: deque[Event] = deque()
        self._pending_chars = 0
        self._skipped_chars = 0
        self._partial: dict[str, str] = {"stdout": "", "stderr": ""}

    def emit(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, OutputChunk):
                if self._pending_chars > MAX_PENDING_CHARS:
                    self._skipped_chars += len(event.data)
                    return
                self._pending_chars += len(event.data)
            if isinstance(event, ModelText) and self._events and isinstance(self._events[-1], ModelText):
                self._events[-1] = ModelText(self._events[-1].text + event.text)
                return
            self._events.append(event)

    def drain(self, max_lines: int = 400, max_events: int = 200) -> Batch:
        """Take at most `max_lines` output lines and `max_events` other events."""
        batch = Batch()
        lines = 0
        with self._lock:
            if self._skipped_chars:
                batch.skipped_lines = -self._skipped_chars  # negative: characters, not lines
                self._skipped_chars = 0
            while self._events and lines < max_lines and len(batch.items) < max_events + max_lines:
                event = self._events.popleft()
                if isinstance(event, OutputChunk):
                    self._pending_chars -= len(event.data)
                    text = self._partial[event.stream] + event.data
                    parts = text.split("\n")
                    rest = parts.pop()
                    if len(rest) > MAX_PARTIAL:  # one endless line: show it in pieces
                        parts.append(rest)
                        rest = ""
                    self._partial[event.stream] = rest
                    for line in parts:
                        batch.items.append((event.stream, line))
                    lines += len(parts)
                else:
                    for stream, rest in self._partial.items():
                        if rest:
                            batch.items.append((stream, rest))
                            self._partial[stream] = ""
                    batch.items.append(event)
            batch.more = bool(self._events)
        return batch
