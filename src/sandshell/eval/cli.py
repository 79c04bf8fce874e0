"""`sandshell eval`: run a task suite (progress on stderr, results and summary on stdout, JSON), or compare two runs."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from types import FrameType
from typing import Any

from sandshell import config
from sandshell.errors import SandshellError
from sandshell.eval import report
from sandshell.eval.run import Stop, TaskResult, Variant, run_suite
from sandshell.eval.task import TaskError, load_tasks, select
from sandshell.resources import command
from sandshell.safe_text import say, visible

BAR = 30


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sandshell eval", description="Run a task suite and measure the success rate.")
    p.add_argument("tasks", nargs="*", help="task files or folders of them (*.toml)")
    p.add_argument("--parallel", type=int, default=1, help="tasks at once, each with its own model (default 1)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each task (default 1)")
    p.add_argument("--backend", choices=["llama", "openai", "script"], help="model backend")
    p.add_argument("--model", help="GGUF file (LLAMA_MODEL_PATH)")
    p.add_argument("--level", action="append", help="only tasks of this level (repeatable)")
    p.add_argument("--tag", action="append", help="only tasks with this tag (repeatable)")
    p.add_argument(
        "--variant",
        action="append",
        metavar="LABEL[:NAME=VALUE,...]",
        help="a labelled set of settings (as in .env) to run every task with; repeat to measure settings "
        "on and off in the same run, e.g. --variant off --variant fewshot:LLAMA_FEW_SHOT=true",
    )
    p.add_argument(
        "--time-scale", type=float, default=1.0, help="multiply every task's time limit (a loaded machine: 2 or more)"
    )
    p.add_argument("--solutions", action="store_true", help="run each task's reference solution, not a model")
    p.add_argument("--out", help="folder for the recordings and results (default sessions/eval-<time>)")
    p.add_argument("--json", help="where to write the results as JSON (default <out>/results.json)")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="show what changed between two runs")
    return p


def variants(args: argparse.Namespace) -> list[Variant]:
    """The settings of each variant: .env and the environment, the variant's own values, then the flags."""
    out: list[Variant] = []
    for spec in args.variant or ["default"]:
        label, _, pairs = spec.partition(":")
        env = dict(os.environ)
        for pair in filter(None, (p.strip() for p in pairs.split(","))):
            name, eq, value = pair.partition("=")
            if not eq or not name.startswith(("LLAMA_", "SANDSHELL_")):
                raise TaskError(f"--variant {spec!r}: {pair!r} is not NAME=VALUE with a LLAMA_ or SANDSHELL_ name")
            env[name] = value
        s = config.load(environ=env)
        changes = {"backend": args.backend, "model_path": args.model}
        s = s.replace(model=s.model.replace(**{k: v for k, v in changes.items() if v is not None}))
        if not label or any(v.label == label for v in out):
            raise TaskError(f"--variant {spec!r}: each variant needs its own label")
        out.append(Variant(label, s, solutions=args.solutions))
    return out


class Progress:
    """A bar on stderr (redrawn in place on a terminal), with a line per finished task above it."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.passed = 0
        self.started = time.monotonic()

    def __call__(self, result: TaskResult, done: int, total: int) -> None:
        self.passed += result.passed
        line = visible(report.result_line(result.to_json()))
        filled = BAR * done // total
        took = time.monotonic() - self.started
        bar = f"[{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} passed {self.passed} · {took:.0f}s"
        if self.tty:
            sys.stderr.write(f"\r\x1b[K{line}\n{bar}")
        else:
            sys.stderr.write(f"{line}\n{bar}\n")
        sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    if not args.tasks:
        raise TaskError("name the tasks to run: a folder (e.g. tasks/) or task files")
    if args.parallel < 1 or args.repeat < 1 or not 0 < args.time_scale <= 100:
        raise TaskError("--parallel and --repeat must be 1 or more, --time-scale above 0 and at most 100")
    tasks = select(load_tasks(args.tasks), args.level, args.tag)
    tasks = [t.model_copy(update={"time_limit": t.time_limit * args.time_scale}) for t in tasks]
    if not tasks:
        raise TaskError("no task matches the --level and --tag given")
    vs = variants(args)
    first = vs[0].settings
    out = (
        first.path(args.out)
        if args.out
        else first.path(first.session.sessions_dir) / time.strftime("eval-%Y%m%d-%H%M%S")
    )
    out.mkdir(parents=True, exist_ok=True)
    say(f"{len(tasks)} tasks × {len(vs)} variant(s) × {args.repeat}; recordings in {out}/sessions")
    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "argv": sys.argv[1:],
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "parallel": args.parallel,
        "repeat": args.repeat,
        "time_scale": args.time_scale,
        "variants": {v.label: _described(v) for v in vs},
    }
    stop = Stop()
    total = len(tasks) * len(vs) * args.repeat
    with _stopped_by_signals(stop):
        results = run_suite(tasks, vs, out, args.parallel, args.repeat, on_result=Progress(), stop=stop)
    sys.stderr.write("\n")
    if stop.asked:
        meta["stopped"] = f"{stop.asked}: {len(results)} of {total} tasks ran"
    meta["load_after"] = [round(x, 2) for x in os.getloadavg()]
    doc = report.document([r.to_json() for r in results], meta)
    path = Path(args.json) if args.json else out / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=True) + "\n", encoding="utf-8")
    for r in doc["results"]:
        print(visible(report.result_line(r) + (f"  [{r['session']}]" if not r["passed"] and r["session"] else "")))
    print()
    print(report.table(doc["summary"]))
    if stop.asked:
        say(f"stopped early ({stop.asked}): {len(results)} of {total} tasks ran; the table counts those only")
    say(f"results in {path}; replay a task with {command('replay <its recording>')}")
    return 128 + stop.signal if stop.asked else 0  # as a shell reports a process its signal ended


@contextlib.contextmanager
def _stopped_by_signals(stop: Stop) -> Iterator[None]:
    """The first Ctrl-C stops each task after its current turn, a second at once; SIGTERM (and
    SIGHUP) at once. Either way the run ends with what ran: its lines, table and JSON."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.signal = signum
        if signum == signal.SIGINT and not stop.asked:
            say("stopping after each running task's current turn (Ctrl-C again stops at once)")
            stop.gently()
        else:
            say("stopping now")
            stop.now()

    before = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _described(v: Variant) -> dict[str, Any]:
    s = v.settings
    model = "solutions" if v.solutions else s.model.backend + (f" {s.model.model_path}" if s.model.model_path else "")
    return {"model": model, "changed": {k: str(val) for k, val in _changed(s).items()}}


def _changed(s: config.Settings) -> dict[str, Any]:
    """The settings a variant changed from the defaults, by field name (where things live and secrets left out)."""
    base = dict(config.Settings().sections())
    keep = {"workspace", "sessions_dir", "openai_api_key", "api_token", "home"}
    return {
        f.name: getattr(section, f.name)
        for name, section in s.sections()
        for f in fields(section)
        if f.name not in keep and getattr(section, f.name) != getattr(base[name], f.name)
    }


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        if args.compare:
            a, b = (report.load(p) for p in args.compare)
            names = [Path(p).name for p in args.compare]
            if names[0] == names[1]:  # two results.json: name them by their folders
                names = [f"{Path(p).parent.name}/{Path(p).name}" for p in args.compare]
            print(report.compare(a, b, (names[0], names[1])))
            return 0
        return run(args)
    except SandshellError as e:
        say(str(e))
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
