"""Where a `true`'s CPU goes, process by process: sandshell's `execute` against one bash kept open
with `docker exec -i` (the baseline the round trip is measured against), on one sandbox, alternating.

Run: .venv/bin/python bench/process_cpu_bench.py [--commands 3000] [--rounds 2]
Prints a Markdown table: the mean round trip and the CPU a command of dockerd, the container's
containerd-shim, this (host) process, the agent, its bash, and the `docker` CLI of the pipe (the
pipe's own bash is not read). Summed, each way's CPU is about its round trip: the hops follow
each other, so work on the path is what the round trip is made of.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psutil
from sandbox_bench import BashPipe
from sandbox_processes import agent_of, bash_of, cpu

from sandshell import config
from sandshell.sandbox.sandbox import Sandbox


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    settings = config.load(env_file=None, environ={})
    names = ("dockerd", "containerd-shim", "host", "agent", "bash", "docker CLI")
    print("| way | round trip | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workspace=Path(tmp), settings=settings.sandbox) as sb:
        for _ in range(300):
            sb.execute("true")
        agent = agent_of(sb)
        dockerd = next(p for p in psutil.process_iter(["name"]) if p.info["name"] == "dockerd")
        pipe = BashPipe(sb)
        for _ in range(100):
            pipe.round_trip()
        for _ in range(args.rounds):
            for way in ("sandshell", "pipe"):
                procs = {"dockerd": dockerd, "containerd-shim": agent.parent(), "host": psutil.Process()}
                if way == "sandshell":
                    procs |= {"agent": agent, "bash": bash_of(agent)}
                else:
                    procs["docker CLI"] = psutil.Process(pipe.proc.pid)
                before, start = {k: cpu(p) for k, p in procs.items()}, time.perf_counter()
                for _ in range(args.commands):
                    sb.execute("true") if way == "sandshell" else pipe.round_trip()
                wall = (time.perf_counter() - start) / args.commands
                used = {k: (cpu(p) - before[k]) / args.commands for k, p in procs.items()}
                cells = " | ".join(f"{used[n] * 1e6:.0f} µs" if n in used else "" for n in names)
                print(f"| {way} | {wall * 1e6:.0f} µs | {cells} |")
        pipe.close()


if __name__ == "__main__":
    main()
