"""What the agent keeps for the host: frames waiting to be sent, and a command's output for a resume."""

from __future__ import annotations

import collections
import itertools
import os
import socket
from typing import Any

from .frames import encode


class OutBuffer:
    """Frames waiting for the host, sent with scatter-gather (no copying of what is left)."""

    def __init__(self) -> None:
        self.parts: collections.deque[memoryview] = collections.deque()
        self.size = 0
        self.partial = False  # the first part is a frame already partly sent

    def __len__(self) -> int:
        return self.size

    def append(self, data: bytes) -> None:
        self.parts.append(memoryview(data))
        self.size += len(data)

    def clear(self) -> None:
        self.parts.clear()
        self.size = 0
        self.partial = False

    def clear_whole_frames(self) -> None:
        """Drop every frame not yet begun; a frame half sent is finished, so the stream stays whole."""
        head = self.parts[0] if self.partial and self.parts else None
        self.clear()
        if head is not None:
            self.parts.append(head)
            self.size, self.partial = len(head), True

    def send_to(self, sock: socket.socket | PipeOut) -> None:
        while self.parts:
            sent = sock.sendmsg(list(itertools.islice(self.parts, 64)))
            self.size -= sent
            while sent:
                head = self.parts[0]
                if sent >= len(head):
                    sent -= len(head)
                    self.parts.popleft()
                    self.partial = False
                else:
                    self.parts[0] = head[sent:]
                    self.partial = True
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


class Window:
    """Flow control: the agent sends at most FRAMES output frames of a command beyond what the host
    acknowledged. Whatever is lost when the link drops is then always still in the Replay, and a
    link that loses data silently (an attach stream with nobody attached) stalls the command
    instead of dropping its output."""

    FRAMES = 32  # x at most 128 KiB an encoded frame (CHUNK_CHARS of 4 bytes): under the Replay's 8 MiB

    def __init__(self) -> None:
        self.id: Any = None
        self.sent = 0
        self.acked = 0

    def sent_frame(self, frame: dict[str, Any]) -> None:
        if frame.get("type") == "output":
            if frame["id"] != self.id:
                self.id, self.acked = frame["id"], 0
            self.sent = int(frame["seq"])

    def ack(self, cid: Any, seq: Any) -> None:
        if cid == self.id and isinstance(seq, int) and not isinstance(seq, bool):
            self.acked = max(self.acked, min(seq, self.sent))

    def open(self) -> bool:
        return self.sent - self.acked < self.FRAMES


class PipeOut:
    """A pipe's write end with the `sendmsg` that OutBuffer uses on sockets."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def sendmsg(self, buffers: list[memoryview]) -> int:
        return os.writev(self.fd, buffers)


class Sender:
    """What both channels (socket and stdio) do with an outgoing frame: keep a command's output for
    a resume, count it for flow control, and queue it for the host if one is there."""

    client: object | None
    outbuf: OutBuffer
    replay: Replay
    window: Window

    def flush(self) -> None:
        raise NotImplementedError

    def send(self, *frames: dict[str, Any]) -> None:
        """Queue frames for the host and write them together (one `writev` for a tick's output)."""
        for frame in frames:
            data = encode(frame)
            if frame.get("type") in ("output", "exit"):
                self.replay.remember(frame, data)
                self.window.sent_frame(frame)
            if self.client is not None:
                self.outbuf.append(data)
        if self.client is not None and frames:  # what waits already goes when the pipe takes more
            self.flush()

    def resume(self, resume: Any) -> None:
        """After a host's hello: what it missed of the running command, from its last sequence number."""
        if not isinstance(resume, dict):
            return
        seq = resume.get("seq")
        seq = seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else 0
        self.window.ack(resume.get("id"), seq)
        for data in self.replay.after(resume.get("id"), seq):
            self.outbuf.append(data)
        self.flush()
