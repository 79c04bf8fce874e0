"""The host's channel: the listener, the token handshake, and the one authenticated client.

Frames to the host go through `send`: output and exit frames are also kept (bounded) so a host
that reconnects mid-command can resume from its last sequence number.
"""

from __future__ import annotations

import hmac
import os
import selectors
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from . import PROTOCOL_VERSION
from .frames import FrameError, FrameReader, encode
from .outbox import OutBuffer, Replay, Sender, Window
from .poller import Poller

READ_BYTES = 64 * 1024
# Output kept for a host that reconnects mid-command: more than can be in flight when the link
# drops (the 1 MiB outbox, the sockets' buffers); while no host is there, no more is read.
REPLAY_BYTES = 8 * 1024 * 1024
HANDSHAKE_SECONDS = 5.0


def error(rid: Any, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": rid, "code": code, "message": message}


MAX_PENDING = 16  # connections still to say hello; a new one past this closes the oldest


def _peer_pid(conn: socket.socket) -> int:
    try:
        pid, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except OSError:
        return -1
    return int(pid)


class Channel(Sender):
    """Accepts connections, authenticates them with the session token, and keeps one client."""

    def __init__(
        self,
        listener: socket.socket,
        sel: Poller,
        token: str,
        max_frame: int,
        hello: Callable[[], dict[str, Any]],
    ) -> None:
        self.listener = listener
        self.sel = sel
        self.token = token
        self.max_frame = max_frame
        self.hello = hello  # what the agent says about itself after a handshake
        sel.register(listener, selectors.EVENT_READ, "accept")
        # As PID 1 on a unix socket, any peer we can see is inside the container: 2,000 connections
        # each held for the handshake's 5 s ran the agent out of descriptors, and it died.
        self.inside_only = os.getpid() == 1 and listener.family == socket.AF_UNIX
        self.pending: dict[socket.socket, tuple[FrameReader, float]] = {}
        self.client: socket.socket | None = None
        self.reader = FrameReader(max_frame)
        self.outbuf = OutBuffer()
        self.replay = Replay(REPLAY_BYTES)
        self.window = Window()

    # -- sending (send and resume: Sender) ---------------------------------------------------
    def flush(self) -> None:
        if self.client is None or not self.outbuf:
            return
        try:
            self.outbuf.send_to(self.client)
        except BlockingIOError:
            pass
        except OSError:
            self.drop()
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.outbuf else 0)
        self.sel.modify(self.client, events, "client")

    def drop(self) -> None:
        if self.client is not None:
            self.sel.unregister(self.client)
            self.client.close()
        self.client = None
        self.outbuf.clear()

    # -- connections -------------------------------------------------------------------------
    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:  # EMFILE, ENFILE, ECONNABORTED...: a flood of connections must never end PID 1
            if self.pending:
                self._close_pending(next(iter(self.pending)), None)  # the oldest makes room
            return
        if self.inside_only and _peer_pid(conn) != 0:
            conn.close()  # a process in the container's own pid namespace: never the host, whose pid is 0 here
            return
        while len(self.pending) >= MAX_PENDING:
            self._close_pending(next(iter(self.pending)), None)
        conn.setblocking(False)
        try:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)  # fewer wakeups in a flood
        except OSError:
            pass
        self.pending[conn] = (FrameReader(self.max_frame), time.monotonic() + HANDSHAKE_SECONDS)
        self.sel.register(conn, selectors.EVENT_READ, "pending")

    def _close_pending(self, conn: socket.socket, reply: dict[str, Any] | None) -> None:
        if reply is not None:
            try:
                conn.send(encode(reply))
            except OSError:
                pass
        self.sel.unregister(conn)
        self.pending.pop(conn, None)
        conn.close()

    def expire(self, now: float) -> None:
        """Close connections that did not say hello in time."""
        for conn, (_, deadline) in list(self.pending.items()):
            if now > deadline:
                self._close_pending(conn, error(None, "unauthenticated", "no hello in time"))

    def handshake(self, conn: socket.socket) -> list[dict[str, Any] | FrameError]:
        """Authenticate a new connection; the frames it sent after its hello, once it is the client."""
        reader, _ = self.pending[conn]
        try:
            data = conn.recv(READ_BYTES)
        except OSError:
            data = b""
        if not data:
            self._close_pending(conn, None)
            return []
        frames = reader.feed(data)
        for i, frame in enumerate(frames):
            if isinstance(frame, FrameError) or frame.get("type") != "hello":
                self._close_pending(conn, error(None, "unauthenticated", "send hello with the session token first"))
                return []
            if frame.get("version") != PROTOCOL_VERSION:
                msg = f"protocol version {frame.get('version')!r} is not {PROTOCOL_VERSION}"
                self._close_pending(conn, error(None, "version", msg))
                return []
            token = frame.get("token")
            if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.token.encode()):
                self._close_pending(conn, error(None, "unauthenticated", "wrong session token"))
                return []
            self._promote(conn, frame.get("resume"), reader)
            return frames[i + 1 :]  # sent right behind the hello: not lost
        return []

    def _promote(self, conn: socket.socket, resume: Any, reader: FrameReader) -> None:
        """Make an authenticated connection the client, replacing an older one."""
        self.sel.unregister(conn)
        self.pending.pop(conn, None)
        self.drop()
        self.client = conn
        self.reader = reader  # with whatever part of a frame it holds
        self.sel.register(conn, selectors.EVENT_READ, "client")
        self.send({"type": "hello", "version": PROTOCOL_VERSION, **self.hello()})
        self.resume(resume)

    def receive(self, mask: int) -> list[dict[str, Any] | FrameError]:
        """Frames the client sent (after a flush if it can take more); [] when it went away."""
        if mask & selectors.EVENT_WRITE:
            self.flush()
        if not mask & selectors.EVENT_READ or self.client is None:
            return []
        try:
            data = self.client.recv(READ_BYTES)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            self.drop()
            return []
        return self.reader.feed(data)

    def deadlines(self) -> list[float]:
        return [deadline for _, deadline in self.pending.values()]
