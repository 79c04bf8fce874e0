"""Where a `true` round trip goes: the CPU each process spends on one, and the engine's own floors.

Run: .venv/bin/python bench/roundtrip_bench.py [--commands 2000]
Three measures on the machine's engine:
- sandshell: `execute("true")` N times; the wall time a command and the CPU a command of the agent
  (the container's PID 1, all threads), of bash (the agent's shell) and of this host process; then
  N pings (host to agent and back, no shell): what the shell's part of a command adds is the difference;
- the engine's floor for our transport: `cat` as a container's main process, one line written to
  its attach stream and read back (what any agent attached this way pays before doing anything);
- the floor of the baseline (one bash kept open by `docker exec -i`): `cat` under `docker exec -i` in the
  same container.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import docker
import psutil
from sandbox_processes import agent_of, bash_of, cpu
from sidecar import sidecar

from sandshell import config
from sandshell.sandbox.sandbox import Sandbox


def echo_times(write: object, read: object, lines: int) -> float:
    """Median seconds to have one line echoed back."""
    times = []
    for i in range(lines):
        msg = f"line{i}\n".encode()
        start = time.perf_counter()
        write(msg)  # type: ignore[operator]
        got = b""
        while not got.endswith(msg):
            got += read()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times[lines // 10 :])


def floors(tag: str, lines: int) -> tuple[float, float]:
    client = docker.from_env()
    box = sidecar(client, tag, ["cat"], "roundtrip")
    try:
        box.start()
        attached = client.api.attach_socket(box.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        sock = attached._sock
        attach = echo_times(sock.sendall, lambda: sock.recv(65536), lines)
        proc = subprocess.Popen(
            ["docker", "exec", "-i", box.id, "cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        assert proc.stdin is not None and proc.stdout is not None
        out = proc.stdout.fileno()
        exec_ = echo_times(proc.stdin.write, lambda: os.read(out, 65536), lines)
        proc.stdin.close()
        proc.wait()
        attached.close()
        return attach, exec_
    finally:
        box.remove(force=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=2000)
    args = ap.parse_args()
    settings = config.load(env_file=None, environ={})
    n = args.commands
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workspace=Path(tmp), settings=settings.sandbox) as sb:
        agent = agent_of(sb)
        for _ in range(50):
            sb.execute("true")
        bash = bash_of(agent)
        me = psutil.Process()
        before = (cpu(agent), cpu(bash), cpu(me))
        start = time.perf_counter()
        for _ in range(n):
            sb.execute("true")
        wall = (time.perf_counter() - start) / n
        used = [(b - a) / n for a, b in zip(before, (cpu(agent), cpu(bash), cpu(me)), strict=True)]
        pings = []
        for _ in range(n):
            t = time.perf_counter()
            sb.ping()
            pings.append(time.perf_counter() - t)
        ping = statistics.median(pings[n // 10 :])
        tag = sb.container.attrs["Config"]["Image"]
    attach, exec_ = floors(tag, n)
    ms = 1000
    print(f"| a `true` round trip ({n} commands) | ms |")
    print("|---|---|")
    print(f"| sandshell, wall time a command (mean) | {wall * ms:.3f} |")
    print(f"| sandshell, a ping: host to agent and back, no shell (median) | {ping * ms:.3f} |")
    print(f"| CPU a command: the agent (all threads) | {used[0] * ms:.3f} |")
    print(f"| CPU a command: bash (the wrapper, its reads and writes) | {used[1] * ms:.3f} |")
    print(f"| CPU a command: the host library (this process) | {used[2] * ms:.3f} |")
    print(
        f"| the engine's floor for an attached agent: a line echoed by `cat` through the attach stream (median) "
        f"| {attach * ms:.3f} |"
    )
    print(f"| the floor under the baseline: a line echoed by `cat` in `docker exec -i` (median) | {exec_ * ms:.3f} |")


if __name__ == "__main__":
    main()
