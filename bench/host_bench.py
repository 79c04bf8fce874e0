"""What the host library costs a command: a `true` three ways on one sandbox, in alternating blocks.

Run: .venv/bin/python bench/host_bench.py [--rounds 10] [--commands 300]
- raw: a `run` frame written to the attach socket as bytes, read until the result is in;
- connection: `Connection.send` and `recv` (frames encoded and parsed, the engine's headers taken off);
- execute: `Sandbox.execute`, as the session calls it.
The differences are the Python of each layer (the engine, the agent and bash are the same for all).
Prints a Markdown table: the median round trip and the host's CPU a command.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sandshell import config
from sandshell.sandbox.protocol import encode
from sandshell.sandbox.sandbox import Sandbox


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--commands", type=int, default=300)
    args = ap.parse_args()
    settings = config.load(env_file=None, environ={})
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workspace=Path(tmp), settings=settings.sandbox) as sb:
        for _ in range(500):
            sb.execute("true")
        conn = sb.conn
        assert conn is not None and conn.sock is not None
        sock, ids = conn.sock, iter(range(1 << 62))

        def raw() -> None:
            sock.sendall(encode({"type": "run", "id": f"x{next(ids)}", "command": "true", "timeout": 10.0}))
            got = b""  # to the end of the result's line: a rest left unread would reach the Connection's reader
            while (at := got.find(b'"type":"exit"')) < 0 or b"\n" not in got[at:]:
                got += sock.recv(65536)

        def connection() -> None:
            conn.send({"type": "run", "id": f"y{next(ids)}", "command": "true", "timeout": 10.0})
            while conn.recv(None).get("type") != "exit":
                pass

        ways: dict[str, Callable[[], object]] = {
            "raw": raw,
            "connection": connection,
            "execute": lambda: sb.execute("true"),
        }
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, way in ways.items():
                times, cpu = [], time.process_time()
                for _ in range(args.commands):
                    start = time.perf_counter()
                    way()
                    times.append(time.perf_counter() - start)
                rows[name].append((statistics.median(times), (time.process_time() - cpu) / args.commands))
    print(f"({args.rounds} rounds of {args.commands} `true`s each way, alternating)")
    print("| way | round trip, median | host CPU a command |")
    print("|---|---|---|")
    for name, got in rows.items():
        med, cpu = (list(c) for c in zip(*got, strict=True))
        print(f"| {name} | {statistics.median(med) * 1e3:.3f} ms | {statistics.median(cpu) * 1e6:.0f} µs |")


if __name__ == "__main__":
    main()
