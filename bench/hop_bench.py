"""Where the `true` round trip's distance from the bash pipe lies: the hop, the agent, or the host library.

Run: .venv/bin/python bench/hop_bench.py [--rounds 100] [--batch 20]
In one run, in turns of `--batch` commands each (so the machine's drift falls on all alike), the
median of:
- `cat` echoing a line through a container's attach stream (the engine's floor for an attached agent);
- a C relay (bench/relay.c, built here) between the attach stream and a bash: the least any agent
  hop could cost;
- the baseline: one bash kept open by `docker exec -i`, a sentinel after each command;
- sandshell's agent and bash driven by a minimal client: `run` frames written to the attach socket
  as bytes and the reply read until its exit frame (no host library);
- the same through the host library's `Connection` (`send`, `recv`);
- `Sandbox.execute("true")`, the target's measure;
- a C agent's floor (bench/loop_relay.c, built here): sandshell's own bash loop (bashloop.c) behind
  the least an agent must do (a tagged command in, the status record and the kernel's cwd back, an
  exit frame of the agent's size out), by the minimal client and through `Connection`: what
  moving the agent's command path out of Python would reach at best.
Every container it makes carries the session labels, so a run cut short leaves nothing the
reaper would not take. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import socket
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidecar import sidecar

from sandshell import config
from sandshell.sandbox.connection import AttachConnection, Connection
from sandshell.sandbox.sandbox import Sandbox

HERE = Path(__file__).resolve().parent


def relay_binary(folder: Path, name: str = "relay") -> Path:
    """bench/NAME.c, linked statically (the image's libc may be older than this machine's)."""
    out = folder / name
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run([compiler, "-O2", "-static", "-o", str(out), str(HERE / f"{name}.c")], check=True)
    return out


def put(box: Any, path: Path) -> None:
    data = path.read_bytes()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo(path.name)
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    box.put_archive("/", archive.getvalue())


def attached(client: Any, box: Any) -> socket.socket:
    params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
    return client.api.attach_socket(box.id, params=params)._sock  # type: ignore[no-any-return]


def bare_connection(client: Any, box: Any) -> AttachConnection:
    """The host library's reader on an attach to a C floor, which says no hello."""
    conn = AttachConnection(client.api, box.id)
    sock = conn._connect(5.0)
    conn._blocking(sock)
    conn.sock, conn._sync = sock, None
    return conn


def exchange(sock: Any, until: bytes) -> Callable[[bytes], None]:
    def run(msg: bytes) -> None:
        sock.sendall(msg)
        got = b""
        while until not in got:
            got += sock.recv(65536)

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--batch", type=int, default=20)
    args = ap.parse_args()
    settings = config.load(env_file=None, environ={})
    boxes: list[Any] = []
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workspace=Path(tmp), settings=settings.sandbox) as sb:
        client = sb._docker
        tag = sb.container.attrs["Config"]["Image"]
        try:
            cat, relay = sidecar(client, tag, ["cat"], "hop"), sidecar(client, tag, ["/relay"], "hop")
            floor = sidecar(client, tag, ["/loop_relay"], "hop")
            boxes += [cat, relay, floor]
            put(relay, relay_binary(Path(tmp)))
            put(floor, relay_binary(Path(tmp), "loop_relay"))
            for box in (cat, relay, floor):
                box.start()
            pipe = subprocess.Popen(
                ["docker", "exec", "-i", cat.id, "bash", "--noprofile", "--norc"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
            )
            assert pipe.stdin is not None and pipe.stdout is not None
            pipe_in, pipe_out = pipe.stdin, pipe.stdout.fileno()

            def bash_pipe(_: int) -> None:
                pipe_in.write(b"true; echo __S__\n")
                got = b""
                while b"__S__\n" not in got:
                    got += os.read(pipe_out, 65536)

            conn = sb.conn
            assert conn is not None and conn.sock is not None
            cat_echo = exchange(attached(client, cat), b"x\n")
            relayed = exchange(attached(client, relay), b"}\n")
            raw = exchange(conn.sock, b'"exit_code"')
            floor_conn = bare_connection(client, floor)  # (one attach: each gets what the container writes)
            floor_raw = exchange(floor_conn.sock, b'"exit_code"')

            def library(i: int, conn: Connection = conn) -> None:
                conn.send({"type": "run", "id": f"l{i}", "command": "true", "timeout": 10})
                while conn.recv(time.monotonic() + 10).get("type") != "exit":
                    pass

            ways: dict[str, Callable[[int], object]] = {
                "`cat` echoing a line through the attach stream": lambda _: cat_echo(b"x\n"),
                "a C relay and bash through the attach stream (bench/relay.c)": lambda _: relayed(b"true\n"),
                "the baseline: bash kept open by `docker exec -i`, a sentinel after each command": bash_pipe,
                "sandshell's agent and bash, a minimal client (frames as bytes on the attach socket)": lambda i: raw(
                    b'{"type":"run","id":"r%d","command":"true","timeout":10}\n' % i
                ),
                "the same through the host library's `Connection` (send, recv)": library,
                '`Sandbox.execute("true")`': lambda _: sb.execute("true"),
                "a C agent's floor and sandshell's bash loop (bench/loop_relay.c), a minimal client": lambda i: (
                    floor_raw(b'{"type":"run","id":"f%d","command":"true","timeout":10}\n' % i)
                ),
                "the same through the host library's `Connection`": lambda i: library(i, floor_conn),
            }
            times: dict[str, list[float]] = {name: [] for name in ways}
            for r in range(args.rounds):
                for name, way in ways.items():
                    for j in range(args.batch):
                        start = time.perf_counter()
                        way(r * args.batch + j)
                        times[name].append(time.perf_counter() - start)
            pipe_in.close()
            pipe.wait(timeout=10)
        finally:
            for box in boxes:
                box.remove(force=True)
    base = statistics.median(times[list(ways)[2]])
    print(f"| a `true` round trip ({args.rounds} turns of {args.batch}) | median ms | against the baseline |")
    print("|---|---|---|")
    for name, got in times.items():
        print(f"| {name} | {statistics.median(got) * 1000:.3f} | {statistics.median(got) / base:.2f}x |")


if __name__ == "__main__":
    main()
