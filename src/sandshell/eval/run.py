"""Running tasks: setup and a session in one sandbox, then the check in a fresh one; results as plain records.

Each task gets a fresh, empty workspace copied into its container (`copy` mode, so nothing is
written on the host) and its own recording under `<out>/sessions/`. The check sees the final /app
in a new container of the clean image (`check.py`), never the model's shell or its other changes.
A model is loaded once per worker and variant and reused across tasks; `--parallel N` runs N
workers, each with its own.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.eval.check import run_check
from sandshell.eval.task import Task
from sandshell.model.script import ScriptBackend
from sandshell.model.turn import make_backend
from sandshell.model.types import Backend
from sandshell.runner import SessionSpec, open_session
from sandshell.session import events as ev
from sandshell.session.control import Control

CHECK_TIMEOUT = 30.0
SETUP_TIMEOUT = 60.0
HARD_GRACE = 30.0  # seconds past a task's time limit before a turn still running is stopped
OUTPUT_CHARS = 400  # of a failed check's or setup's output, kept in the result


@dataclass
class TaskResult:
    """One task run once: did its check pass, how the session ended, and its numbers."""

    task: str
    level: str
    variant: str = "default"
    repeat: int = 1
    passed: bool = False
    status: str = "error"  # how the session ended: done, max_steps, timeout, stuck, quit, error
    error: str | None = None
    check_output: str = ""
    steps: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    ttft: list[float] = field(default_factory=list)  # per model turn, seconds to the first token
    cache: list[float] = field(default_factory=list)  # per model turn, share of the prompt from the KV cache
    session: str | None = None  # the recording's folder

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Variant:
    """A labelled set of settings; every task runs once per variant (and repeat)."""

    label: str
    settings: Settings
    solutions: bool = False  # the tasks' reference solutions instead of a model


class TurnStats:
    """A sink that keeps each model turn's time to first token and cache share."""

    def __init__(self) -> None:
        self.ttft: list[float] = []
        self.cache: list[float] = []

    def emit(self, event: ev.Event) -> None:
        if isinstance(event, ev.ModelReplied) and event.stats.prompt_tokens:
            self.ttft.append(round(event.stats.ttft, 3))
            self.cache.append(round(event.stats.cached_tokens / event.stats.prompt_tokens, 3))


STOPPED = "stopped before the task ended (Ctrl-C or SIGTERM)"


class Stop:
    """How an eval run is stopped early: after each running task's current turn, or at once.

    No task starts once either is asked; the tasks that ran keep their results."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._controls: set[Control] = set()
        self.asked = ""  # "", "after the turn", "now"
        self.signal = 0  # the signal that asked, when one did

    def gently(self) -> None:
        """Each running session ends once its current turn has run (its model's answer and actions)."""
        with self._lock:
            self.asked = self.asked or "after the turn"
            for control in self._controls:
                control.stop_after_turn(STOPPED)

    def now(self) -> None:
        """Each running session stops at once (its command interrupted, its container removed)."""
        with self._lock:
            self.asked = "now"
            for control in self._controls:
                control.quit("quit", STOPPED)

    def watch(self, control: Control) -> None:
        with self._lock:
            self._controls.add(control)
            if self.asked == "now":
                control.quit("quit", STOPPED)
            elif self.asked:
                control.stop_after_turn(STOPPED)

    def forget(self, control: Control) -> None:
        with self._lock:
            self._controls.discard(control)


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_CHARS else "…" + text[-OUTPUT_CHARS:]


def attempt(
    task: Task, variant: Variant, out: Path, backend: Backend | None, repeat: int = 1, stop: Stop | None = None
) -> TaskResult:
    """Setup and session in one sandbox, the check in a fresh one; never raises for the task's or the model's faults."""
    stop = stop or Stop()
    res = TaskResult(task.name, task.level, variant.label, repeat)
    if variant.solutions:
        backend = ScriptBackend(task.solution_lines(), variant.settings.model.n_ctx, source=f"{task.name} solution")
    turns = TurnStats()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sandshell-eval-") as empty:
        base = variant.settings
        s = base.replace(
            sandbox=base.sandbox.replace(workspace=empty, workspace_mode="copy"),
            session=base.session.replace(
                sessions_dir=str(out / "sessions"),
                approval=False,
                max_steps=task.step_limit,
                max_seconds=task.time_limit,
            ),
        )
        control = Control()
        # The session checks its time limit between turns; a turn that runs on is stopped here.
        hard = threading.Timer(task.time_limit + HARD_GRACE, control.quit)
        stop.watch(control)
        try:
            spec = SessionSpec(s, task.goal, backend, [turns], control, log=lambda _: None)
            with open_session(spec) as session:
                res.session = str(session.folder)
                for command in task.setup:
                    r = session.sandbox.execute(command, SETUP_TIMEOUT)
                    if not r.ok:
                        why = f"{r.status_line()}): {command[:200]}: {_tail(r.output)}"
                        raise SandshellError(f"setup command failed ({why}")
                session.sandbox.execute("cd /app", 5)
                hard.start()
                outcome = session.run()
                hard.cancel()
                res.status, res.error = outcome.status, outcome.error
                res.steps, res.tokens_in, res.tokens_out = outcome.turns, outcome.tokens_in, outcome.tokens_out
                if stop.asked == "now" or (stop.asked and outcome.status == "quit"):  # stopped: not scored
                    res.status, res.error = "quit", STOPPED
                else:
                    if control.quitting:
                        res.status, res.error = "timeout", f"stopped in a turn {HARD_GRACE:g}s past the time limit"
                    check = run_check(session.sandbox, task.check, s.sandbox, CHECK_TIMEOUT)
                    res.passed = check.ok
                    res.check_output = _tail(check.output if check.error is None else check.error)
        except SandshellError as e:
            res.status, res.error = "error", str(e)
        finally:
            hard.cancel()
            stop.forget(control)
    res.seconds = round(time.monotonic() - started, 2)
    res.ttft, res.cache = turns.ttft, turns.cache
    return res


class Pool:
    """Backends per worker thread and variant, made on first use and reused."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, variant: Variant) -> Backend | None:
        if variant.solutions:
            return None
        made: dict[str, Backend] = self._local.__dict__.setdefault("made", {})
        if variant.label not in made:
            made[variant.label] = make_backend(variant.settings.model)
        return made[variant.label]


def jobs(tasks: list[Task], variants: list[Variant], repeat: int) -> Iterator[tuple[Task, Variant, int]]:
    """Every task, variant and repeat, variants interleaved so the machine's load falls on all alike."""
    for k in range(1, repeat + 1):
        for task in tasks:
            for variant in variants:
                yield task, variant, k


def run_suite(
    tasks: list[Task],
    variants: list[Variant],
    out: Path,
    parallel: int = 1,
    repeat: int = 1,
    on_result: Callable[[TaskResult, int, int], None] | None = None,
    stop: Stop | None = None,
) -> list[TaskResult]:
    """Run every job; `on_result(result, finished, total)` is called as each one ends (for progress).
    Once `stop` is asked, no job starts: the results are those of the jobs that ran."""
    todo = list(jobs(tasks, variants, repeat))
    pool, results, lock = Pool(), list[TaskResult](), threading.Lock()
    stop = stop or Stop()

    def one(job: tuple[Task, Variant, int]) -> TaskResult | None:
        task, variant, k = job
        if stop.asked:
            return None
        try:
            result = attempt(task, variant, out, pool.get(variant), k, stop)
        except SandshellError as e:  # the model could not be loaded
            result = TaskResult(task.name, task.level, variant.label, k, error=str(e))
        with lock:
            results.append(result)
            if on_result is not None:
                on_result(result, len(results), len(todo))
        return result

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as ex:
        ordered = list(ex.map(one, todo))
    return [r for r in ordered if r is not None]
