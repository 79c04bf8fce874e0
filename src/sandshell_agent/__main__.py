"""Start the agent: `python3 -m sandshell_agent --stdio | --unix PATH | --tcp HOST:PORT`."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from . import chmods, pid1, sysfilter
from .server import Agent
from .settings import Config
from .stdio import seal


def listen(args: argparse.Namespace, cfg: Config) -> socket.socket:
    if args.unix:
        try:
            os.unlink(args.unix)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(args.unix)
        finally:
            os.umask(old)
        if cfg.owner is not None and os.geteuid() == 0:
            # Only the host user who owns the session may connect (plus root).
            os.chown(args.unix, *cfg.owner)
        os.chmod(args.unix, 0o600)
    else:
        host, _, port = args.tcp.rpartition(":")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or "0.0.0.0", int(port)))
    sock.listen(8)
    sock.setblocking(False)
    return sock


def main() -> None:
    parser = argparse.ArgumentParser(prog="sandshell-agent")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--stdio", action="store_true", help="serve the host on stdin/stdout (attached by the engine)")
    where.add_argument("--unix", help="listen on this unix socket path (needs SANDSHELL_TOKEN)")
    where.add_argument("--tcp", help="listen on HOST:PORT (needs SANDSHELL_TOKEN)")
    args = parser.parse_args()
    try:  # first: everything the agent starts, the model's shell included, inherits it
        pid1.undumpable()
        guard = chmods.Guard()  # its thread is not under the filter: it starts before it
        guard.listen(sysfilter.install())
        pid1.ignore_libc_signals()  # after the first thread: glibc has set its handlers by then
    except (OSError, ValueError) as e:  # ValueError: an architecture the filter has no table for
        why = f"{e.strerror or e}: {os.strerror(e.errno)}" if isinstance(e, OSError) and e.errno else str(e)
        sys.exit(f"sandshell-agent: {why}; refusing to run a shell that could leave set-uid files on the host")
    cfg = Config(dict(os.environ))
    # The agent's settings (and a socket's token) never reach the model's shell.
    for key in [k for k in os.environ if k.startswith("SANDSHELL_")]:
        del os.environ[key]
    pid1.handle_no_signals()
    if args.stdio:
        channel = seal()
        print("sandshell-agent ready on stdin/stdout", file=sys.stderr, flush=True)
        Agent(cfg, stdio=channel).serve_forever()
        return
    if not cfg.token:
        sys.exit("sandshell-agent: SANDSHELL_TOKEN is not set; refusing to start without a session token")
    agent = Agent(cfg, listener=listen(args, cfg))
    print(f"sandshell-agent ready on {args.unix or args.tcp}", flush=True)
    agent.serve_forever()


if __name__ == "__main__":
    main()
