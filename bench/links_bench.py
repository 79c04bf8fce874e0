"""What a quick measure costs when nothing changed, in a tree of many files of two links each.

Run: .venv/bin/python bench/links_bench.py [--files 200000] [--src DIR]
Builds FILES empty files under a/ with a second link each under b/ (in a temporary folder under
/tmp), measures the tree once in full with the agent's disk watchdog (`disktree.Tree`, from DIR,
default this checkout's src/), then times 20 quick measures with nothing changed (what the
watchdog does every 50 ms while a command runs). Compare agents with `git archive REV src`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("--src", default=str(Path(__file__).resolve().parent.parent / "src"))
    args = ap.parse_args()
    sys.path.insert(0, args.src)
    from sandshell_agent.disktree import Tree

    root = tempfile.mkdtemp(prefix="links-bench-", dir="/tmp")
    try:
        a, b = os.path.join(root, "a"), os.path.join(root, "b")
        os.mkdir(a)
        os.mkdir(b)
        for i in range(args.files):
            path = os.path.join(a, str(i))
            open(path, "wb").close()
            os.link(path, os.path.join(b, str(i)))
        tree = Tree(root)
        tree.measure()
        times = []
        for _ in range(20):
            start = time.perf_counter()
            tree.measure(full=False)
            times.append(time.perf_counter() - start)
        print(
            f"{args.container}: {args.files:,} files of two links, a quick measure with nothing changed:"
            f" median {statistics.median(times) * 1000:.1f} ms"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
