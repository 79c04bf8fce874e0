"""The agent's stdin and stdout through a pod's `attach` subresource: a thin WebSocket client.

The API server (and behind it the kubelet) carries the pod's streams over one WebSocket, each
binary message led by a channel byte: 0 stdin, 1 stdout, 2 stderr, 3 the status as JSON when the
container ends; `v5.channel.k8s.io` adds 255 (`[255, 0]` closes stdin), `v4.channel.k8s.io` is
the fallback. The official client's `stream()` keeps every byte in memory with no flow control,
so this reads the socket itself: what the agent writes waits in the kernel until the reader
takes it, and the agent's window (acknowledged output frames) bounds the rest. Stdin messages are
at most STDIN_FRAME bytes (a single huge message resets the stream on real clusters); a ping goes
out whenever the link was quiet for `heartbeat` seconds (kubelets and load balancers drop idle
streams). TLS, the token and the server come from the client's `Configuration`, so kubeconfig,
exec plugins and in-cluster service accounts all work as they do for the client.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import struct
import threading
import time
import urllib.parse
from typing import Any

from sandshell.errors import SandboxError
from sandshell.sandbox.connection import AttachConnection, ConnectionLost, _ready
from sandshell.sandbox.kubernetes import websocket

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN_FRAME = 1024 * 1024  # bytes of one stdin message, the channel byte included
MAX_MESSAGE = 32 * 1024 * 1024  # the most one message from the server may hold


class AttachRefused(SandboxError):
    """The API server answered the attach with an HTTP error (RBAC, a pod that is gone, ...)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class PodAttachConnection(AttachConnection):
    """One session's link to its agent through `pods/attach`; `open` again re-attaches."""

    def __init__(self, configuration: Any, namespace: str, pod: str, heartbeat: float = 20.0) -> None:
        super().__init__(None, pod)
        self.configuration, self.namespace, self.pod = configuration, namespace, pod
        self.heartbeat = heartbeat
        self.protocol = ""
        self.status: dict[str, Any] | None = None  # channel 3: how the container ended
        self._buf = bytearray()
        self._parts: list[bytes] = []  # a fragmented message so far
        self._last_sent = time.monotonic()
        self._beat: threading.Event | None = None

    # -- the handshake -----------------------------------------------------------------------
    def _connect(self, timeout: float) -> socket.socket:
        url = urllib.parse.urlsplit(self.configuration.host)
        secure = url.scheme == "https"
        port = url.port or (443 if secure else 80)
        try:
            sock: socket.socket = socket.create_connection((url.hostname, port), timeout=timeout)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            if secure:
                sock = websocket.tls(self.configuration).wrap_socket(
                    sock, server_hostname=self.configuration.tls_server_name or url.hostname
                )
        except (OSError, ssl.SSLError) as e:
            raise ConnectionLost(f"cannot reach the Kubernetes API server at {self.configuration.host}: {e}") from None
        self._buf.clear()  # (before the handshake: what came with its answer is the stream's start)
        self._parts.clear()
        self.status = None
        try:
            self._handshake(sock, url, timeout)
        except BaseException:
            sock.close()
            raise
        self._raw, self._pre = bytearray(), bytearray()
        self._sync = f'"nonce":"{self.nonce}"'.encode()
        self._start_heartbeat()
        return sock

    def _handshake(self, sock: socket.socket, url: urllib.parse.SplitResult, timeout: float) -> None:
        key = websocket.new_key()
        query = "container=sandbox&stdin=true&stdout=true&stderr=true&tty=false"
        path = f"{url.path.rstrip('/')}/api/v1/namespaces/{self.namespace}/pods/{self.pod}/attach?{query}"
        headers = {
            "Host": url.netloc,
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": key,
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Protocol": ", ".join(PROTOCOLS),
            "User-Agent": "sandshell",
        }
        for auth in self.configuration.auth_settings().values():  # a bearer token (refreshed by its hook)
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        if self.configuration.username and self.configuration.password:
            headers["Authorization"] = self.configuration.get_basic_auth_token()
        request = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.settimeout(timeout)
        try:
            sock.sendall(request.encode())
            head, rest = websocket.read_head(sock)
        except (OSError, ValueError) as e:
            raise ConnectionLost(f"the attach to pod {self.pod} failed: {e}") from None
        status, fields = websocket.parse_head(head)
        if status != 101:
            raise _refusal(status, rest, sock, self.namespace, self.pod)
        if fields.get("sec-websocket-accept") != websocket.accept_for(key):
            raise ConnectionLost("the API server's WebSocket answer does not match the request")
        self.protocol = fields.get("sec-websocket-protocol", "")
        if self.protocol not in PROTOCOLS:
            raise ConnectionLost(f"the API server offers no attach protocol sandshell speaks ({self.protocol!r})")
        self._buf += rest

    # -- reading -----------------------------------------------------------------------------
    def _recv_within(self, sock: socket.socket, left: float | None) -> bytes | None:
        if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            data = super()._recv_within(sock, left)
            if data is None:
                return None
        else:
            data = sock.recv(1 << 20)
        if not data:
            raise ConnectionLost(self._ended() or "the API server closed the attach")
        self._buf += data
        self._messages()
        if self.status is not None and not self._frames:
            raise ConnectionLost(self._ended())
        return None  # frames, if any, are queued; recv goes on

    def _messages(self) -> None:
        buf, pos = self._buf, 0
        while len(buf) - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            size, at = b1 & 0x7F, pos + 2
            if size == 126:
                if len(buf) - at < 2:
                    break
                size, at = struct.unpack_from(">H", buf, at)[0], at + 2
            elif size == 127:
                if len(buf) - at < 8:
                    break
                size, at = struct.unpack_from(">Q", buf, at)[0], at + 8
            if size > MAX_MESSAGE:
                raise ConnectionLost(f"the API server sent a message of {size} bytes, over {MAX_MESSAGE}")
            mask = b""
            if b1 & 0x80:  # a server must not mask, but reading it costs nothing
                mask, at = bytes(buf[at : at + 4]), at + 4
            if len(buf) - at < size:
                break
            payload = bytes(buf[at : at + size])
            if mask:
                payload = websocket.masked(payload, mask)
            pos = at + size
            self._message(b0 & 0x0F, bool(b0 & 0x80), payload)
        del buf[:pos]

    def _message(self, opcode: int, fin: bool, payload: bytes) -> None:
        if opcode == 0x9:
            self._send_frame(0xA, payload)
            return
        if opcode == 0x8:
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
            raise ConnectionLost(self._ended() or f"the API server closed the attach (code {code})")
        if opcode in (0x1, 0x2, 0x0):
            self._parts.append(payload)
            if not fin:
                if sum(map(len, self._parts)) > MAX_MESSAGE:
                    raise ConnectionLost(f"the API server sent a message in pieces over {MAX_MESSAGE} bytes")
                return
            whole, self._parts = b"".join(self._parts), []
            if whole:
                self._channel(whole[0], whole[1:])

    def _channel(self, channel: int, data: bytes) -> None:
        if channel == 1:
            self._stdout(data)
        elif channel == 2:
            self.stderr.extend(data.decode(errors="replace").splitlines()[-20:])
        elif channel == 3 and data:
            with contextlib.suppress(ValueError):
                said = json.loads(data)
                self.status = said if isinstance(said, dict) else {"message": str(said)}

    def _ended(self) -> str:
        if self.status is None:
            return ""
        return f"the pod's container ended ({str(self.status.get('message') or self.status.get('status'))[:200]})"

    # -- writing -----------------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        """Send to the agent's stdin, in messages of at most STDIN_FRAME bytes."""
        with self._send_lock:
            step = STDIN_FRAME - 1
            for at in range(0, max(len(data), 1), step):
                self._frame_locked(0x2, b"\x00" + data[at : at + step])

    def half_close(self) -> None:
        """Say that no more stdin follows (v5 only; v4 has no way to, and the agent does not need it)."""
        if self.protocol == PROTOCOLS[0]:
            with contextlib.suppress(ConnectionLost):
                self._send_frame(0x2, b"\xff\x00")

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        with self._send_lock:
            self._frame_locked(opcode, payload)

    def _frame_locked(self, opcode: int, payload: bytes) -> None:
        if self.sock is None:
            raise ConnectionLost("not connected")
        try:
            self.sock.sendall(websocket.client_frame(opcode, payload))
        except OSError as e:
            raise ConnectionLost(f"send failed: {e}") from None
        self._last_sent = time.monotonic()

    def _start_heartbeat(self) -> None:
        if self._beat is not None:
            self._beat.set()
        stop = self._beat = threading.Event()
        if self.heartbeat <= 0:
            return

        def beat() -> None:
            while not stop.wait(self.heartbeat / 2):
                if time.monotonic() - self._last_sent >= self.heartbeat:
                    try:
                        self._send_frame(0x9, b"sandshell")
                    except ConnectionLost:
                        return  # the reader notices

        threading.Thread(target=beat, name=f"attach heartbeat {self.pod}", daemon=True).start()

    def closed_by_peer(self) -> bool:
        """Whether the attach has ended: what already arrived is read (frames are kept for `recv`),
        so a close or an EOF waiting in the socket is seen before a command is sent into it."""
        sock = self.sock
        if sock is None or self.status is not None:
            return True
        try:
            while _ready(sock):
                self._recv_within(sock, 0.001)
        except (ConnectionLost, OSError):
            return True
        return False

    def close(self) -> None:
        if self._beat is not None:
            self._beat.set()
            self._beat = None
        if self.sock is not None:
            self.half_close()  # a clean end of what we write (stdinOnce is false: the agent's stdin stays open)
            with contextlib.suppress(ConnectionLost):
                self._send_frame(0x8, struct.pack(">H", 1000))
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        super(AttachConnection, self).close()


def _refusal(status: int, rest: bytes, sock: socket.socket, namespace: str, pod: str) -> BaseException:
    """One sentence for an attach the API server refused, from its Status body when it sent one."""
    with contextlib.suppress(OSError):
        sock.settimeout(1.0)
        while len(rest) < 16 * 1024 and (more := sock.recv(4096)):
            rest += more
    message = ""
    with contextlib.suppress(ValueError, AttributeError):
        message = str(json.loads(rest.decode(errors="replace")).get("message", ""))[:300]
    if status in (401, 403):
        return AttachRefused(
            status,
            f"the cluster refused to attach to pod {pod} in {namespace} ({message or status}); the account "
            "sandshell uses needs get and create on pods/attach there (docs/scaling.md has the Role)",
        )
    if status == 404:
        return ConnectionLost(f"pod {pod} is gone ({message or 'not found'})")
    return ConnectionLost(f"the API server refused the attach to pod {pod}: HTTP {status} {message}".strip())
