"""A `true` round trip in a workspace owned by a host user who is not root, by the workspace's size.

Run (as root, which may hand the files to uid 1000): .venv/bin/python bench/owner_bench.py [--files 0 2000 10000]
After each command the agent gives what the model made back to the workspace's owner (files.Owner);
this shows what that costs as the workspace grows. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from sandshell import config
from sandshell.sandbox.sandbox import Sandbox


def workspace(base: Path, files: int) -> Path:
    ws = base / f"ws{files}"
    ws.mkdir()
    for d in range(files // 100):
        (ws / f"d{d}").mkdir()
        for f in range(100):
            (ws / f"d{d}" / f"f{f}").write_text("x")
    for root, dirs, names in os.walk(ws):
        for name in dirs + names:
            os.lchown(os.path.join(root, name), 1000, 1000)
    os.chown(ws, 1000, 1000)
    return ws


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, nargs="+", default=[0, 2000, 10000])
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    settings = config.load(env_file=None, environ={})
    print("| files in the workspace (owned by uid 1000) | `true` round trip, median | p95 |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for files in args.files:
            with Sandbox(workspace=workspace(Path(tmp), files), settings=settings.sandbox) as sb:
                for _ in range(20):
                    sb.execute("true")
                times = []
                for _ in range(args.runs):
                    t = time.perf_counter()
                    sb.execute("true")
                    times.append(time.perf_counter() - t)
            times.sort()
            median, p95 = statistics.median(times) * 1000, times[int(len(times) * 0.95)] * 1000
            print(f"| {files:,} | {median:.2f} ms | {p95:.2f} ms |")


if __name__ == "__main__":
    main()
