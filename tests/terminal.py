"""A real terminal for tests: a program in a pty (pexpect), its screen rendered as a user sees it (pyte)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import pexpect
import pyte


class Terminal:
    """Runs `argv` in a pseudo-terminal of `cols` x `rows`; `wait_for` reads until the screen shows a pattern."""

    def __init__(self, argv: Sequence[str], cwd: str, env: dict[str, str], cols: int = 120, rows: int = 36) -> None:
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.child = pexpect.spawn(argv[0], list(argv[1:]), cwd=cwd, env=env, dimensions=(rows, cols), timeout=None)
        self.child.delaybeforesend = 0  # pexpect's default 50 ms before each send is a pure floor
        self.exit_status: int | None = None

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def pump(self, seconds: float = 0.1) -> bool:
        """Feed what the program wrote within `seconds` to the screen; False once it has exited."""
        try:
            data = self.child.read_nonblocking(1 << 16, timeout=seconds)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            self.child.close()
            self.exit_status = self.child.exitstatus
            return False
        self.stream.feed(data)
        return True

    def wait_for(self, pattern: str, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            alive = self.pump()
            if re.search(pattern, self.text()):
                return self.text()
            if not alive:
                break
        raise AssertionError(f"{pattern!r} not on screen after {seconds}s:\n{self.text()}")

    def wait_exit(self, seconds: float) -> int | None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.pump():
            pass
        if self.exit_status is None and self.child.isalive():
            raise AssertionError(f"still running after {seconds}s:\n{self.text()}")
        return self.exit_status

    def send(self, keys: str) -> None:
        self.child.send(keys)

    def resize(self, cols: int, rows: int) -> None:
        self.screen.resize(rows, cols)
        self.child.setwinsize(rows, cols)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
