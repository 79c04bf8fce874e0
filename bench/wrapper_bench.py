"""What the wrapper around each command costs in bash, part by part (no Docker, no agent).

Run: .venv/bin/python bench/wrapper_bench.py [--commands 2000] [--state /dev/shm/...]
Feeds bash 5.2 the agent's own prelude and N run lines for `true` through a socket, as the agent
does (bash reads a socket one byte at a time), with parts of the wrapper cut out of the same text,
and prints microseconds per command for each variant; last, the compiled loop (bashloop.c, built
here as the image build does) fed the same commands as the agent frames them for it. The state
folder should be on a tmpfs, as the container's is.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sandshell.sandbox.image import compile_loop, copy_context
from sandshell_agent.shellenv import EDITOR_STUBS
from sandshell_agent.wrapper import (
    LENGTH_DIGITS,
    NONCE_CHARS,
    RUN_LINE,
    STATUS_FD,
    _run_line,
    functions,
    run_alias,
)

TAG = "bench0001"
VARIANTS = (
    "whole",
    "the whole run line read each time (no alias)",
    "no trap check",
    "no state save",
    "up to the status record (what a result waits for)",
    "the compiled loop (bashloop.c)",
)


def loop_text(state: str, library: Path, commands: int) -> str:
    """The loop's prelude, its key, then `true` framed as the agent frames it (nonce, length, bytes)."""
    fds = "exec 200>/dev/null 201>/dev/null"
    start = [f"builtin enable -f {library} __ss_loop || builtin exit 3", f"__ss_loop 200 201 {state} __ss_q_{TAG} :"]
    prelude = "\n".join([fds, "set +o history", EDITOR_STUBS, *functions(state, TAG, loop=True), *start])
    return prelude + "\n" + "0" * 64 + ("0" * NONCE_CHARS + "4".zfill(LENGTH_DIGITS) + "true") * commands


def text(state: str, variant: str, commands: int) -> str:
    fds = "exec 200>/dev/null 201>/dev/null"
    prelude = "\n".join([fds, "set +o history", EDITOR_STUBS, *functions(state, TAG), run_alias(TAG)])
    if variant in ("no trap check", "no state save"):
        prelude = prelude.replace(" \\__ss_arm;", "", 1)
    if variant == "no state save":
        prelude = prelude.replace("; \\__ss_save; builtin printf", "; builtin printf")
    if variant == VARIANTS[4]:  # __ss_out ends with its first printf: the rest runs after the result is out
        out = prelude.index("__ss_out()")
        cut = prelude.index(f">&{STATUS_FD};", out) + len(f">&{STATUS_FD};")
        prelude = prelude[:cut] + " }" + prelude[prelude.index("\n", cut) :]
    line = RUN_LINE.decode() if variant != VARIANTS[1] else _run_line(TAG) + "\n"
    return prelude + "\n" + (line + "0" * NONCE_CHARS + "4".zfill(LENGTH_DIGITS) + "true") * commands


def per_command(script: str, commands: int) -> float:
    ours, theirs = socket.socketpair()
    start = time.perf_counter()
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc"],
        stdin=theirs.fileno(),
        env={"PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    theirs.close()
    ours.sendall(script.encode())
    ours.shutdown(socket.SHUT_WR)
    proc.wait()
    ours.close()
    return (time.perf_counter() - start) / commands * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=2000)
    ap.add_argument("--state", default="/dev/shm")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.state) as state, tempfile.TemporaryDirectory() as build:
        copy_context(Path(build) / "context")
        if not compile_loop(Path(build) / "context", print):
            raise SystemExit("the loop did not compile")
        library = Path(build) / "context" / "sandshell_agent" / "bashloop.so"
        print("| wrapper variant | µs per `true` |")
        print("|---|---|")
        for variant in VARIANTS:
            script = (
                loop_text(state, library, args.commands)
                if variant == VARIANTS[-1]
                else text(state, variant, args.commands)
            )
            us = min(per_command(script, args.commands) for _ in range(3))
            print(f"| {variant} | {us:.0f} |")
        saved = sorted(os.listdir(state))
        print(f"\nstate folder after the last run: {', '.join(saved)}")


if __name__ == "__main__":
    main()
