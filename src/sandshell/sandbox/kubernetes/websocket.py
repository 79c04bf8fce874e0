"""The WebSocket pieces the attach needs (RFC 6455): the handshake's key and answer, the frames a
client sends (masked), TLS from the Kubernetes client's configuration."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
from typing import Any

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def new_key() -> str:
    return base64.b64encode(os.urandom(16)).decode()


def accept_for(key: str) -> str:
    """The Sec-WebSocket-Accept a server must answer `key` with."""
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One final frame from a client (masked, as RFC 6455 requires of clients)."""
    size = len(payload)
    head = bytes([0x80 | opcode])
    if size < 126:
        head += bytes([0x80 | size])
    elif size < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack(">H", size)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", size)
    mask = os.urandom(4)
    return head + mask + masked(payload, mask)


def masked(data: bytes, mask: bytes) -> bytes:
    """XOR with the repeated 4-byte mask, as one big-integer operation (fast for 1 MiB)."""
    if not data:
        return data
    n = len(data)
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def tls(configuration: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if getattr(configuration, "ca_cert_data", None):
        data = configuration.ca_cert_data
        context.load_verify_locations(cadata=data.decode() if isinstance(data, bytes) else data)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        got = sock.recv(4096)
        if not got:
            raise ValueError("the connection closed during the handshake")
        data += got
        if len(data) > 64 * 1024:
            raise ValueError("the handshake's answer is too long")
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return status, fields
