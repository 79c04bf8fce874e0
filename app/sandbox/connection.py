"""A framed, authenticated connection to the in-container agent."""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from typing import Any

from sandshell.errors import ProtocolError
from sandshell.sandbox.protocol import PROTOCOL_VERSION, FrameError, FrameReader, encode

MAX_FRAME = 16 * 1024 * 1024
READ_BYTES = 256 * 1024


class ConnectionLost(Exception):
    """The socket to the agent closed or failed."""


class Connection:
    """One socket to the agent. `send` may be called from any thread; `recv` from one reader."""

    def __init__(self, address: str | tuple[str, int], token: str) -> None:
        self.address = address
        self.token = token
        self.sock: socket.socket | None = None
        self._reader = FrameReader(MAX_FRAME)
        self._frames: deque[dict[str, Any] | FrameError] = deque()
        self._send_lock = threading.Lock()

    def open(self, resume: dict[str, Any] | None = None, timeout: float = 5.0) -> dict[str, Any]:
        """Connect and authenticate; returns the agent's hello."""
        family = socket.AF_UNIX if isinstance(self.address, str) else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.settimeout(timeout)
        try:
            sock.connect(self.address)
        except OSError as e:
            sock.close()
            raise ConnectionLost(f"cannot connect to the agent: {e}") from None
        self.close()
        self.sock = sock
        self._reader = FrameReader(MAX_FRAME)
        self._frames.clear()
        self.send({"type": "hello", "version": PROTOCOL_VERSION, "token": self.token, "resume": resume})
        reply = self.recv(time.monotonic() + timeout)
        if reply.get("type") == "error":
            raise ProtocolError(f"the agent refused the connection: {reply.get('message')}", str(reply.get("code")))
        if reply.get("type") != "hello" or reply.get("version") != PROTOCOL_VERSION:
            raise ProtocolError(f"unexpected handshake reply from the agent: {str(reply)[:200]}")
        return reply

    def send(self, frame: dict[str, Any]) -> None:
        data = encode(frame)
        with self._send_lock:
            if self.sock is None:
                raise ConnectionLost("not connected")
            try:
                self.sock.sendall(data)
            except OSError as e:
                raise ConnectionLost(f"send failed: {e}") from None

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (tests of malformed frames)."""
        with self._send_lock:
            assert self.sock is not None
            self.sock.sendall(data)

    def recv(self, deadline: float | None) -> dict[str, Any]:
        """The next frame; TimeoutError after `deadline` (monotonic), ConnectionLost on EOF."""
        while not self._frames:
            sock = self.sock
            if sock is None:
                raise ConnectionLost("not connected")
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no frame from the agent in time")
                sock.settimeout(left)
            else:
                sock.settimeout(None)
            try:
                data = sock.recv(READ_BYTES)
            except TimeoutError:
                raise
            except OSError as e:
                raise ConnectionLost(f"receive failed: {e}") from None
            if not data:
                raise ConnectionLost("the agent closed the connection")
            self._frames.extend(self._reader.feed(data))
        frame = self._frames.popleft()
        if isinstance(frame, FrameError):
            raise ProtocolError(f"unreadable frame from the agent: {frame}", frame.code)
        return frame

    def request(self, frame: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        """Send a request and wait for the reply with the same id (other frames are skipped)."""
        self.send(frame)
        deadline = time.monotonic() + timeout
        while True:
            reply = self.recv(deadline)
            if reply.get("id") == frame["id"] and reply.get("type") not in ("output", "exit", "gap"):
                return reply

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
