"""The host's channel over the agent's own stdin and stdout, attached through the Docker API.

Nothing inside the container can reach it: there is no socket file and no port; the pipes are
held by the agent, which is PID 1 (signals from inside cannot stop or kill it) and
non-dumpable (without CAP_SYS_PTRACE, root inside cannot open its /proc/1/fd, environ or mem).
Only the engine writes to the agent's stdin, on behalf of whoever attached: the host.
"""

from __future__ import annotations

import ctypes
import os
import platform
import selectors
from collections.abc import Callable
from typing import Any

from . import PROTOCOL_VERSION
from .channel import READ_BYTES, REPLAY_BYTES, error
from .frames import FrameError, FrameReader, encode
from .outbox import OutBuffer, PipeOut, Replay, Sender, Window

PR_SET_DUMPABLE = 4
RT_SIGACTION = {"x86_64": 13, "aarch64": 134}


def undumpable() -> None:
    """Without CAP_SYS_PTRACE, root inside can then neither trace this process nor open its /proc
    fd, environ or mem (every transport: a traced agent would run what the tracer likes, outside
    the set-id filter, on the guard's thread)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def ignore_libc_signals() -> None:
    """Ignore signals 32 and 33, which glibc catches for its own use once a thread exists. A signal
    PID 1 catches is delivered even from inside the container, and 33 is real-time (each send is
    queued and handled): a few `kill -33 1` loops kept the agent busy for tens of seconds, its disk
    watchdog with it. glibc's sigaction refuses these two, so the call is made raw. In return the
    agent never calls the set*id family itself (glibc would wait forever for its threads to take
    signal 33); the set-id guard changes its thread's ids with raw calls."""
    libc = ctypes.CDLL(None, use_errno=True)
    ignore = (ctypes.c_ulong * 4)(1, 0, 0, 0)  # SIG_IGN, flags, restorer, mask
    for sig in (32, 33):
        if libc.syscall(RT_SIGACTION[platform.machine()], sig, ignore, None, 8) != 0:
            raise OSError(ctypes.get_errno(), f"could not ignore signal {sig}")


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
    return fd_in, fd_out


class StdioChannel(Sender):
    """The same interface as `Channel`: send, flush, receive; the host says hello on every attach."""

    def __init__(
        self, fd_in: int, fd_out: int, sel: selectors.BaseSelector, max_frame: int, hello: Callable[[], dict[str, Any]]
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
