"""The agent's own cost of a `true`, per thread, with no engine hop and no host library in the way.

Run: .venv/bin/python bench/agent_cpu_bench.py [--commands 3000] [--rounds 2]
Starts a sandbox on the machine's engine, then, inside its container, a second agent on plain pipes
(its settings from the container's environment, as the real one has them) and a plain `bash` fed
`true; echo SENTINEL` the same way, alternating. For each arm: the median round trip and the CPU a
command of each of the agent's threads (from /proc, over all the commands of a round). Arms:
- `default`: the agent as it runs;
- `no-scratch-watch`: without the disk watchdog of the container's own files (SANDSHELL_SCRATCH_LIMIT=0),
  whose full measure every 2 s of commands is the agent's second-largest cost.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from sandshell import config
from sandshell.sandbox.sandbox import Sandbox

INSIDE = r"""
import json, os, statistics, subprocess, sys, time
from sandshell_agent import PROTOCOL_VERSION
n, rounds, arms = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
tick = os.sysconf("SC_CLK_TCK")

def threads(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            name = f.read().strip()
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out

def agent_arm(env_extra):
    env = dict(os.environ, SANDSHELL_STATE_DIR="/run/sandshell-agent/bench", SANDSHELL_WORKDIR="/tmp", **env_extra)
    p = subprocess.Popen([sys.executable, "-m", "sandshell_agent", "--stdio"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0)
    buf = b""
    def frame(kind):
        nonlocal buf
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                data = os.read(p.stdout.fileno(), 65536)
                if not data:
                    raise SystemExit("the agent ended")
                buf += data
                continue
            f, buf = json.loads(buf[:nl]), buf[nl + 1:]
            if f.get("type") == kind:
                return f
    def run(cid):
        p.stdin.write(json.dumps({"type": "run", "id": cid, "command": "true", "timeout": 10}).encode() + b"\n")
        frame("exit")
    p.stdin.write(json.dumps({"type": "hello", "version": PROTOCOL_VERSION}).encode() + b"\n")
    frame("hello")
    for i in range(200):
        run(f"warm{i}")
    before, times = threads(p.pid), []
    for i in range(n):
        t = time.perf_counter()
        run(str(i))
        times.append(time.perf_counter() - t)
    after = threads(p.pid)
    p.stdin.close()
    p.wait()
    cpu = {}
    for tid, (name, secs) in after.items():
        key = "main" if tid == str(p.pid) else "other threads"
        cpu[key] = cpu.get(key, 0.0) + (secs - before.get(tid, (name, 0.0))[1]) / n
    return statistics.median(times), cpu

def bash_arm():
    b = subprocess.Popen(["bash"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        os.write(b.stdin.fileno(), b"true; echo __S__\n")
        got = b""
        while not got.endswith(b"__S__\n"):
            got += os.read(b.stdout.fileno(), 65536)
        times.append(time.perf_counter() - t)
    b.stdin.close()
    b.wait()
    return statistics.median(times)

results = {name: [] for name in arms}
pipe = []
for _ in range(rounds):
    for name, extra in arms.items():
        results[name].append(agent_arm(extra))
        pipe.append(bash_arm())
print(json.dumps({"agent": results, "pipe": pipe}))
"""

ARMS = {"default": {}, "no-scratch-watch": {"SANDSHELL_SCRATCH_LIMIT": "0"}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    settings = config.load(env_file=None, environ={})
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workspace=Path(tmp), settings=settings.sandbox) as sb:
        sb.execute("true")
        inside = ["python3", "-", str(args.commands), str(args.rounds), json.dumps(ARMS)]
        argv = ["docker", "exec", "-i", sb.container.id, *inside]
        out = subprocess.run(argv, input=INSIDE.encode(), capture_output=True)
    if out.returncode:
        raise SystemExit(f"the in-container run failed: {out.stderr.decode()[-2000:]}")
    got = json.loads(out.stdout.decode().strip().splitlines()[-1])
    us = 1e6
    pipe = ", ".join(f"{t * us:.0f}" for t in got["pipe"])
    print(f"plain `bash` on pipes, round trip (median, each round): {pipe} µs\n")
    print("| arm | round trip, median (each round) | agent CPU a command, by thread (each round) |")
    print("|---|---|---|")
    for name, rounds in got["agent"].items():
        trips = ", ".join(f"{t * us:.0f}" for t, _ in rounds)
        cpu = "; ".join(", ".join(f"{k} {v * us:.0f}" for k, v in sorted(c.items()) if v > 0) for _, c in rounds)
        print(f"| {name} | {trips} µs | {cpu} (µs) |")


if __name__ == "__main__":
    main()
