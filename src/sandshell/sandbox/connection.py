"""A framed, authenticated connection to the in-container agent."""

from __future__ import annotations

import contextlib
import math
import secrets
import select
import socket
import ssl
import struct
import threading
import time
from collections import deque
from typing import Any

from sandshell.errors import ProtocolError
from sandshell.sandbox.protocol import PROTOCOL_VERSION, FrameError, FrameReader, encode

MAX_FRAME = 16 * 1024 * 1024
READ_BYTES = 256 * 1024
# While more than PILE_BYTES of a frame's output are still to come (a flood: short frames never
# wait) and nothing more is there yet, wait PILE_SECONDS before reading again. Read as fast as it
# came, the stream arrived in ~5 KB pieces, and every hop (the engine, its shim, this reader) paid
# per piece: 100 MB took ~20,000 reads and 0.2-0.4 s of the engine's CPU; piled up, a third less.
PILE_BYTES = 8192
PILE_SECONDS = 0.0005
SPARE_WAIT = 1.0  # seconds a read of a plain socket may block after a poll said it would not
SEND_WAIT = 30.0  # seconds a send may wait for the engine to take it before the link counts as lost


class ConnectionLost(Exception):
    """The socket to the agent closed or failed."""


class Connection:
    """One socket to the agent. `send` may be called from any thread; `recv` from one reader."""

    def __init__(self, address: str | tuple[str, int], token: str, agent_pid: int | None = None) -> None:
        self.address = address
        self.token = token
        self.agent_pid = agent_pid  # a unix socket's peer must be this process (the engine's pid for it)
        self.sock: socket.socket | None = None
        self._reader = FrameReader(MAX_FRAME)
        self._frames: deque[dict[str, Any] | FrameError] = deque()
        self._send_lock = threading.Lock()
        self._poller: select.poll | None = None  # a plain socket's, kept blocking (_blocking)
        self.stderr: deque[str] = deque(maxlen=20)  # what the agent said on stderr (attach only)
        self.nonce = ""
        self._rbuf = memoryview(bytearray(READ_BYTES))  # every read lands here first (`_recv_within`)

    def open(self, resume: dict[str, Any] | None = None, timeout: float = 5.0) -> dict[str, Any]:
        """Connect and authenticate; returns the agent's hello."""
        self.close()
        self.nonce = secrets.token_hex(16)
        sock = self._connect(timeout)
        self._blocking(sock)
        self.sock = sock
        self._reader = FrameReader(MAX_FRAME)
        self._frames.clear()
        hello = {"type": "hello", "version": PROTOCOL_VERSION, "resume": resume, "nonce": self.nonce}
        self.send({**hello, "token": self.token} if self.token else hello, lead=b"\n")
        # The agent's hello comes first: a socket is fresh, and an attach skips what precedes it (_stdout)
        reply = self.recv(time.monotonic() + timeout)
        if reply.get("type") == "error":
            raise ProtocolError(f"the agent refused the connection: {reply.get('message')}", str(reply.get("code")))
        if reply.get("type") != "hello" or reply.get("version") != PROTOCOL_VERSION:
            raise ProtocolError(f"unexpected handshake reply from the agent: {str(reply)[:200]}")
        return reply

    def _connect(self, timeout: float) -> socket.socket:
        family = socket.AF_UNIX if isinstance(self.address, str) else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.settimeout(timeout)
        try:
            sock.connect(self.address)
        except OSError as e:
            sock.close()
            raise ConnectionLost(f"cannot connect to the agent: {e}") from None
        if family == socket.AF_UNIX and self.agent_pid is not None:
            # The socket's folder is bound into the container: root inside can put a listener of its
            # own at the path and collect the token. The kernel says who listens; only the agent counts.
            peer, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if peer != self.agent_pid:
                sock.close()
                raise ProtocolError(
                    f"the agent's socket is held by another process (pid {peer}, not the agent's {self.agent_pid}):"
                    " something inside the container took its place; the session token was not sent"
                )
        return sock

    def _feed(self, data: bytes) -> None:
        self._frames.extend(self._reader.feed(data))

    def closed_by_peer(self) -> bool:
        """Whether the other end has closed the link (checked without waiting or consuming)."""
        if (sock := self.sock) is None:
            return True
        if isinstance(sock, ssl.SSLSocket):
            return False  # no peeking through TLS: the reader notices instead
        try:
            if self._poller is not None:  # a plain socket: one call each, its mode kept
                return bool(self._poller.poll(0)) and sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            if not select.select([sock], [], [], 0)[0]:
                return False
            sock.setblocking(False)
            try:
                return sock.recv(1, socket.MSG_PEEK) == b""
            finally:
                sock.setblocking(True)
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True

    def send(self, frame: dict[str, Any], lead: bytes = b"") -> None:
        """Send one frame (after `lead`: a newline ends whatever an earlier link left half sent)."""
        self.send_raw(lead + encode(frame))

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (a frame, or a test's malformed one)."""
        with self._send_lock:
            if self.sock is None:
                raise ConnectionLost("not connected")
            try:
                self.sock.sendall(data)
            except OSError as e:
                raise ConnectionLost(f"send failed: {e}") from None

    def recv(self, deadline: float | None) -> dict[str, Any]:
        """The next frame; TimeoutError after `deadline` (monotonic), ConnectionLost on EOF."""
        while not self._frames:
            sock = self.sock
            if sock is None:
                raise ConnectionLost("not connected")
            if self._reader.coming() > PILE_BYTES and not _ready(sock):
                time.sleep(PILE_SECONDS)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("no frame from the agent in time")
            try:
                data = self._recv_within(sock, left)
            except TimeoutError:
                raise
            except OSError as e:
                raise ConnectionLost(f"receive failed: {e}") from None
            if data is None:
                continue  # the wait passed, not yet the deadline
            if not data:
                raise ConnectionLost("the agent closed the connection")
            self._feed(data)
        frame = self._frames.popleft()
        if isinstance(frame, FrameError):
            raise ProtocolError(f"unreadable frame from the agent: {frame}", frame.code)
        return frame

    def _recv_within(self, sock: socket.socket, left: float | None) -> bytes | None:
        """One read, waiting at most `left` seconds (None: no end); None when nothing came in time.
        A plain socket stays blocking (`_blocking`): a `poll` that keeps the deadline (Python works
        out the time left again after a signal; a blocking read it retries with the kernel's wait
        whole again, so signals every 0.1 s kept one from ever ending), then the read. Reads land in
        the connection's own buffer: `recv` allocated 256 KiB each (~35 µs a command, docs/benchmarks.md)."""
        poller = self._poller
        if poller is None:
            sock.settimeout(left)
        elif not poller.poll(None if left is None else max(1, math.ceil(left * 1000))):
            return None
        try:
            got = sock.recv_into(self._rbuf)
        except BlockingIOError:  # readable, then not (SO_RCVTIMEO: a read never blocks for long)
            return None
        return bytes(self._rbuf[:got])

    def _blocking(self, sock: socket.socket) -> None:
        """A plain socket in blocking mode, its reads polled first (`_recv_within`), the kernel
        bounding what could still block: a read SPARE_WAIT, a send SEND_WAIT. Not for TLS (whose
        reads may wait for the rest of a record) nor for other kinds of stream."""
        self._poller = None
        if type(sock) is socket.socket:
            sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(SPARE_WAIT))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(SEND_WAIT))
            self._poller = select.poll()
            self._poller.register(sock, select.POLLIN)

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
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), int(seconds % 1 * 1_000_000))


def _ready(sock: socket.socket) -> bool:
    """Whether a read would return at once (TLS: a record already decrypted, or more in the kernel)."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError, TypeError):
        return True  # no descriptor to ask: never wait


class AttachConnection(Connection):
    """The agent's stdin and stdout, attached through the Docker API (any engine: local, TCP+TLS, ssh).

    Without a TTY the engine prefixes what the container writes with an 8-byte header (stream
    1 stdout, 2 stderr; 3 zero bytes; big-endian length); what we write goes to stdin as it is.
    The agent's stderr is kept (bounded) to say why it died."""

    def __init__(self, api: Any, container_id: str) -> None:
        super().__init__("attach", "")
        self.api = api
        self.container_id = container_id
        self._raw, self._pre = bytearray(), bytearray()
        self._sync: bytes | None = None

    def _connect(self, timeout: float) -> socket.socket:
        try:
            attached = self.api.attach_socket(self.container_id, params=ATTACH)
        except Exception as e:  # docker's APIError, requests' errors: the engine would not attach
            raise ConnectionLost(f"cannot attach to the sandbox: {e}") from None
        sock = getattr(attached, "_sock", attached)  # SocketIO on a unix engine, an SSL socket on TLS
        self._attached = attached  # keeps the HTTP response (and so the socket) alive
        self._raw, self._pre = bytearray(), bytearray()
        self._sync = f'"nonce":"{self.nonce}"'.encode()
        return sock  # type: ignore[no-any-return]

    def _feed(self, data: bytes) -> None:
        whole = data[:1] == b"\x01" and int.from_bytes(data[4:8], "big") == len(data) - 8  # one piece of stdout
        if whole and not self._raw and self._sync is None:
            self._frames.extend(self._reader.feed(data[8:]))  # (a result: as it is)
            return
        buf = self._raw
        buf += data
        pos = 0
        while len(buf) - pos >= 8:
            size = int.from_bytes(buf[pos + 4 : pos + 8], "big")
            if len(buf) - pos - 8 < size:
                break
            stream, payload = buf[pos], bytes(buf[pos + 8 : pos + 8 + size])
            pos += 8 + size
            if stream == 1:
                self._stdout(payload)
            elif stream == 2:
                self.stderr.extend(payload.decode(errors="replace").splitlines()[-20:])
        del buf[:pos]

    def _stdout(self, payload: bytes) -> None:
        """Frames from the agent's stdout. A new attach may begin anywhere in the stream (mid-frame,
        or inside a command's raw output, which the model writes): everything before the agent's
        hello carrying our nonce is skipped unparsed, so nothing in it can pass for a frame."""
        if self._sync is None:
            self._frames.extend(self._reader.feed(payload))
            return
        pre = self._pre
        pre += payload
        at = pre.find(self._sync)
        end = pre.find(b"\n", at) if at >= 0 else -1
        if end < 0:
            del pre[: max(0, len(pre) - SYNC_KEEP)]
            return
        start = pre.rfind(b"\n", 0, at) + 1
        line, rest = bytes(pre[start : end + 1]), bytes(pre[end + 1 :])
        pre.clear()
        self._sync = None
        self._frames.extend(self._reader.feed(line))
        self._frames.extend(self._reader.feed(rest))

    def close(self) -> None:
        """Close the attach for good: the socket, its file object and the HTTP response that holds
        it (a socket closed with other references left open stays open, and the engine goes on
        writing to an attach nobody reads)."""
        sock, attached = self.sock, getattr(self, "_attached", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for part in (attached, getattr(attached, "_response", None)):
            with contextlib.suppress(Exception):
                part.close()  # type: ignore[union-attr]
        self._attached = None
        super().close()


ATTACH = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
SYNC_KEEP = 64 * 1024  # bytes kept while looking for the hello (it is far shorter)
