"""What one byte of a command's output costs on disk and on the terminal: a headless session runs one
command that writes `--bytes` of plain text, then of control bytes, and the recording's two files,
the echoed transcript (stderr) and the JSON result (stdout) are measured.

    .venv/bin/python bench/recording_size_bench.py [--bytes 1000000] [--limit BYTES]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from pathlib import Path

from sandshell import config
from sandshell.runner import run_task

KINDS = {
    "plain text": "import sys; sys.stdout.write(('x' * 99 + chr(10)) * ({n} // 100))",
    "control bytes": "import sys; sys.stdout.buffer.write(bytes(range(32)) * ({n} // 32))",
}


def one(code: str, n: int, limit: int | None, home: Path) -> dict[str, int]:
    script = home / f"script-{len(list(home.iterdir()))}.jsonl"
    script.write_text(json.dumps([{"bash": f'python3 -c "{code.format(n=n)}"', "timeout": 60}]) + "\n")
    (home / "workspace").mkdir(exist_ok=True)
    environ = {
        "SANDSHELL_HOME": str(home),
        "LLAMA_BACKEND": "script",
        "LLAMA_SCRIPT": str(script),
        "LLAMA_INTRO": "false",
        "SANDSHELL_PROFILE": "standard",
    }
    if limit is not None:
        environ["SANDSHELL_RECORDING_LIMIT"] = str(limit)
    settings = config.load(env_file=None, environ=environ)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        result = run_task("flood", 120, 2, settings=settings, echo=True)
    folder = Path(result["session"])
    return {
        "events.jsonl": (folder / "events.jsonl").stat().st_size,
        "session.cast": (folder / "session.cast").stat().st_size,
        "stderr": len(err.getvalue().encode()),
        "stdout (JSON result)": len(json.dumps(result, indent=2).encode()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=1_000_000)
    parser.add_argument("--limit", type=int, default=None, help="SANDSHELL_RECORDING_LIMIT (default: the default)")
    args = parser.parse_args()
    print(f"| output ({args.bytes:,} bytes) | events.jsonl | session.cast | stderr | stdout | total | per byte |")
    print("|---|---|---|---|---|---|---|")
    for kind, code in KINDS.items():
        with tempfile.TemporaryDirectory(prefix="sandshell-bench-") as home:
            sizes = one(code, args.bytes, args.limit, Path(home))
        total = sum(sizes.values())
        cells = " | ".join(f"{v:,}" for v in sizes.values())
        print(f"| {kind} | {cells} | {total:,} | {total / args.bytes:.2f} |")


if __name__ == "__main__":
    main()
