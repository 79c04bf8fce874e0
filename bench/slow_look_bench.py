"""How far a writer into a file deleted while held open gets past the workspace limit while its looks
through /proc are made slow; with --fast, how far a fast plain writer gets past it then.

Run: .venv/bin/python bench/slow_look_bench.py [--runs 3] [--no-stall] [--fast] [--agent DIR]
A sandbox with 50 MB limits. Each run first starts 13 processes of 4,000 descriptors each in it (what
makes a look through /proc as slow as its bounds allow: ~0.3 s), then a command that opens /app/gone,
deletes it and writes 2 MB every 0.25 s into it (8 MB/s; no folder shows the file, only a look
does). The limit is reached after ~6.25 s of writing: the time the command ran past that, times
8 MB/s, is what went past. (The trip kills what the shell started, the stalling processes too: so
they are started again for every run.)
--fast: the writer writes files of 10 MB into /app as fast as it can (~700 MB/s here), and what went
past is what the host's disk lost beyond the limit, and what the notice says the workspace grew to.
--agent DIR: the sandbox image built with the agent package in DIR (as in watchdog_bench.py).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sandshell import config
from sandshell.sandbox.sandbox import Sandbox

LIMIT = 50_000_000
# As in tests/agent/test_disk.py: 13 processes of 4,000 descriptors, past the 50,000 a look reads.
STALL = """
import os, time
for p in range(13):
    if os.fork() == 0:
        fd = os.open("/etc/passwd", os.O_RDONLY)
        for _ in range(4000):
            os.dup(fd)
        while True:
            time.sleep(3600)
time.sleep(2)
print("up", flush=True)
"""
RATE = 8e6  # bytes a second the writer writes
WRITER = (
    "exec 3>/app/gone; rm /app/gone; for i in $(seq 1 80); do head -c 2000000 /dev/zero >&3; sleep 0.25; done;"
    " echo after"
)
FAST = "for i in $(seq 1 100); do head -c 10000000 /dev/zero > /app/w$i; done; echo after"
UP = (
    "rm -f /tmp/stall.log; python3 /tmp/stall.py > /tmp/stall.log 2>&1 &"
    " for i in $(seq 60); do grep -q up /tmp/stall.log && break; sleep 1; done; cat /tmp/stall.log"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-stall", action="store_true", help="the writer alone, for comparison")
    ap.add_argument("--fast", action="store_true", help="a fast writer of plain files instead")
    ap.add_argument("--agent", type=Path, help="build the image with the sandshell_agent package in this folder")
    args = ap.parse_args()
    if args.agent:
        from sandshell.sandbox import image

        image.agent_dir = lambda: args.agent.resolve()  # type: ignore[attr-defined,misc]
    if args.fast:
        print("| run | stalled looks | the command ran | the host lost | the notice: grew to |")
    else:
        print("| run | stalled looks | the command ran | past the limit at 8 MB/s | notice |")
    print("|---|---|---|---|---|")
    pasts: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        ws, home = Path(tmp) / "workspace", Path(tmp) / "home"
        ws.mkdir()
        s = config.load(env_file=None, environ={"SANDSHELL_HOME": str(home)})
        s = s.replace(
            sandbox=s.sandbox.replace(workspace_limit=LIMIT, scratch_limit=LIMIT, file_limit=1024**3, exit_timeout=60.0)
        )
        with Sandbox(workspace=ws, settings=s.sandbox) as sb:
            sb.write_file("/tmp/stall.py", STALL)
            for run in range(1, args.runs + 1):
                if not args.no_stall and sb.execute(UP, timeout=90).output.strip() != "up":
                    raise SystemExit("the stalling processes did not start")
                start, free = time.monotonic(), shutil.disk_usage(ws).free
                r = sb.execute(FAST if args.fast else WRITER, timeout=60)
                took = time.monotonic() - start
                if args.fast:
                    lost = free - shutil.disk_usage(ws).free
                    grew = re.search(r"grew to ([\d.]+ \w+)", r.notice or "")
                    print(f"| {run} | {not args.no_stall} | {took:.1f} s | {lost / 1e6:.0f} MB | {grew and grew[1]} |")
                    sb.execute("rm -f /app/w*", timeout=60)
                    pasts.append(lost - LIMIT)
                else:
                    past = max(0.0, took - LIMIT / RATE) * RATE
                    print(f"| {run} | {not args.no_stall} | {took:.1f} s | ~{past / 1e6:.0f} MB | {bool(r.notice)} |")
                    sb.execute("exec 3>&-")
                    pasts.append(past)
    mb = sorted(p / 1e6 for p in pasts)
    print(f"\npast the limit: median {statistics.median(mb):.0f} MB, worst {mb[-1]:.0f} MB ({len(mb)} runs)")


if __name__ == "__main__":
    main()
