"""Recording a session: a JSON-lines event log (synced per event) and an asciicast v2 `.cast` file."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import IO, Any

from sandshell.errors import SandshellError
from sandshell.session import events as ev
from sandshell.session.transcript import render

CAST_WIDTH, CAST_HEIGHT = 120, 36


class RecordingError(SandshellError):
    """The session folder cannot be written (disk full, read-only, gone)."""


def to_json(event: ev.Event) -> dict[str, Any]:
    """An event as a JSON object: its fields plus its type name."""
    data = dataclasses.asdict(event)  # type: ignore[call-overload]
    return {"type": type(event).__name__, **data}


class Recorder:
    """A sink that writes `events.jsonl` and `session.cast` into a session folder."""

    def __init__(self, folder: Path, title: str = "sandshell") -> None:
        self.folder = folder
        self.started = time.monotonic()
        self.failed: str | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._log: IO[str] | None = open(folder / "events.jsonl", "a", encoding="utf-8")  # noqa: SIM115
            self._cast: IO[str] | None = open(folder / "session.cast", "w", encoding="utf-8")  # noqa: SIM115
            header = {
                "version": 2,
                "width": CAST_WIDTH,
                "height": CAST_HEIGHT,
                "timestamp": int(time.time()),
                "title": title,
                "env": {"SHELL": "/bin/bash", "TERM": "xterm-256color"},
            }
            self._write(self._cast, json.dumps(header))
        except OSError as e:
            raise RecordingError(_sentence(folder, e)) from None

    def emit(self, event: ev.Event) -> None:
        if self.failed:
            return
        t = round(time.monotonic() - self.started, 4)
        try:
            assert self._log is not None and self._cast is not None
            self._write(self._log, json.dumps({"t": t, **to_json(event)}, ensure_ascii=False, default=str))
            text = render(event, color=True)
            if text:
                self._write(self._cast, json.dumps([t, "o", text.replace("\n", "\r\n")], ensure_ascii=False))
        except OSError as e:
            self.failed = _sentence(self.folder, e)
            self.close()
            raise RecordingError(self.failed) from None

    @staticmethod
    def _write(f: IO[str], line: str) -> None:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())  # a crash loses at most the event being written

    def close(self) -> None:
        for f in (self._log, self._cast):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        self._log = self._cast = None


def _sentence(folder: Path, e: OSError) -> str:
    return (
        f"cannot write the session recording in {folder} ({e.strerror or e}); free some space or set "
        "SANDSHELL_SESSIONS_DIR to a writable folder"
    )
