"""What the wrapper around each command costs in bash, part by part (no Docker, no agent).

Run: .venv/bin/python bench/wrapper_bench.py [--commands 2000] [--state /dev/shm/...]
Feeds bash 5.2 the agent's own prelude and N run lines for `true` from a file, with parts of the
wrapper cut out of the same text, and prints microseconds per command for each variant. The
state folder should be on a tmpfs, as the container's is.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "container"))
from sandshell_agent.shell import EDITOR_STUBS
from sandshell_agent.wrapper import WHOLE, functions, run_line

TAG = "bench0001"


def text(state: str, variant: str, commands: int) -> str:
    prelude = "\n".join(["exec 200>/dev/null 201>/dev/null", "set +o history", EDITOR_STUBS, *functions(state, TAG)])
    if variant in ("no trap re-arm", "no state save"):
        prelude = re.sub(r" __ss_arm EXIT '';| __ss_arm USR2 \$'\\nbuiltin exit 143';", "", prelude)
    if variant == "one copy of each state script":
        second = rf" && \{{ builtin (export -p|declare -f) && builtin printf '%s\\n' '{WHOLE}'; \}} >\| \S+\.prev"
        prelude = re.sub(second, "", prelude)
    if variant == "no state save":
        prelude = prelude.replace("__ss_save; builtin printf", "builtin printf")
    line = run_line(TAG).decode() + "0" * 32 + "true\0"
    return prelude + "\n" + line * commands


def per_command(script: str, commands: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as f, open(f.name, "rb") as feed:
        f.write(script)
        f.flush()
        start = time.perf_counter()
        subprocess.run(["bash", "--noprofile", "--norc"], stdin=feed, env={"PATH": "/usr/bin:/bin"},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # fmt: skip
        return (time.perf_counter() - start) / commands * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=2000)
    ap.add_argument("--state", default="/dev/shm")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.state) as state:
        print("| wrapper variant | µs per `true` |")
        print("|---|---|")
        for variant in ("whole", "no trap re-arm", "one copy of each state script", "no state save"):
            us = min(per_command(text(state, variant, args.commands), args.commands) for _ in range(3))
            print(f"| {variant} | {us:.0f} |")


if __name__ == "__main__":
    main()
