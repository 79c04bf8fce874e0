"""Two or more agents side by side: floods (or `true` round trips) alternating between sandboxes whose
images are built from different `container/` folders (an older agent from `git archive`, a variant
under test), so the machine's noise falls on all of them alike.

Run: .venv/bin/python bench/agents_bench.py DIR [DIR ...] [--rounds 8] [--mb 100] [--commands N [--run TEXT]]
e.g. git archive HEAD~1 container | tar -x -C /tmp/old, then
     .venv/bin/python bench/agents_bench.py /tmp/old/container container
A DIR written DIR:source runs that image's agent from its Python source (SANDSHELL_AGENT_CODE=source),
e.g. `container:source container` sets the compiled agent against its source in one image.
Prints a Markdown table: MB/s (median and range) and the agent's CPU a flood (median; the agent is
the container's PID 1, read from the host's /proc, all its threads: the disk watchdog's included).
With --commands N: each round runs N `true`s (or `--run` commands) in each sandbox, and the table gives the median round
trip (its range over the rounds' medians), the mean and the 99th percentile of all, the agent's and
bash's CPU a command, and the time the container's CPU limit held it back (CFS throttling, from its
cgroup: what a variant that spends more CPU on waiting costs under SANDSHELL_CPUS).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from sandbox_processes import agent_of, bash_of, cpu

from sandshell import config
from sandshell.sandbox import image
from sandshell.sandbox.protocol import Output
from sandshell.sandbox.sandbox import Sandbox


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("containers", nargs="+", help="container/ folders to build images from (DIR:source: not compiled)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--commands", type=int, default=0, help="round trips of `true` a round instead of floods")
    ap.add_argument("--run", default="true", help="the command of --commands (e.g. 'echo hello')")
    args = ap.parse_args()
    settings = config.load(env_file=None, environ={})
    settings = settings.replace(sandbox=settings.sandbox.replace(output_limit=0, spill_limit=0, max_exit_timeout=600))
    command = f"head -c {args.mb}M /dev/zero | tr '\\0' 'x' | fold -w 99"
    rows: dict[str, list[tuple[float, float]]] = {c: [] for c in args.containers}
    with contextlib.ExitStack() as stack:
        boxes = []
        for name in args.containers:
            folder = Path(name.removesuffix(":source")).resolve()
            image.container_dir = lambda folder=folder: folder  # type: ignore[attr-defined,misc]
            code = "source" if name.endswith(":source") else "compiled"
            workspace = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            sb = stack.enter_context(Sandbox(workspace=workspace, settings=settings.sandbox.replace(agent_code=code)))
            boxes.append((name, sb, agent_of(sb)))
            sb.execute("true")
        if args.commands:
            round_trips(boxes, args.rounds, args.commands, args.run)
            return
        for _ in range(args.rounds):
            for name, sb, agent in boxes:
                before, start = cpu(agent), time.perf_counter()
                got = sum(len(e.data) for e in sb.stream(command, timeout=300) if isinstance(e, Output))
                assert got >= args.mb << 20, got
                rows[name].append((args.mb / (time.perf_counter() - start), cpu(agent) - before))
    print(f"({args.rounds} rounds of {args.mb} MB, alternating)")
    print("| agent from | MB/s, median (range) | agent CPU a flood |")
    print("|---|---|---|")
    for name, runs in rows.items():
        mbs, used = (list(c) for c in zip(*runs, strict=True))
        speed = f"{statistics.median(mbs):.0f} ({min(mbs):.0f}-{max(mbs):.0f})"
        print(f"| {name} | {speed} | {statistics.median(used):.2f} s |")


def throttled(container_id: str) -> float:
    """Seconds the container's CPU limit has held it back so far (cgroup v1 or v2); NaN if not found."""
    for folder in (
        f"/sys/fs/cgroup/cpu,cpuacct/docker/{container_id}",
        f"/sys/fs/cgroup/cpu/docker/{container_id}",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope",
    ):
        with contextlib.suppress(OSError):
            stat = dict(line.split() for line in Path(folder, "cpu.stat").read_text().splitlines())
            if "throttled_usec" in stat:
                return int(stat["throttled_usec"]) / 1e6
            return int(stat["throttled_time"]) / 1e9
    return math.nan


def round_trips(boxes: list[tuple[str, Sandbox, psutil.Process]], rounds: int, commands: int, run: str) -> None:
    rows: dict[str, list[tuple[float, float, float, float]]] = {folder: [] for folder, _, _ in boxes}
    every: dict[str, list[float]] = {folder: [] for folder, _, _ in boxes}
    for _ in range(rounds):
        for folder, sb, agent in boxes:
            bash = bash_of(agent)
            before, times = (cpu(agent), cpu(bash), throttled(sb.container.id)), []
            for _ in range(commands):
                start = time.perf_counter()
                sb.execute(run)
                times.append(time.perf_counter() - start)
            every[folder] += times
            held = throttled(sb.container.id) - before[2]
            rows[folder].append(
                (
                    statistics.median(times),
                    (cpu(agent) - before[0]) / commands,
                    (cpu(bash) - before[1]) / commands,
                    held,
                )
            )
    print(f"({rounds} rounds of {commands} `{run}`s, alternating)")
    print(
        "| agent from | round trip, median (range of the rounds') | mean, p99 | agent CPU a command "
        "| bash CPU a command | held back by the CPU limit |"
    )
    print("|---|---|---|---|---|---|")
    for folder, got in rows.items():
        med, agent_cpu, bash_cpu, held = (list(c) for c in zip(*got, strict=True))
        times = sorted(every[folder])
        print(
            f"| {folder} | {statistics.median(med) * 1e3:.3f} ms ({min(med) * 1e3:.3f}-{max(med) * 1e3:.3f}) "
            f"| {statistics.mean(times) * 1e3:.3f}, {times[int(len(times) * 0.99)] * 1e3:.3f} ms "
            f"| {statistics.median(agent_cpu) * 1e3:.3f} ms | {statistics.median(bash_cpu) * 1e3:.3f} ms "
            f"| {sum(held) * 1e3:.0f} ms in all |"
        )


if __name__ == "__main__":
    main()
