"""Bot API: how long an environment takes to start without tools, with tools the first time
(their image is built) and with tools again (the cached image).

Run: .venv/bin/python bench/bot_bench.py [--runs 5]
Prints a Markdown table (paste into docs/benchmarks.md). The tool set is new for each run of
the bench (a random marker), so the first start really builds; its images are removed at the end.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
import time
from pathlib import Path

from sandshell import config
from sandshell.bot import Environment, Permission, ToolDefinition
from sandshell.bot.bot import BROWSER
from sandshell.bot.tools import tool_image_repo
from sandshell.sandbox import engine
from sandshell.sandbox.image import context_hash


def start_once(folder: Path, tools: list[ToolDefinition]) -> tuple[float, bool | None]:
    """Seconds from Environment() to the first command's answer, and whether the tool image was built."""
    t = time.perf_counter()
    with Environment(folder, Permission.READ_ONLY, tools, settings=config.load()) as env:
        assert env.execute("true")["return_code"] == 0
        took = time.perf_counter() - t
        return took, env.image_built


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    marker = secrets.token_hex(4)
    tools = [
        ToolDefinition(
            f"printf '#!/bin/sh\\necho {marker}\\n' > /usr/local/bin/t-{marker} && chmod +x /usr/local/bin/t-{marker}",
            f"t-{marker}",
            "prints a marker",
            name=f"t-{marker}",
        ),
        BROWSER,  # lynx from Debian's packages (already cached if the tests ran: then only its layer is reused)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start_once(folder, [])  # the sandbox image is built, the engine warm
        plain = [start_once(folder, [])[0] for _ in range(args.runs)]
        first, built = start_once(folder, tools)
        assert built, "the first start with a new tool set must build its image"
        again = []
        for _ in range(args.runs):
            took, built = start_once(folder, tools)
            assert built is False, "a second start must use the cached image"
            again.append(took)
    client = engine.client()
    mine = f"{tool_image_repo(config.load().sandbox, tools)}:{context_hash()}"  # this run's own tool image
    client.images.remove(mine, force=True)
    print("| start (to the first command's answer) | seconds |")
    print("|---|---|")
    print(f"| no tools | {fmt(plain)} |")
    print(f"| two tools (a script, lynx), first start: image built | {first:.2f} s (n=1) |")
    print(f"| the same two tools again: cached image | {fmt(again)} |")
    print(f"\ncached vs no tools: {statistics.median(again) / statistics.median(plain):.2f}x")


if __name__ == "__main__":
    main()
