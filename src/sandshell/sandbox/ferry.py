"""The workspace in and back through the agent's channel, for a sandbox whose engine mounts nothing
of the host (a pod): the same three modes as on Docker, carried by the agent protocol.

In (every mode): the host folder is walked without following links and each entry sent with
`put` (files in pieces of at most PIECE bytes; no set-id bits), before the model's first action.
Back (rw only): `entries` names what /app holds and `get` reads each regular file in pieces; the host
writes them as a tar into a temporary file and hands it to the same hardened path as an archive
from Docker (`transfer.unpack_into`: untar.py's descriptors, nothing outside, no devices, then a
mirror that follows no link). So `rw` copies back at the end, when asked and every
SANDSHELL_SYNC_SECONDS; `ro` and `copy` never write to the host folder (on a cluster `ro` is a
copy the model may change inside the pod: no host folder can be mounted read-only there).
"""

from __future__ import annotations

import base64
import io
import os
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandshell.config import SandboxSettings
from sandshell.errors import SandboxError
from sandshell.sandbox.transfer import TAR_SLACK, unpack_into

PIECE = 768 * 1024  # raw bytes a put or get carries (base64 makes it ~1 MiB: one stdin message)
Ask = Callable[[dict[str, Any]], dict[str, Any]]


def push(ask: Ask, folder: Path) -> tuple[int, int]:
    """Send the folder's contents into /app; returns (entries, bytes). SandboxError on a refusal."""
    entries = size = 0
    for top, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        rel_top = os.path.relpath(top, folder)
        for name in [*dirs, *sorted(files)]:
            path, rel = os.path.join(top, name), name if rel_top == "." else f"{rel_top}/{name}"
            st = os.lstat(path)
            mode = stat.S_IMODE(st.st_mode) & ~0o6000
            if stat.S_ISDIR(st.st_mode):
                _put(ask, {"path": rel, "kind": "dir", "mode": mode})
            elif stat.S_ISLNK(st.st_mode):
                _put(ask, {"path": rel, "kind": "link", "target": os.readlink(path)})
            elif stat.S_ISREG(st.st_mode):
                size += _send_file(ask, path, rel, mode)
            else:
                continue  # a FIFO, socket or device: nothing a workspace carries
            entries += 1
    return entries, size


def _send_file(ask: Ask, path: str, rel: str, mode: int) -> int:
    sent = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # (a FIFO put there since: no wait)
    with os.fdopen(fd, "rb") as f:
        while True:
            piece = f.read(PIECE)
            if piece or not sent:
                data = base64.b64encode(piece).decode()
                _put(ask, {"path": rel, "kind": "file", "mode": mode, "data": data, "append": sent > 0})
            sent += len(piece)
            if len(piece) < PIECE:
                return sent


def _put(ask: Ask, frame: dict[str, Any]) -> None:
    reply = ask({"type": "put", **frame})
    if reply.get("error"):
        raise SandboxError(f"the workspace could not be copied in: {frame['path'][:200]}: {reply['error']}")


def pull(ask: Ask, workspace: Path, limit: int) -> str:
    """Copy /app back into the workspace (see the module's doc); says what came back."""
    listed = ask({"type": "entries"})
    if listed.get("error") or not isinstance(listed.get("entries"), list):
        raise SandboxError(f"/app could not be listed ({listed.get('error')}); the workspace is as before")
    with tempfile.TemporaryFile() as tar_file:
        total = 0
        with tarfile.open(fileobj=tar_file, mode="w") as tar:
            for entry in listed["entries"]:
                if not (isinstance(entry, list) and len(entry) == 5 and isinstance(entry[0], str)):
                    continue
                path, kind, mode, _size, target = entry
                info = tarfile.TarInfo(f"app/{path}")  # as Docker archives /app: untar.unpack expects it
                info.mode = int(mode) & 0o777 if isinstance(mode, int) else 0o644
                info.mtime = int(time.time())
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif kind == "link":
                    info.type, info.linkname = tarfile.SYMTYPE, str(target)
                    tar.addfile(info)
                elif kind == "file":
                    with tempfile.TemporaryFile() as body:
                        total += _fetch(ask, path, body, limit - total if limit else 0)
                        info.size = body.tell()
                        body.seek(0)
                        tar.addfile(info, body)
        tar_file.seek(0)
        got = unpack_into(tar_file, workspace)
    said = f"/app copied back to {workspace}: {got.files} files, {got.size} bytes"
    if got.refused_count:
        said += f"; {got.refused_count} refused ({', '.join(sorted(got.why))}): {', '.join(got.refused)}"
    return said


def _fetch(ask: Ask, path: str, out: io.BufferedRandom | Any, room: int) -> int:
    offset = 0
    while True:
        reply = ask({"type": "get", "path": path, "offset": offset, "size": PIECE})
        if reply.get("error") is not None or not isinstance(reply.get("data"), str):
            return offset  # gone or changed meanwhile: what arrived stands, the next copy has the rest
        piece = base64.b64decode(reply["data"])
        offset += len(piece)
        if room and offset > room + TAR_SLACK:
            raise SandboxError("/app holds more than the workspace limit; not copied back (the workspace is as before)")
        out.write(piece)
        if reply.get("eof") or not piece:
            return offset


class Sync:
    """When /app comes back from a pod (rw mode): at the end, when asked, and after an action once
    SANDSHELL_SYNC_SECONDS passed since the last copy. The same calls as `transfer.Sync`."""

    def __init__(self, workspace: Path, settings: SandboxSettings, log: Callable[[str], None], ask: Ask) -> None:
        self.workspace, self.settings, self.log, self.ask = workspace, settings, log, ask
        self.last = time.monotonic()

    def begin(self) -> None:
        entries, size = push(self.ask, self.workspace)
        self.log(f"the workspace went into the pod: {entries} entries, {size} bytes")
        self.last = time.monotonic()

    def due(self, box: Any) -> None:
        every = self.settings.sync_seconds
        if every and time.monotonic() - self.last > every:
            self.now(box)

    def now(self, box: Any, quiet: bool = True, full: bool = False) -> str:
        if box is None or self.settings.workspace_mode != "rw":
            return ""
        self.last = time.monotonic()
        try:
            said = pull(self.ask, self.workspace, self.settings.workspace_limit)
        except Exception as e:  # /app is the model's, and the link may be gone: nothing here ends the session
            said = f"/app was not copied back: {str(e)[:300]}"
            quiet = False
        if not quiet:
            self.log(said)
        return said
