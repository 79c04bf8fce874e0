"""Tasks on disk: `SESSIONS_DIR/<id>/task.json` beside the task's recording and its workspace.

The folder of a task is its session's folder (`events.jsonl`, `session.cast`), so
`./start.sh replay sessions/<id>` plays an API task like any other. `task.json` is written
whole (a temporary file renamed over it) at each change of state, so a crash leaves the last
state; a server that starts again marks what was running then as interrupted, and queues again
what was waiting.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandshell.errors import SandshellError
from sandshell.sandbox.engine import new_session_id
from sandshell.session.outcome import Outcome
from sandshell.session.recorder import end_recording

ACTIVE = ("queued", "running")
TASK_FILE = "task.json"
ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{4,8}$")


@dataclass
class TaskRecord:
    """One task: what was asked, where it stands, and how it ended."""

    id: str
    goal: str
    request: dict[str, Any] = field(default_factory=dict)
    status: str = "queued"  # queued, running, then done, max_steps, timeout, stuck, error, cancelled, interrupted
    created: float = 0.0
    started: float | None = None
    ended: float | None = None
    result: str | None = None
    error: str | None = None
    turns: int = 0
    seconds: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    log: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def end(self, o: Outcome) -> None:
        """The task is over, as its session's outcome says."""
        self.status, self.result, self.error, self.ended = o.status, o.result, o.error, time.time()
        self.turns, self.seconds, self.tokens_in, self.tokens_out = o.turns, o.seconds, o.tokens_in, o.tokens_out

    def summary(self) -> dict[str, Any]:
        """The record without its log (for lists); a running task's seconds counted up to now."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("log", "request")}
        if self.status == "running" and self.started is not None:
            out["seconds"] = round(max(0.0, time.time() - self.started), 1)
        return out


class Store:
    """Task records under the sessions folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, task_id: str) -> Path:
        return self.root / task_id

    def new_folder(self) -> str:
        """A fresh task id whose folder did not exist (made now, so no other task takes it)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for _ in range(20):
                task_id = new_session_id()
                try:
                    self.folder(task_id).mkdir()
                    return task_id
                except FileExistsError:
                    continue
        except OSError as e:
            why = f"cannot make a task folder in {self.root} ({e.strerror}); check SANDSHELL_SESSIONS_DIR"
            raise SandshellError(why) from None
        raise SandshellError("could not find a free task id; try again")

    def save(self, record: TaskRecord) -> None:
        path = self.folder(record.id) / TASK_FILE
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(dataclasses.asdict(record), f, ensure_ascii=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise SandshellError(f"cannot write {path} ({e.strerror}); free some space or fix its folder") from None

    def load(self, task_id: str) -> TaskRecord | None:
        try:
            data = json.loads((self.folder(task_id) / TASK_FILE).read_text(encoding="utf-8"))
            known = {f.name for f in dataclasses.fields(TaskRecord)}
            return TaskRecord(**{k: v for k, v in data.items() if k in known})
        except (OSError, ValueError, TypeError):
            return None

    def load_all(self) -> list[TaskRecord]:
        """Every task found, oldest first (ids start with the time they were made)."""
        if not self.root.is_dir():
            return []
        out = []
        for entry in sorted(self.root.iterdir()):
            if ID.match(entry.name) and (entry / TASK_FILE).is_file():
                record = self.load(entry.name)
                if record is not None:
                    out.append(record)
        return out

    def recover(self) -> list[TaskRecord]:
        """Load every task; those running when the server stopped are marked interrupted (those still
        waiting never started: they wait again, in their order)."""
        records = self.load_all()
        for r in records:
            if r.status == "running":
                why = "the server stopped while the task was running; its sandbox was removed"
                r.status, r.error, r.ended = "interrupted", why, time.time()
                self.save(r)
                end_recording(self.folder(r.id), Outcome("interrupted", error=why, turns=r.turns, seconds=r.seconds))
        return records
