"""Recording a session: a JSON-lines event log and an asciicast `.cast` file (v2, or v3 as an option).

The log is the record: each event is fsynced before any other sink sees it, so what was shown
was on disk first (a crash loses at most the event being written). The `.cast` is a view of
the log for players; it is flushed per event and synced at most once a second, and at close.
Its header asks players to shorten long pauses (`idle_time_limit`), and each command starts
with a marker event, so a player can jump from command to command.

Both files together hold at most `limit` bytes (SANDSHELL_RECORDING_LIMIT) and the end event: the
event that would pass it is recorded as a notice saying so, and nothing more until the session's end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import IO, Any

from sandshell.errors import SandshellError
from sandshell.safe_text import json_line, shown
from sandshell.session import events as ev
from sandshell.session.outcome import Outcome
from sandshell.session.transcript import render

CAST_WIDTH, CAST_HEIGHT = 120, 36
CAST_SYNC_SECONDS = 1.0
TAIL_BYTES = 64 * 1024  # of events.jsonl read to find its last event


class RecordingError(SandshellError):
    """The session folder cannot be written (disk full, read-only, gone)."""


def to_json(event: ev.Event) -> dict[str, Any]:
    """An event as a JSON object: its fields plus its type name."""
    data = dataclasses.asdict(event)  # type: ignore[call-overload]
    return {"type": type(event).__name__, **data}


class Recorder:
    """A sink that writes `events.jsonl` and `session.cast` into a session folder."""

    def __init__(
        self, folder: Path, title: str = "sandshell", version: int = 2, idle_limit: float = 2.0, limit: int = 0
    ) -> None:
        self.folder = folder
        self.limit, self.written, self.full = limit, 0, False
        self.started = time.monotonic()
        self.failed: str | None = None
        self.version = version
        self._cast_due = 0.0
        self._last_t = 0.0  # v3 writes the time since the previous event
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._log: IO[str] | None = open(folder / "events.jsonl", "a", encoding="utf-8")  # noqa: SIM115
            self._cast: IO[str] | None = open(folder / "session.cast", "w", encoding="utf-8")  # noqa: SIM115
            env = {"SHELL": "/bin/bash", "TERM": "xterm-256color"}
            size: dict[str, Any] = {"width": CAST_WIDTH, "height": CAST_HEIGHT, "env": env}
            if version == 3:
                size = {
                    "term": {"cols": CAST_WIDTH, "rows": CAST_HEIGHT, "type": env["TERM"]},
                    "env": {"SHELL": "/bin/bash"},
                }
            header = {"version": version, **size, "timestamp": int(time.time()), "title": title}
            if idle_limit:
                header["idle_time_limit"] = idle_limit
            self._write(self._cast, json.dumps(header))
        except OSError as e:
            raise RecordingError(_sentence(folder, e)) from None

    def emit(self, event: ev.Event) -> None:
        if self.failed or (self.full and not isinstance(event, ev.SessionEnded)):
            return
        t = round(time.monotonic() - self.started, 4)
        try:
            assert self._log is not None and self._cast is not None
            line, cast = self._lines(t, event)
            if self.limit and self.written + _size(line, cast) > self.limit and not isinstance(event, ev.SessionEnded):
                self.full = True  # one notice in place of the event, then only the end
                line, cast = self._lines(t, ev.Notice("warning", _full(self.limit)))
            self.written += _size(line, cast)
            self._write(self._log, line, sync=True)
            for c in cast:
                due = time.monotonic() >= self._cast_due  # the .cast is a view of the log: synced once a second
                self._write(self._cast, c, sync=due)
                if due:
                    self._cast_due = time.monotonic() + CAST_SYNC_SECONDS
        except OSError as e:
            self.failed = _sentence(self.folder, e)
            self.close()
            raise RecordingError(self.failed) from None

    def _lines(self, t: float, event: ev.Event) -> tuple[str, list[str]]:
        """The event's line of the log, and its lines of the .cast."""
        cast = []
        if isinstance(event, ev.ActionStarted) and event.action.kind != "done":  # jump from action to action
            cast.append(self._cast_line(t, "m", shown(event.action.summary(60))))
        if text := render(event, color=True):
            cast.append(self._cast_line(t, "o", text.replace("\n", "\r\n")))
        return json_line({"t": t, **to_json(event)}), cast

    def _cast_line(self, t: float, code: str, data: str) -> str:
        stamp = round(t - self._last_t, 4) if self.version == 3 else t
        self._last_t = t
        return json_line([stamp, code, data])

    @staticmethod
    def _write(f: IO[str], line: str, sync: bool = True) -> None:
        f.write(line + "\n")
        f.flush()
        if sync:
            os.fsync(f.fileno())  # on disk before any sink shows it: a crash loses at most this event

    def close(self) -> None:
        for f in (self._log, self._cast):
            if f is not None:
                try:
                    f.flush()
                    os.fsync(f.fileno())
                    f.close()
                except OSError:
                    pass
        self._log = self._cast = None


def end_recording(folder: Path, outcome: Outcome) -> bool:
    """Give a recording whose process died before its end its `SessionEnded` (True when it lacked one),
    so its replay ends as its task did, at the recording's own last time stamp."""
    log = folder / "events.jsonl"
    try:
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - TAIL_BYTES))
            tail = f.read()
        last: dict[str, Any] = {}
        for line in reversed(tail.splitlines()):
            try:
                last = json.loads(line)
                break
            except ValueError:
                continue  # a line the crash cut short
        if last.get("type") == "SessionEnded":
            return False
        with open(log, "a", encoding="utf-8") as out:
            ended = {"t": float(last.get("t", 0.0)), **to_json(ev.SessionEnded.of(outcome))}
            out.write(("\n" if tail and not tail.endswith(b"\n") else "") + json_line(ended) + "\n")
            out.flush()
            os.fsync(out.fileno())
        return True
    except OSError:
        return False  # no recording here: its task record still says how it ended


def _size(line: str, cast: list[str]) -> int:
    return len(line.encode()) + 1 + sum(len(c.encode()) + 1 for c in cast)


def _full(limit: int) -> str:
    return (
        f"the recording reached SANDSHELL_RECORDING_LIMIT ({limit / 2**20:.1f} MiB): nothing more is recorded "
        "until the session's end (the session goes on); raise the setting to keep more"
    )


def _sentence(folder: Path, e: OSError) -> str:
    return (
        f"cannot write the session recording in {folder} ({e.strerror or e}); free some space or set "
        "SANDSHELL_SESSIONS_DIR to a writable folder"
    )
