"""The host's channel over the agent's own stdin and stdout, attached through the Docker API.

Nothing inside the container can reach it: there is no socket file and no port; the pipes are
held by the agent, which is PID 1 (signals from inside cannot stop or kill it) and
non-dumpable (`pid1.py`: without CAP_SYS_PTRACE, root inside cannot open its /proc/1/fd, environ or mem).
Only the engine writes to the agent's stdin, on behalf of whoever attached: the host.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
from collections.abc import Callable
from typing import Any

from . import PROTOCOL_VERSION
from .channel import READ_BYTES, REPLAY_BYTES, error
from .frames import FrameError, FrameReader, encode
from .outbox import OutBuffer, PipeOut, Replay, Sender, Window
from .poller import Poller

PIPE_BYTES = 1 << 20


def seal() -> tuple[int, int]:
    """Take stdin/stdout for the channel (fds 0 and 1 become /dev/null, so nothing started later
    inherits the channel, and a stray print cannot corrupt it)."""
    fd_in, fd_out = os.dup(0), os.dup(1)  # close-on-exec
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    os.set_blocking(fd_in, False)
    os.set_blocking(fd_out, False)
    # The engine's pipe to our stdout holds 64 KiB: a flood then waits on the engine's reader every
    # few frames. 1 MiB (Linux's default most without CAP_SYS_RESOURCE): ~1.2x the MB/s here.
    with contextlib.suppress(OSError):  # not a pipe (a test's socket), or over a lowered maximum
        fcntl.fcntl(fd_out, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return fd_in, fd_out


class StdioChannel(Sender):
    """The same interface as `Channel`: send, flush, receive; the host says hello on every attach."""

    def __init__(
        self, fd_in: int, fd_out: int, sel: Poller, max_frame: int, hello: Callable[[], dict[str, Any]]
    ) -> None:
        self.fd_in, self.out = fd_in, PipeOut(fd_out)
        self.sel = sel
        self.hello = hello
        self.reader = FrameReader(max_frame)
        self.client: object | None = None  # set at the host's first hello
        self.outbuf = OutBuffer()
        self.replay = Replay(REPLAY_BYTES)
        self.window = Window()
        self.writing = False
        sel.register(fd_in, selectors.EVENT_READ, "client")

    def flush(self) -> None:
        if self.outbuf:
            try:
                self.outbuf.send_to(self.out)
            except BlockingIOError:
                pass
            except OSError:  # the engine closed our stdout: nobody will read us again
                raise SystemExit(0) from None
        want = bool(self.outbuf)
        if want != self.writing:
            if want:
                self.sel.register(self.out.fd, selectors.EVENT_WRITE, "flush")
            else:
                self.sel.unregister(self.out.fd)
            self.writing = want

    def receive(self, mask: int) -> list[dict[str, Any] | FrameError]:
        try:
            data = os.read(self.fd_in, READ_BYTES)
        except BlockingIOError:
            return []
        if not data:  # stdin closed: the container is being taken down
            raise SystemExit(0)
        out: list[dict[str, Any] | FrameError] = []
        for frame in self.reader.feed(data):
            if isinstance(frame, dict) and frame.get("type") == "hello":
                self._hello(frame)
            elif self.client is None:
                self._reply(error(None, "unauthenticated", "send hello first"))
            else:
                out.append(frame)
        return out

    def _hello(self, frame: dict[str, Any]) -> None:
        """A host (re)attached: start afresh, and give it what it missed of the running command."""
        if frame.get("version") != PROTOCOL_VERSION:
            self._reply(error(None, "version", f"protocol version {frame.get('version')!r} is not {PROTOCOL_VERSION}"))
            return
        self.client = object()
        self.outbuf.clear_whole_frames()  # what an earlier attach missed is resent below from the replay
        nonce = frame.get("nonce")
        nonce = nonce[:64] if isinstance(nonce, str) else ""
        self.send({"type": "hello", "version": PROTOCOL_VERSION, "nonce": nonce, **self.hello()})
        self.resume(frame.get("resume"))

    def _reply(self, frame: dict[str, Any]) -> None:
        self.outbuf.append(encode(frame))
        self.flush()

    def deadlines(self) -> list[float]:
        return []

    def expire(self, now: float) -> None:
        pass
