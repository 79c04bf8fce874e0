"""What a command's length costs: `execute(": " + text)` for 2 KB and 100 KB of ASCII and of `é`.

Run: .venv/bin/python bench/command_size_bench.py [--runs 20]
Prints the median time of each, in a sandbox on the machine's engine (the image built if needed).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sandshell import config
from sandshell.sandbox.sandbox import Sandbox


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    settings = config.load(env_file=None, environ={})
    with tempfile.TemporaryDirectory() as ws, Sandbox(workspace=Path(ws), settings=settings.sandbox) as sb:
        print("| command | median |")
        print("|---|---|")
        for size in (2_000, 100_000):
            for char in ("x", "é"):
                command = ": " + char * (size // len(char.encode()))
                times = []
                for _ in range(args.runs):
                    start = time.perf_counter()
                    result = sb.execute(command, timeout=60)
                    times.append(time.perf_counter() - start)
                    assert result.return_code == 0, result
                label = "ASCII" if char == "x" else "all `é`"
                print(f"| {size // 1000} KB, {label} | {statistics.median(times) * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
