"""Start the agent: `python3 -m sandshell_agent --stdio` (its channel is its stdin and stdout)."""

from __future__ import annotations

import argparse
import os
import sys

from . import chmods, pid1, sysfilter
from .server import Agent
from .settings import Config
from .stdio import seal


def main() -> None:
    parser = argparse.ArgumentParser(prog="sandshell-agent")
    parser.add_argument(
        "--stdio", action="store_true", required=True, help="serve the host on stdin/stdout (attached by the engine)"
    )
    parser.parse_args()
    try:  # first: everything the agent starts, the model's shell included, inherits it
        pid1.undumpable()
        guard = chmods.Guard()  # its thread is not under the filter: it starts before it
        guard.listen(sysfilter.install())
        pid1.ignore_libc_signals()  # after the first thread: glibc has set its handlers by then
    except (OSError, ValueError) as e:  # ValueError: an architecture the filter has no table for
        why = f"{e.strerror or e}: {os.strerror(e.errno)}" if isinstance(e, OSError) and e.errno else str(e)
        sys.exit(f"sandshell-agent: {why}; refusing to run a shell that could leave set-uid files on the host")
    cfg = Config(dict(os.environ))
    # The agent's settings never reach the model's shell.
    for key in [k for k in os.environ if k.startswith("SANDSHELL_")]:
        del os.environ[key]
    pid1.handle_no_signals()
    channel = seal()
    print("sandshell-agent ready on stdin/stdout", file=sys.stderr, flush=True)
    Agent(cfg, stdio=channel).serve_forever()


if __name__ == "__main__":
    main()
