"""What the agent keeps for the host: frames waiting to be sent, and a command's output for a resume."""

from __future__ import annotations

import collections
import itertools
import socket
from typing import Any

from .frames import encode


class OutBuffer:
    """Frames waiting for the host, sent with scatter-gather (no copying of what is left)."""

    def __init__(self) -> None:
        self.parts: collections.deque[memoryview] = collections.deque()
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def append(self, data: bytes) -> None:
        self.parts.append(memoryview(data))
        self.size += len(data)

    def clear(self) -> None:
        self.parts.clear()
        self.size = 0

    def send_to(self, sock: socket.socket) -> None:
        while self.parts:
            sent = sock.sendmsg(list(itertools.islice(self.parts, 64)))
            self.size -= sent
            while sent:
                head = self.parts[0]
                if sent >= len(head):
                    sent -= len(head)
                    self.parts.popleft()
                else:
                    self.parts[0] = head[sent:]
                    sent = 0


class Replay:
    """The current (or last) command's output frames, bounded, for a host that reconnects mid-command."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.id: str | None = None
        self.chunks: collections.deque[tuple[int, bytes]] = collections.deque()
        self.size = 0
        self.exit: bytes | None = None

    def remember(self, frame: dict[str, Any], data: bytes) -> None:
        if frame["id"] != self.id:
            self.id, self.exit, self.size = frame["id"], None, 0
            self.chunks.clear()
        if frame["type"] == "exit":
            self.exit = data
            return
        self.chunks.append((frame["seq"], data))
        self.size += len(data)
        while self.size > self.limit:
            _, old = self.chunks.popleft()
            self.size -= len(old)

    def after(self, cid: Any, seq: int) -> list[bytes]:
        """The frames of command `cid` after `seq`; a gap frame first if some were dropped."""
        if cid is None or cid != self.id:
            return []
        out = []
        first = self.chunks[0][0] if self.chunks else None
        if first is not None and first > seq + 1:
            out.append(encode({"type": "gap", "id": cid, "from": seq + 1, "to": first - 1}))
        out += [data for n, data in self.chunks if n > seq]
        if self.exit is not None:
            out.append(self.exit)
        return out
