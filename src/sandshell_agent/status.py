"""Bash's status channel: a command's status record, then word that its state is saved.

After each command bash writes `nonce NUL rc NUL cwd NUL how NUL` at once, and only then puts
the traps back and saves its state (the scripts a replacement shell starts from), ending with
`nonce NUL done NUL`. The result reaches the host while bash saves; the agent gives bash no
other command (and kills it for no restart) before the save is said done, so the state a new
shell starts from is always that of the last command that ended.

Bytes count only when the kernel says bash itself wrote them (SO_PASSCRED): a command can copy
the channel (`exec 7>&11`: bash holds it on a saved fd around the eval) and hand it to a process
that reads the next nonce off bash's input; and a record counts only with the running command's
nonce, so results never shift by one. What bash itself writes cannot be told apart, and a command
runs inside bash: one that looks up its nonce can end its own result early (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import select
import socket
import struct
import time
from dataclasses import dataclass

from . import wrapper

DONE = wrapper.DONE.encode()
BROKEN = wrapper.BROKEN.encode()

TAG_BYTES = 16  # BLAKE2s, as bashloop.c computes it
CRED_SIZE = struct.calcsize("iII")  # struct ucred: pid, uid, gid
CMSG_BYTES = socket.CMSG_SPACE(CRED_SIZE)
KEEP = 16384  # bytes of unmatched data kept while waiting for the real record (the loop's are under 4.2 KB)


@dataclass(frozen=True)
class Status:  # (a class, not a NamedTuple: compiled, made and read without Python's own code)
    code: int
    cwd: str
    syntax_error: bool
    broken: bool = False  # it did not run: the builtins the wrapper needs are disabled for good


def tag(key: bytes, data: bytes) -> bytes:
    """The compiled loop's tag of `data` under `key` (blake2s.h), as hex."""
    return hashlib.blake2s(data, key=key, digest_size=TAG_BYTES).hexdigest().encode()


def _parsed(rc_raw: bytes, cwd_raw: bytes, how: bytes) -> Status:
    try:
        code = int(rc_raw)
    except ValueError:
        code = 255
    return Status(code, cwd_raw.decode(errors="replace"), how == b"syntax", how == BROKEN)


class StatusChannel:
    """The agent's end of one shell's status channel (non-blocking)."""

    def __init__(self, fd: int, pid: int, key: bytes | None = None) -> None:
        self.fd, self.pid = fd, pid
        # A socket object of its own (a dup of `fd`), made once: making one per read asked the kernel
        # three times what the socket is (getsockname, getsockopt) before every record.
        self.sock = socket.socket(fileno=os.dup(fd)) if fd >= 0 else None
        self.key = key  # the compiled loop's records end with a tag under it (bashloop.c)
        self.buf = bytearray()
        self.nonce = b""  # the running command's: its status record starts with it
        self.saving = b""  # the last command's, until bash says its state is saved

    def expect(self, nonce: bytes) -> None:
        self.nonce, self.saving = nonce, b""
        self.buf.clear()

    def read(self) -> Status | None:
        """Take what bash wrote; the running command's status once its record is whole. EOFError
        when the channel closed (bash ended, or replaced itself with another program)."""
        got = self._read_from_bash()
        if got is None:
            return None
        data, from_bash = got
        if not data:
            raise EOFError("the shell closed its status channel")
        if not from_bash:
            return None  # dropped: another process wrote it
        self.buf += data
        if self.nonce:
            return self._status()
        self._saved()
        return None

    def _tagged(self, nonce: bytes, fields: int) -> list[bytes] | None:
        """The first record with `nonce`, `fields` fields and a right tag, and what follows it (the
        rest of the buffer is kept: a forged record or junk before it is passed over)."""
        assert self.key is not None
        at = 0
        while (start := self.buf.find(nonce + b"\0", at)) >= 0:
            parts = bytes(self.buf[start:]).split(b"\0", fields + 2)
            if len(parts) == fields + 3:
                mac = tag(self.key, b"\0".join(parts[: fields + 1]) + b"\0")
                if hmac.compare_digest(mac, parts[fields + 1]):
                    del self.buf[:start]
                    return parts
            at = start + 1
        del self.buf[: max(0, len(self.buf) - KEEP)]  # junk written by a command
        return None

    def _status(self) -> Status | None:
        """The last record with the nonce that has a status's four fields (bash's own comes last;
        its word that the save is done may follow it in the same read); with a key, the first whose
        tag is right."""
        if self.key is not None:
            parts = self._tagged(self.nonce, 3)
            if parts is None:
                return None
            _, rc_raw, cwd_raw, how, _, rest = parts
            self.buf[:] = rest
            self.saving, self.nonce = self.nonce, b""
            self._saved()
            return _parsed(rc_raw, cwd_raw, how)
        end = len(self.buf)
        while (start := self.buf.rfind(self.nonce + b"\0", 0, end)) >= 0:
            parts = bytes(self.buf[start:]).split(b"\0", 4)
            if len(parts) < 3 or parts[1] != DONE:
                break  # a status record (or the start of one: wait for the rest)
            end = start  # bash's word that an earlier save is done: look before it
        else:
            del self.buf[: max(0, len(self.buf) - KEEP)]  # junk written by a command
            return None
        if len(parts) < 5:
            return None
        _, rc_raw, cwd_raw, how, rest = parts
        self.buf[:] = rest
        self.saving, self.nonce = self.nonce, b""
        self._saved()
        return _parsed(rc_raw, cwd_raw, how)

    def _saved(self) -> None:
        if self.key is not None:
            if self.saving and (parts := self._tagged(self.saving, 1)) is not None and parts[1] == DONE:
                self.saving = b""
                self.buf[:] = parts[-1]
            return
        if self.saving and self.saving + b"\0" + DONE + b"\0" in self.buf:
            self.saving = b""
            self.buf.clear()
        else:
            del self.buf[: max(0, len(self.buf) - KEEP)]

    def wait_saved(self, seconds: float) -> str:
        """Wait (bounded) until bash says the last command's state is saved: "saved" (at once if it
        was), "hung" (it is still at it: the caller replaces it), or "ended" (the channel closed)."""
        deadline = time.monotonic() + seconds
        while self.saving:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return "hung"
            try:
                self.read()
            except (EOFError, OSError):
                return "ended"
        return "saved"

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _read_from_bash(self) -> tuple[bytes, bool] | None:
        """A read (b"" at the channel's end) and whether bash itself wrote it; None when nothing is there."""
        if self.sock is None:
            raise EOFError("the shell's status channel is closed")
        try:
            data, ancillary, _, _ = self.sock.recvmsg(4096, CMSG_BYTES)
        except BlockingIOError:
            return None
        pids = [
            struct.unpack("i", cred[:4])[0]
            for level, kind, cred in ancillary
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(cred) >= CRED_SIZE
        ]
        return data, pids == [self.pid]
