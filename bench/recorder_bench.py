"""What the recording's per-event fsync costs: events a second, with and without it.

Run: .venv/bin/python bench/recorder_bench.py [--events 2000] [--dir /path/on/the/disk/to/measure]

Three event mixes: model tokens (a few characters each, the commonest event), output chunks
of 4 KiB (a command streaming), and a session's mix as recorded by the default model.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

from sandshell.session import events as ev
from sandshell.session.recorder import Recorder

MIXES: dict[str, list[ev.Event]] = {
    "model token (4 chars)": [ev.ModelText("tok ")],
    "output chunk (4 KiB)": [ev.OutputChunk("stdout", ("x" * 79 + "\n") * 51 + "x" * 15)],
    "session mix": [ev.ModelText("tok ")] * 20
    + [ev.OutputChunk("stdout", "line of output\n" * 20), ev.Phase("running")],
}


def rate(folder: Path, events: list[ev.Event], n: int, fsync: bool) -> tuple[float, float]:
    """Events a second, and the 99th percentile of one emit in milliseconds."""
    recorder = Recorder(folder)
    times: list[float] = []
    patch = mock.patch("os.fsync") if not fsync else mock.patch("os.fsync", os.fsync)
    with patch:
        start = time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            recorder.emit(events[i % len(events)])
            times.append(time.perf_counter() - t)
        total = time.perf_counter() - start
    recorder.close()
    return n / total, statistics.quantiles(times, n=100)[98] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--dir", default=None, help="a folder on the disk to measure (default: the temp folder)")
    args = parser.parse_args()
    for name, events in MIXES.items():
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            synced, p99s = rate(Path(tmp) / "a", events, args.events, fsync=True)
            flushed, p99f = rate(Path(tmp) / "b", events, args.events, fsync=False)
        print(
            f"{name:24} fsync: {synced:8,.0f} events/s (p99 {p99s:.2f} ms)   "
            f"flush only: {flushed:9,.0f} events/s (p99 {p99f:.2f} ms)   cost x{flushed / synced:.1f}"
        )


if __name__ == "__main__":
    main()
