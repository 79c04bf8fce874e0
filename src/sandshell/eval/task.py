"""One task a file (TOML): the goal, setup and check commands, limits, tags, a level, a reference solution.

    goal = "Write the word hello into /app/hello.txt"
    level = "trivial"                      # trivial, easy or medium
    tags = ["files"]
    setup = ["mkdir -p /app/data"]         # run in the sandbox before the session; the model never sees them
    check = "grep -qx hello /app/hello.txt"  # after the session, in a fresh sandbox with its /app: exit 0 is success
    time_limit = 90                        # seconds for the session
    step_limit = 8                         # turns for the session
    solution = [{bash = "echo hello > /app/hello.txt"}, {done = "wrote hello"}]  # one answer a turn

A `solution` answer is one action (an inline table) or a list of actions; a test runs it instead
of the model to show the task can be solved and that its check tells success from failure.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandshell.errors import SandshellError
from sandshell.model import actions

LEVELS = ("trivial", "easy", "medium")
MAX_TASK_BYTES = 64 * 1024
MAX_TASKS = 1000


class TaskError(SandshellError):
    """A task file (or folder of them) cannot be used."""


class Task(BaseModel):
    """A task as written in its file; `name` is the file's stem."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    goal: str = Field(min_length=1, max_length=4000)
    level: Literal["trivial", "easy", "medium"]
    tags: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    check: str = Field(min_length=1, max_length=4000)
    time_limit: float = Field(default=120.0, gt=0, le=3600)
    step_limit: int = Field(default=10, ge=1, le=200)
    solution: tuple[Any, ...] = ()

    @field_validator("solution")
    @classmethod
    def _answers_parse(cls, value: tuple[Any, ...]) -> tuple[Any, ...]:
        for i, answer in enumerate(value, 1):
            try:
                actions.parse(json.dumps(answer))
            except actions.ParseError as e:
                raise ValueError(f"answer {i} is not valid: {e}") from None
        return value

    def solution_lines(self) -> list[str]:
        """The solution as a script backend's JSONL lines, one answer a line."""
        return [json.dumps(a if isinstance(a, list) else [a]) for a in self.solution]


def load_task(path: Path) -> Task:
    """Read and check one task file; TaskError says what is wrong, in one sentence."""
    try:
        if path.stat().st_size > MAX_TASK_BYTES:
            raise TaskError(f"{path} is over {MAX_TASK_BYTES // 1024} KiB; a task file is a short TOML file")
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise TaskError(f"cannot read the task file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise TaskError(f"{path} is not UTF-8 text; a task file is a TOML file") from None
    except tomllib.TOMLDecodeError as e:
        raise TaskError(f"{path} is not valid TOML ({e}); fix the file") from None
    if "name" in raw:
        raise TaskError(f"{path}: 'name' is not a field (a task is named after its file)")
    try:
        return Task.model_validate({**raw, "name": path.stem})
    except ValidationError as e:
        raise TaskError(f"{path}: {_describe(e)}") from None


def _describe(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "the file"
        if err.get("type") == "missing":
            parts.append(f"'{where}' is missing")
        elif err.get("type") == "extra_forbidden":
            parts.append(f"'{where}' is not a field (fields: {', '.join(sorted(Task.model_fields))})")
        else:
            parts.append(f"'{where}': {err.get('msg', 'invalid')}")
    return "; ".join(parts) + " (see sandshell/eval/task.py for the format)"


def load_tasks(paths: list[str | Path]) -> list[Task]:
    """Tasks from files and folders (every *.toml in a folder, sorted); names must be unique."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.toml"))
            if not found:
                raise TaskError(f"the folder {p} holds no task files (*.toml)")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise TaskError(f"no task file or folder at {p}")
    if len(files) > MAX_TASKS:
        raise TaskError(f"{len(files)} task files; at most {MAX_TASKS} in one run")
    tasks = [load_task(f) for f in files]
    seen: dict[str, Path] = {}
    for task, f in zip(tasks, files, strict=True):
        if task.name in seen:
            raise TaskError(f"two tasks are named {task.name!r} ({seen[task.name]} and {f}); rename one")
        seen[task.name] = f
    return tasks


def select(tasks: list[Task], levels: list[str] | None = None, tags: list[str] | None = None) -> list[Task]:
    """The tasks of the given levels and (any of) the given tags; None selects all."""
    bad = sorted(set(levels or ()) - set(LEVELS))
    if bad:
        raise TaskError(f"unknown level(s) {', '.join(bad)}; levels are {', '.join(LEVELS)}")
    return [t for t in tasks if (not levels or t.level in levels) and (not tags or set(tags) & set(t.tags))]
