"""UI benchmarks: the worst event-loop stall while 200,000 lines stream; ./start.sh to the first command.

Run: .venv/bin/python bench/ui_bench.py [--lines 200000] [--start] [--switch-interval 0.0005] [--default-gc]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandshell import config
from sandshell.tui.run import live_app, quiet_gc

REPO = Path(__file__).resolve().parents[1]


async def stalls(lines: int) -> tuple[float, float, float, int, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        script = Path(tmp) / "s.jsonl"
        script.write_text(json.dumps({"bash": f"seq 1 {lines}", "timeout": 120}) + "\n" + '{"done": "x"}\n')
        settings = config.load(env_file=None, environ={})
        settings = settings.replace(
            sandbox=settings.sandbox.replace(workspace=str(ws), output_limit=0, spill_limit=0),
            session=settings.session.replace(sessions_dir=str(Path(tmp) / "sessions")),
            model=settings.model.replace(backend="script", script_path=str(script), intro=False),
        )
        app = live_app(settings)
        lags: list[float] = []
        async with app.run_test(size=(120, 36)) as pilot:
            last = time.monotonic()

            def tick() -> None:
                nonlocal last
                now = time.monotonic()
                lags.append(now - last - 0.01)
                last = now

            app.set_interval(0.01, tick)
            start = time.monotonic()
            keys: list[float] = []  # key press to screen: `h` opens the hint bar, escape closes it
            ask = app.query_one("#ask")
            while app.ended is None:
                await asyncio.sleep(0.2)
                if app.ended is not None or app.log_view.line_count < 100:
                    continue
                pressed = time.monotonic()
                app.simulate_key("h")  # as a terminal's key would arrive: a message to the app
                while not (ask.has_class("active") and ask.has_focus) and app.ended is None:
                    await asyncio.sleep(0.001)
                keys.append(time.monotonic() - pressed)
                app.simulate_key("escape")
                while ask.has_class("active") and app.ended is None:
                    await asyncio.sleep(0.001)
            seconds = time.monotonic() - start
            await pilot.press("q")
    lags.sort()
    return lags[-1], lags[int(len(lags) * 0.99)], seconds, len(lags), sorted(keys)


def start_to_first_command() -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        env = f"SANDSHELL_WORKSPACE={shlex.quote(str(ws))} SANDSHELL_SESSIONS_DIR={shlex.quote(tmp)}/s"
        name = f"bench-{os.getpid()}"
        root = shlex.quote(str(REPO))
        start = time.monotonic()
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                name,
                "-x",
                "120",
                "-y",
                "36",
                f"cd {root} && env {env} ./start.sh; sleep 10",
            ],
            check=True,
        )
        intro = model = 0.0
        try:
            while time.monotonic() - start < 120 and not model:
                screen = subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True
                ).stdout
                if not intro and "# pwd && ls -la" in screen:
                    intro = time.monotonic() - start
                if re.search(r"turn 1 ─[\s\S]*\n *[❯◆] ", screen):
                    model = time.monotonic() - start
                time.sleep(0.05)
            subprocess.run(["tmux", "send-keys", "-t", name, "q"])
            time.sleep(3)
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        return intro, model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--start", action="store_true", help="also time ./start.sh (warm) to the first command")
    ap.add_argument("--switch-interval", type=float, help="sys.setswitchinterval for this run (default: Python's)")
    ap.add_argument("--default-gc", action="store_true", help="keep Python's GC settings (the UI tunes them)")
    args = ap.parse_args()
    if not args.default_gc:
        quiet_gc()  # as run_app does for the real UI
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    worst, p99, seconds, ticks, keys = asyncio.run(stalls(args.lines))
    print("| measure | result |")
    print("|---|---|")
    print(
        f"| worst event-loop stall while {args.lines:,} lines stream | {worst * 1000:.0f} ms "
        f"(p99 {p99 * 1000:.0f} ms, {ticks} ticks of 10 ms over {seconds:.1f} s) |"
    )
    if keys:
        median = keys[len(keys) // 2] * 1000
        print(
            f"| key press to screen during the flood ({len(keys)} presses) | median {median:.0f} ms, "
            f"worst {keys[-1] * 1000:.0f} ms |"
        )
    if args.start:
        intro, model = start_to_first_command()
        print(f"| ./start.sh (warm) to the first executed command (the intro's) | {intro:.1f} s |")
        print(f"| ./start.sh (warm) to the model's first executed action | {model:.1f} s |")


if __name__ == "__main__":
    main()
