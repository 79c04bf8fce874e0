"""The workspace carried through the channel, for an engine that can mount nothing of the host (a pod).

`put` writes one entry the host sends under /app (a folder, a piece of a file, a link), `entries`
names what /app holds, `get` reads a piece of one regular file. Every step is taken through
directory descriptors without following a link (`files.open_dir`), so an entry the model swapped
for a link cannot send a write or a read elsewhere; what the host does with the pieces (untar.py)
checks them again. Pieces are base64 in the frame, at most PIECE bytes each.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import os
import stat
from typing import Any

from .files import open_dir

PIECE = 1024 * 1024  # bytes of one put or get
MAX_LIST = 200_000  # entries `entries` names at most
MAX_LIST_BYTES = 12 * 1024 * 1024  # ... and bytes of their names and targets (one frame the host takes)


KINDS = ("put", "entries", "get")


def handle(kind: str, frame: dict[str, Any], root: str, owner: tuple[int, int] | None) -> dict[str, Any]:
    """The reply's fields to one of KINDS."""
    if kind == "put":
        return put(root, frame, owner if os.geteuid() == 0 else None)
    return listing(root) if kind == "entries" else get(root, frame)


def _split(root: str, rel: Any) -> tuple[str, str]:
    """(parent folder, name) of a relative path under root; ValueError for anything else."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        raise ValueError("a relative path under /app is needed")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{rel[:200]!r} is not a plain relative path")
    return os.path.join(root, *parts[:-1]), parts[-1]


def put(root: str, frame: dict[str, Any], owner: tuple[int, int] | None) -> dict[str, Any]:
    """Write one entry; returns the reply's fields (`error` on refusal)."""
    try:
        folder, name = _split(root, frame.get("path"))
        kind, mode = frame.get("kind"), int(frame.get("mode") or 0o644) & 0o1777
        dfd = open_dir(folder)
        try:
            if kind == "dir":
                os.close(open_dir(os.path.join(folder, name)))
                os.chmod(name, mode, dir_fd=dfd, follow_symlinks=False)
            elif kind == "link":
                os.symlink(str(frame.get("target", "")), name, dir_fd=dfd)
            elif kind == "file":
                data = memoryview(base64.b64decode(str(frame.get("data", "")), validate=True))
                if len(data) > PIECE:
                    raise ValueError(f"a piece is at most {PIECE} bytes")
                flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                flags |= os.O_APPEND if frame.get("append") else os.O_TRUNC
                fd = os.open(name, flags, mode, dir_fd=dfd)
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        raise ValueError(f"{name[:200]!r} is not a regular file")
                    while data:
                        data = data[os.write(fd, data) :]
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
            else:
                raise ValueError(f"an entry's kind is dir, file or link, not {str(kind)[:40]!r}")
            if owner is not None and os.geteuid() == 0:
                os.chown(name, *owner, dir_fd=dfd, follow_symlinks=False)
        finally:
            os.close(dfd)
    except (OSError, ValueError, TypeError, NotImplementedError, binascii.Error) as e:
        return {"error": str(e)[:300]}
    return {"error": None}


def listing(root: str) -> dict[str, Any]:
    """[path, kind, mode, size, link target] for everything under root, folders before their contents.
    Each folder is opened without following a link at any step (one swapped for a link since it was
    listed is passed over, never listed from where it points)."""
    entries: list[list[Any]] = []
    stack, size = [""], 0
    while stack:
        rel = stack.pop()
        try:
            fd = open_dir(os.path.join(root, rel) if rel else root, create=False)
        except OSError:
            continue
        try:
            with os.scandir(fd) as found:
                items = sorted(itertools.islice(found, MAX_LIST + 1), key=lambda e: e.name)
            for entry in items:
                path = f"{rel}/{entry.name}" if rel else entry.name
                size += len(path) + 64
                if len(entries) >= MAX_LIST or size > MAX_LIST_BYTES:
                    why = f"/app holds more than {MAX_LIST} entries or {MAX_LIST_BYTES} bytes of names"
                    return {"entries": None, "error": why}
                try:
                    st = entry.stat(follow_symlinks=False)
                    target = os.readlink(entry.name, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else ""
                except OSError:
                    continue
                size += len(target)
                if stat.S_ISDIR(st.st_mode):
                    entries.append([path, "dir", stat.S_IMODE(st.st_mode), 0, ""])
                    stack.append(path)
                elif stat.S_ISLNK(st.st_mode):
                    entries.append([path, "link", 0o777, 0, target])
                elif stat.S_ISREG(st.st_mode):
                    entries.append([path, "file", stat.S_IMODE(st.st_mode), st.st_size, ""])
        finally:
            os.close(fd)
    return {"entries": entries, "error": None}


def get(root: str, frame: dict[str, Any]) -> dict[str, Any]:
    """A piece of one regular file: `data` (base64) and `eof`."""
    try:
        folder, name = _split(root, frame.get("path"))
        offset, size = int(frame.get("offset") or 0), min(int(frame.get("size") or PIECE), PIECE)
        dfd = open_dir(folder, create=False)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        finally:
            os.close(dfd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"{name[:200]!r} is not a regular file")
            data = os.pread(fd, max(size, 0), max(offset, 0))
        finally:
            os.close(fd)
    except (OSError, ValueError, TypeError) as e:
        return {"data": None, "eof": True, "error": str(e)[:300]}
    return {"data": base64.b64encode(data).decode(), "eof": len(data) < size, "error": None}
