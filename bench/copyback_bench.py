"""The periodic copy back (archive transfer, rw mode): how long it holds the sandbox's lock.

Run: .venv/bin/python bench/copyback_bench.py [--files 20000] [--runs 5] [--listings 20]
A workspace of N small files goes into a container on the local engine (SANDSHELL_WORKSPACE_TRANSFER
=archive, as a remote engine would get it); after a first copy back, one file is changed and the
copy back is timed (sync_workspace holds the lock throughout, as the periodic one does), then the
same with nothing changed, then a command issued while a copy back runs (how long it waits).
Last, the listing alone, which every quick copy makes: the agent's over its channel against the
`find -printf` by `docker exec` that the host ran before (a program the model could replace),
alternately in the same container, `--listings` of each.
Prints a Markdown table (paste into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandshell import config
from sandshell.sandbox.sandbox import Sandbox


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--listings", type=int, default=20)
    args = ap.parse_args()
    settings = config.load()
    settings = settings.replace(
        sandbox=settings.sandbox.replace(workspace_transfer="archive", workspace_mode="rw", sync_seconds=0.0)
    )
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "workspace"
        for i in range(args.files):
            folder = ws / f"d{i // 1000:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"f{i}.txt").write_text(f"file {i}\n")
        with Sandbox(workspace=ws, settings=settings.sandbox) as sb:
            t = time.perf_counter()
            said = sb.sync_workspace()
            first = time.perf_counter() - t
            print(f"first copy back: {first * 1000:.0f} ms ({said})", file=sys.stderr)
            changed, same, waited = [], [], []
            for run in range(args.runs):
                sb.execute(f"echo run {run} > /app/d000/f0.txt")
                t = time.perf_counter()
                said = sb.sync_workspace()
                changed.append(time.perf_counter() - t)
                assert (ws / "d000" / "f0.txt").read_text() == f"run {run}\n", said
                t = time.perf_counter()
                sb.sync_workspace()
                same.append(time.perf_counter() - t)
                syncing = threading.Thread(target=sb.sync_workspace)
                sb.execute(f"echo again {run} > /app/d001/f1000.txt")
                syncing.start()
                time.sleep(0.005)
                t = time.perf_counter()
                sb.execute("true")
                waited.append(time.perf_counter() - t)
                syncing.join()
            print(f"last: {said}", file=sys.stderr)
            agent, by_exec = listings(sb, args.listings)
    load = os.getloadavg()[0]
    head = "first copy | one file changed | nothing changed | `true` during a copy"
    print(f"| {args.files} files, load {load:.1f} | {head} |")
    print("|---|---|---|---|---|")
    med = statistics.median
    print(
        f"| median of {args.runs} (ms) | {first * 1000:.0f} | {med(changed) * 1000:.0f} | {med(same) * 1000:.0f} "
        f"| {med(waited) * 1000:.0f} |"
    )
    print(f"\n| the listing alone, median of {args.listings} | agent (channel) | `find` (docker exec) |\n|---|---|---|")
    print(f"| {args.files} files (ms) | {med(agent) * 1000:.0f} | {med(by_exec) * 1000:.0f} |")


FIND = ["find", "/app", "-mindepth", "1", "-printf", "%y %m %n %s %C@ %i %P\\0"]


def listings(sb: Sandbox, n: int) -> tuple[list[float], list[float]]:
    """Seconds for each listing of /app: the agent's (what the copy back uses) and `find` by exec."""
    agent, by_exec = [], []
    for _ in range(n):
        t = time.perf_counter()
        records = sb._listing()
        agent.append(time.perf_counter() - t)
        t = time.perf_counter()
        code, out = sb.container.exec_run(FIND)
        by_exec.append(time.perf_counter() - t)
        assert records is not None and code == 0 and records.count(b"\0") == out.count(b"\0"), (code, len(out))
    return agent, by_exec


if __name__ == "__main__":
    main()
