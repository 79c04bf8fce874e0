"""A flood's speed and who pays for it: MB/s and the CPU of the engine, its shim, the agent and this
host process, for the host reader's pile-up wait set to each value given, alternating in one sandbox.

Run: .venv/bin/python bench/flood_bench.py [--waits 0,0.0005] [--rounds 8] [--mb 100] [--tls-engine]
On the TLS engine (a second dockerd on this machine, tests/engines.py) the shim's column is left
empty; the engine's counts both dockerds. Prints a Markdown table of medians (ranges for MB/s).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from sandshell import config
from sandshell.sandbox import connection
from sandshell.sandbox.protocol import Output
from sandshell.sandbox.sandbox import Sandbox


def cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waits", default="0,0.0005", help="seconds, comma-separated (connection.PILE_SECONDS)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--tls-engine", action="store_true")
    args = ap.parse_args()
    waits = [float(w) for w in args.waits.split(",")]
    settings = config.load(env_file=None, environ={})
    settings = settings.replace(sandbox=settings.sandbox.replace(output_limit=0, spill_limit=0, max_exit_timeout=600))
    command = f"head -c {args.mb}M /dev/zero | tr '\\0' 'x' | fold -w 99"
    rows: dict[float, list[tuple[float, ...]]] = {w: [] for w in waits}
    with contextlib.ExitStack() as stack:
        if args.tls_engine:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for tests.engines
            from tests import engines

            engine = stack.enter_context(engines.tls_engine(Path(stack.enter_context(tempfile.TemporaryDirectory()))))
            settings = settings.replace(
                sandbox=settings.sandbox.replace(docker_host=engine.url, docker_tls=str(engine.certs))
            )
        workspace = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        sb = stack.enter_context(Sandbox(workspace=workspace, settings=settings.sandbox))
        sb.container.reload()
        engines_ = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "dockerd"]
        agent = psutil.Process(sb.container.attrs["State"]["Pid"])  # the TLS engine runs on this machine too
        parent = agent.parent()
        shim = [parent] if parent is not None and not args.tls_engine else []
        me = [psutil.Process()]
        sb.execute("true")
        for _ in range(args.rounds):
            for wait in waits:
                connection.PILE_SECONDS = wait
                before = (cpu(engines_), cpu(shim), cpu([agent]), cpu(me))
                start = time.perf_counter()
                got = sum(len(e.data) for e in sb.stream(command, timeout=300) if isinstance(e, Output))
                took = time.perf_counter() - start
                after = (cpu(engines_), cpu(shim), cpu([agent]), cpu(me))
                assert got >= args.mb << 20, got
                rows[wait].append((args.mb / took, *(a - b for a, b in zip(after, before, strict=True))))
    print(f"({'TLS engine' if args.tls_engine else 'local engine'}; {args.rounds} rounds of {args.mb} MB each)")
    print("| host reader's wait | MB/s, median (range) | engine CPU | shim CPU | agent CPU | host CPU |")
    print("|---|---|---|---|---|---|")
    for wait, got in rows.items():
        mbs, eng, sh, ag, host = (list(c) for c in zip(*got, strict=True))
        shim_col = "" if args.tls_engine else f"{statistics.median(sh):.2f} s"
        print(
            f"| {wait * 1000:.1f} ms | {statistics.median(mbs):.0f} ({min(mbs):.0f}-{max(mbs):.0f}) "
            f"| {statistics.median(eng):.2f} s | {shim_col} | {statistics.median(ag):.2f} s "
            f"| {statistics.median(host):.2f} s |"
        )


if __name__ == "__main__":
    main()
