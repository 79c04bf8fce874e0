"""What the agent's disk watchdog costs: the agent's CPU idle, while a quiet command runs, and in a flood.

Run: .venv/bin/python bench/watchdog_bench.py [--seconds 20] [--mb 100] [--agent DIR] [--no-limits]
The agent is the container's PID 1; its CPU (every thread) is read from the host's /proc. --agent
builds the sandbox image with the agent package in another folder (an older agent, say, from `git worktree`)
to compare in the same run conditions; --no-limits turns the disk limits off, so the watchdog
watches only the workspace (for set-id bits), which is the floor. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from sandshell import config
from sandshell.sandbox import image
from sandshell.sandbox.protocol import Output
from sandshell.sandbox.sandbox import Sandbox

TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid: int) -> float:
    """Seconds of CPU a process (all its threads) has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def watches(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            count += Path(f"/proc/{pid}/fdinfo/{fd}").read_text().count("inotify wd:")
        except OSError:
            pass
    return count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--agent", type=Path, help="build the image with the sandshell_agent package in this folder")
    ap.add_argument("--no-limits", action="store_true")
    args = ap.parse_args()
    if args.agent:
        image.agent_dir = lambda: args.agent.resolve()  # type: ignore[attr-defined]
    settings = config.load(env_file=None, environ={})
    settings = settings.replace(sandbox=settings.sandbox.replace(output_limit=0, spill_limit=0, max_exit_timeout=600))
    if args.no_limits:
        settings = settings.replace(sandbox=settings.sandbox.replace(workspace_limit=0, scratch_limit=0, file_limit=0))
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workspace=Path(tmp), settings=settings.sandbox) as sb:
        sb.container.reload()
        pid = sb.container.attrs["State"]["Pid"]
        sb.execute("true")
        time.sleep(3)  # the first full measures
        rows = []
        c0 = cpu(pid)
        time.sleep(args.seconds)
        rows.append(("idle (between commands)", (cpu(pid) - c0) / args.seconds * 1000, "ms a second"))
        c0 = cpu(pid)
        sb.execute(f"sleep {args.seconds}", timeout=args.seconds + 30)
        rows.append(
            (f"a quiet command (`sleep {args.seconds:.0f}`)", (cpu(pid) - c0) / args.seconds * 1000, "ms a second")
        )
        command = f"head -c {args.mb}M /dev/zero | tr '\\0' 'x' | fold -w 99"
        per, rates = [], []
        for _ in range(3):
            c0, t = cpu(pid), time.perf_counter()
            got = sum(len(e.data) for e in sb.stream(command, timeout=300) if isinstance(e, Output))
            per.append(cpu(pid) - c0)
            rates.append(args.mb / (time.perf_counter() - t))
            assert got >= args.mb << 20, got
        rows.append(
            (
                f"{args.mb} MB of output (median of 3, {statistics.median(rates):.0f} MB/s)",
                statistics.median(per) * 1000,
                "ms",
            )
        )
        files = "mkdir -p /root/w && for i in $(seq 1 2000); do echo x > /root/w/f$i; done; rm -rf /root/w"
        c0, t = cpu(pid), time.perf_counter()
        sb.execute(files, timeout=120)
        took = time.perf_counter() - t
        rows.append((f"2,000 files made and removed outside /app ({took:.1f} s)", (cpu(pid) - c0) * 1000, "ms"))
        n = watches(pid)
    print(
        f"(agent from {args.agent or image.agent_dir()}; limits {'off' if args.no_limits else 'on'}; "
        f"{n} inotify watches)"
    )
    print("| the agent's CPU | |")
    print("|---|---|")
    for what, value, unit in rows:
        print(f"| {what} | {value:.1f} {unit} |")


if __name__ == "__main__":
    main()
