"""Ports and servers for tests and benches: a free port on 127.0.0.1, and waiting for a server to answer."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_answers(url: str, proc: subprocess.Popen[bytes], said: Callable[[], str], seconds: float) -> None:
    """Poll `url` until it answers 200; RuntimeError with the end of what the process `said` when it
    exits first or never answers."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited: {said()[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {seconds:.0f} s: {said()[-2000:]}")
