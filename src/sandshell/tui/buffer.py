"""The one buffered sink between the session thread and the UI: events in, bounded batches out.

The session thread only appends to a deque; the app drains it on a timer (≤ 30 Hz) with a
bounded amount of work a frame, so a flood never freezes the UI.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from sandshell.safe_text import shown
from sandshell.session.events import Event, ModelText, OutputChunk

MAX_PARTIAL = 4096
MAX_PENDING_CHARS = 2_000_000  # output waiting for the screen beyond this is skipped (the recording has it)
KEEP_WHEN_BEHIND = 16_000  # when a frame finds more than BEHIND waiting, it shows only the newest this many
BEHIND = 64_000
BACKPRESSURE = 128_000  # the session thread waits while this much output waits for the screen


@dataclass
class Batch:
    """What one frame should show: events in order, with output already split into lines."""

    items: list[Event | tuple[str, str]] = field(default_factory=list)  # (stream, line) for output lines
    skipped_lines: int = 0
    skipped_chars: int = 0


class UIBuffer:
    """A sink (thread-safe) that the UI drains in bounded batches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: deque[Event] = deque()
        self._pending_chars = 0
        self._skipped_chars = 0
        self._partial: dict[str, str] = {"stdout": "", "stderr": ""}

    def emit(self, event: Event) -> None:
        event = shown(event)  # the one boundary between the session and the screen
        if isinstance(event, OutputChunk) and self._pending_chars > BACKPRESSURE:
            # Let the screen catch up: the session thread waits (and frees the GIL for the UI), the
            # socket fills, and the flooding command blocks on its write inside the container.
            deadline = time.monotonic() + 0.5
            while self._pending_chars > BACKPRESSURE and time.monotonic() < deadline:
                time.sleep(0.005)
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

    def _skip_old_output(self) -> None:
        """Far behind a flood: drop the oldest waiting output so the screen shows what is happening now."""
        keep = KEEP_WHEN_BEHIND
        kept: deque[Event] = deque()
        for event in reversed(self._events):
            if isinstance(event, OutputChunk):
                if keep <= 0:
                    self._skipped_chars += len(event.data)
                    self._pending_chars -= len(event.data)
                    continue
                keep -= len(event.data)
            kept.appendleft(event)
        self._events = kept

    def drain(self, max_lines: int = 200, max_events: int = 200) -> Batch:
        """Take at most `max_lines` output lines and `max_events` other events."""
        batch = Batch()
        lines = 0
        with self._lock:
            if self._pending_chars > BEHIND:
                self._skip_old_output()
            skipped_chars, self._skipped_chars = self._skipped_chars, 0
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
                    room = max_lines - lines
                    if len(parts) > room:  # a frame shows at most max_lines; the rest of a flood is skipped
                        batch.skipped_lines += len(parts) - room
                        parts = parts[len(parts) - room :]
                    for line in parts:
                        batch.items.append((event.stream, line))
                    lines += len(parts)
                else:
                    for stream, rest in self._partial.items():
                        if rest:
                            batch.items.append((stream, rest))
                            self._partial[stream] = ""
                    batch.items.append(event)
        batch.skipped_chars = skipped_chars
        return batch
