"""What isolation costs: a standard session's start and end on a network of its own against Docker's
default bridge, and a task's check in a fresh sandbox against the check in the session's own shell.

    .venv/bin/python bench/isolation_bench.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sandshell import config
from sandshell.eval.check import run_check
from sandshell.sandbox.container import ContainerSpec
from sandshell.sandbox.sandbox import Sandbox

CHECK = '[ "$(cat /app/list.txt)" = "$(printf "one\\ntwo")" ]'


def timed(runs: int, one: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    pairs = [one() for _ in range(runs)]
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def start_and_end(settings: config.Settings, workspace: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    box = Sandbox(workspace=workspace, settings=settings.sandbox)
    box.start()
    t1 = time.perf_counter()
    box.kill()
    return t1 - t0, time.perf_counter() - t1


def check(settings: config.Settings, workspace: Path, fresh: bool) -> float:
    with Sandbox(workspace=workspace, settings=settings.sandbox) as box:
        box.execute("printf 'one\\ntwo\\n' > /app/list.txt")
        t0 = time.perf_counter()
        result = run_check(box, CHECK, settings.sandbox, 30) if fresh else box.execute(f"cd /app && {CHECK}", 30)
        assert result.ok, result.status_line()
        return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandshell-bench-") as home:
        settings = config.load(env_file=None, environ={"SANDSHELL_HOME": home})
        ws = Path(home) / "workspace"
        ws.mkdir()
        own = timed(args.runs, lambda: start_and_end(settings, ws))
        network = ContainerSpec.network
        ContainerSpec.network = property(lambda self: None)  # type: ignore[assignment,method-assign]
        try:
            shared = timed(args.runs, lambda: start_and_end(settings, ws))
        finally:
            ContainerSpec.network = network  # type: ignore[method-assign]
        print("| standard session | start (median) | end (median) |\n|---|---|---|")
        print(f"| Docker's default bridge | {shared[0] * 1000:.0f} ms | {shared[1] * 1000:.0f} ms |")
        print(f"| a network of its own | {own[0] * 1000:.0f} ms | {own[1] * 1000:.0f} ms |")
        eval_settings = settings.replace(sandbox=settings.sandbox.replace(workspace_mode="copy", profile="locked"))
        in_shell = statistics.median(check(eval_settings, ws, False) for _ in range(args.runs))
        fresh = statistics.median(check(eval_settings, ws, True) for _ in range(args.runs))
        print("\n| a task's check (locked, copy mode) | median |\n|---|---|")
        print(f"| in the session's own shell | {in_shell * 1000:.0f} ms |")
        print(f"| in a fresh sandbox with the final /app | {fresh * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
