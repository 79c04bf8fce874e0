"""Reading a recorded session back: events from `events.jsonl`, played at their pace, or re-run.

`load` tolerates a log cut short by a crash (the last line may be half written).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from sandshell.errors import SandshellError
from sandshell.model.actions import Action
from sandshell.model.types import Stats
from sandshell.sandbox.protocol import Result
from sandshell.session import events as ev
from sandshell.session.control import Control

TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        ev.SessionStarted,
        ev.StateRead,
        ev.ConfigChanged,
        ev.TurnStarted,
        ev.PromptProgress,
        ev.ModelText,
        ev.ModelReplied,
        ev.ApprovalNeeded,
        ev.ActionStarted,
        ev.OutputChunk,
        ev.ActionFinished,
        ev.Notice,
        ev.Phase,
        ev.SessionEnded,
    )
}


def _action(d: dict[str, Any]) -> Action:
    return Action(d["kind"], d["arg"], d.get("content", ""), d.get("comment", ""), d.get("timeout"))


def decode(obj: dict[str, Any]) -> tuple[float, ev.Event] | None:
    """One log line back into (seconds since start, event); None for an unknown type."""
    kind = TYPES.get(str(obj.get("type")))
    if kind is None:
        return None
    known = {f.name for f in dataclasses.fields(kind)}
    fields = {k: v for k, v in obj.items() if k in known}  # recordings from other versions still load
    if "action" in fields and isinstance(fields["action"], dict):
        fields["action"] = _action(fields["action"])
    if "actions" in fields:
        fields["actions"] = tuple(_action(a) for a in fields["actions"])
    if isinstance(fields.get("stats"), dict):
        fields["stats"] = Stats(**fields["stats"])
    if isinstance(fields.get("result"), dict) and kind is ev.ActionFinished:
        result_fields = {f.name for f in dataclasses.fields(Result)}
        fields["result"] = Result(**{k: v for k, v in fields["result"].items() if k in result_fields})
    for key in ("changed", "problems"):
        if key in fields:
            fields[key] = tuple(fields[key])
    return float(obj.get("t", 0.0)), kind(**fields)


def open_recording(folder: Path) -> IO[str]:
    """The recording's events file, opened: one sentence when it cannot be (before a UI opens, too)."""
    path = folder / "events.jsonl" if folder.is_dir() else folder
    try:
        return open(path, encoding="utf-8")  # (the caller closes it)
    except OSError as e:
        raise SandshellError(f"cannot read the recording {path}: {e.strerror}; pass a folder under sessions/") from None


def load(folder: Path) -> Iterator[tuple[float, ev.Event]]:
    """The events of a recorded session, in order."""
    with open_recording(folder) as f:
        for line in f:
            try:
                item = decode(json.loads(line))
            except (ValueError, TypeError, KeyError):
                continue  # a line cut by a crash
            if item is not None:
                yield item


def play(folder: Path, sink: ev.Sink, control: Control, speed: float = 1.0) -> None:
    """Emit the recorded events to `sink` at their original pace divided by `speed`; pausable."""
    start = time.monotonic()
    offset = 0.0
    for t, event in load(folder):
        while control.paused and not control.quitting:
            pause_start = time.monotonic()
            control.next_move(0.1)
            offset += time.monotonic() - pause_start
        if control.quitting:
            return
        wait = start + offset + t / max(speed, 1e-6) - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, 5.0))  # long idle gaps are shortened
        sink.emit(event)
