"""The command line: `prepare`, the interactive session (default), `--headless`, `replay`, `reset`."""

from __future__ import annotations

import argparse
import sys

from app.errors import SandshellError


def _say(message: str) -> None:
    print(f"sandshell: {message}", file=sys.stderr, flush=True)


def prepare() -> int:
    """Check Docker, reap leftovers and make sure the sandbox image is built."""
    from app import config, engine
    from app.image import ensure_image

    settings = config.load()
    client = engine.client()
    for name in engine.reap(client):
        _say(f"removed leftover container {name}")
    tag = ensure_image(client, settings, _say)
    _say(f"sandbox image {tag} ready")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandshell", description="Watch a local language model live in a shell.")
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("prepare", help="check Docker and build the sandbox image")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "prepare":
            return prepare()
        parser.print_help()
        return 2
    except SandshellError as e:
        _say(str(e))
        return 1
    except KeyboardInterrupt:
        _say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
