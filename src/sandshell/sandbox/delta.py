"""Copying back only what changed since the last copy (archive transfer, rw mode).

A full copy tars all of /app while holding the sandbox's lock (~0.4 ms an entry: 100,000 files
would hold the next command ~45 s). With what the engine's API gives, no agent involved: one exec
lists /app (`find -printf`: type, mode, link count, size, ctime, inode, path), compared with the
listing taken before the last copy; only files whose line changed are fetched (one archive each)
and written through untar's descriptors, removed ones are removed, folders made. ctime is used
because no process without CAP_SYS_TIME can set it back, so content cannot change unseen.

The listing comes from a process the model can tamper with (a `find` of its own): it can only
choose what is copied, never where it goes or how (names are checked, every write is untar's).
Anything this does not handle takes the full copy instead: no listing yet, a listing that fails,
a link, FIFO or hard link among the changes, more than MAX_CHANGED files, anything refused last time.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import docker.errors
import requests.exceptions

from sandshell.sandbox import dirfd, untar

LIST = ["find", "/app", "-mindepth", "1", "-printf", "%y %m %n %s %C@ %i %P\\0"]
MAX_LISTING = 64 << 20  # bytes of listing read at most
MAX_KEPT = 400_000  # entries: a bigger /app is copied whole each time (~250 bytes kept an entry)
MAX_CHANGED = 256  # files fetched one by one; more, and one archive of everything is as quick
HEADER = re.compile(rb"[a-zA-Z] [0-7]{1,7} \d{1,10} \d{1,20} \d{1,20}(\.\d{1,10})? \d{1,20}")  # %y %m %n %s %C@ %i
LIST_SECONDS = 20  # the listing takes ~0.1 s for 20,000 entries


class Fallback(Exception):
    """Copy everything instead (the reason is for the log)."""


def listing(container: Any) -> dict[str, str] | None:
    """path -> its line (type mode links size ctime inode) for everything under /app, or None."""
    api = container.client.api
    try:
        ex = api.exec_create(container.id, LIST, stdout=True, stderr=False)
        out = _read(api.exec_start(ex["Id"], socket=True), time.monotonic() + LIST_SECONDS)
        if out is None or api.exec_inspect(ex["Id"]).get("ExitCode") != 0:  # e.g. a folder it could not read
            return None
    except (docker.errors.APIError, requests.exceptions.RequestException, OSError):
        return None  # a stopped container, an engine that went away: the full copy says why
    entries: dict[str, str] = {}
    for record in bytes(out).split(b"\0")[:-1]:
        fields = record.split(b" ", 6)
        if len(fields) != 7 or len(entries) >= MAX_KEPT:
            return None
        if not HEADER.fullmatch(b" ".join(fields[:6])):
            return None  # the model's own `find` may print anything: only what find prints is parsed
        path = os.fsdecode(fields[6])
        try:
            dirfd.parts(path)  # a name out of /app, or deeper than a copy takes: no listing
        except untar.Refused:
            return None
        entries[path] = b" ".join(fields[:6]).decode("ascii", "replace")
    return entries


def _read(attached: Any, deadline: float) -> bytes | None:
    """The exec's stdout (frames: 8-byte header, stream 1), or None past the deadline or MAX_LISTING:
    a `find` of the model's that never ends must not hold the copy (and the lock) for long."""
    sock = getattr(attached, "_sock", attached)  # SocketIO on a unix engine, an SSL socket on TLS
    raw = bytearray()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or len(raw) > MAX_LISTING:
                return None
            sock.settimeout(left)
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            raw += chunk
    except (TimeoutError, OSError):
        return None
    finally:
        with contextlib.suppress(Exception):
            attached.close()
    out, pos = bytearray(), 0
    while len(raw) - pos >= 8:
        size = int.from_bytes(raw[pos + 4 : pos + 8], "big")
        if raw[pos] == 1:
            out += raw[pos + 8 : pos + 8 + size]
        pos += 8 + size
    return bytes(out)


Fetch = Callable[[Any, IO[bytes], int, str], None]


def apply(
    container: Any, workspace: Path, before: dict[str, str], now: dict[str, str], limit: int, fetch: Fetch
) -> tuple[int, int, int]:
    """Bring the changes from `before` to `now` into `workspace`; (files, bytes, removed). Fallback
    when this cannot (the workspace may then be partly updated: the full copy that follows is the truth)."""
    changed = [p for p, line in now.items() if before.get(p) != line]
    gone = [p for p in before if p not in now]
    for path in changed + gone:
        kinds = {_kind(now.get(path)), _kind(before.get(path))}
        if not kinds <= {"f", "d", None}:
            raise Fallback("a link or a special file changed")
    files = [p for p in changed if _kind(now[p]) == "f"]
    if len(files) > MAX_CHANGED:
        raise Fallback(f"more than {MAX_CHANGED} files changed")
    if any(_field(now[p], 2) != "1" for p in files):
        raise Fallback("a file with hard links changed")
    st = workspace.stat()
    owner = (st.st_uid, st.st_gid) if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0) else None
    tree = untar.Tree(workspace, owner)
    staging = Path(tempfile.mkdtemp(prefix=f".{workspace.name}.delta-", dir=workspace.parent))  # same filesystem
    staged = untar.Tree(staging, owner)
    try:
        for path in sorted(gone, key=lambda p: -p.count("/")):
            _remove(tree, _parts(path))
        for path in sorted((p for p in changed if _kind(now[p]) == "d"), key=lambda p: p.count("/")):
            _folder(tree, _parts(path), int(_field(now[path], 1), 8))
        size = sum(_file(container, tree, staged, _parts(p), limit, fetch) for p in files)
    finally:
        staged.close()
        tree.close()
        shutil.rmtree(staging, ignore_errors=True)
    return len(files), size, len(gone)


def _kind(line: str | None) -> str | None:
    return None if line is None else _field(line, 0)


def _field(line: str, n: int) -> str:
    return line.split(" ")[n]


def _parts(path: str) -> list[str]:
    try:
        return dirfd.parts(path)
    except untar.Refused:
        raise Fallback(f"an odd name in the listing: {untar.one_line(path[:100])}") from None


def _parent(tree: untar.Tree, parts: list[str]) -> int:
    try:
        return tree.open_dir(parts[:-1], create=True)
    except untar.Refused:
        raise Fallback("a link in the workspace where the container has a folder") from None


def _clear(parent: int, name: str, keep_dir: bool = False) -> bool:
    """Remove what is at `name` (never following a link); True if it was a folder kept."""
    try:
        st = os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        if keep_dir:
            return True
        shutil.rmtree(name, dir_fd=parent)  # descriptor-based: never through a link
    else:
        os.unlink(name, dir_fd=parent)
    return False


def _remove(tree: untar.Tree, parts: list[str]) -> None:
    try:
        parent = tree.open_dir(parts[:-1])
    except (FileNotFoundError, untar.Refused):
        return  # its folder is gone already (or is not one here)
    try:
        _clear(parent, parts[-1])
    finally:
        os.close(parent)


def _folder(tree: untar.Tree, parts: list[str], mode: int) -> None:
    parent = _parent(tree, parts)
    try:
        if not _clear(parent, parts[-1], keep_dir=True):
            os.mkdir(parts[-1], 0o700, dir_fd=parent)
        fd = os.open(parts[-1], untar.DIR_FLAGS, dir_fd=parent)
        try:
            os.fchmod(fd, (mode & 0o755) | 0o700)
            if tree.owner is not None:
                os.fchown(fd, *tree.owner)
        finally:
            os.close(fd)
    finally:
        os.close(parent)


def _file(container: Any, tree: untar.Tree, staged: untar.Tree, parts: list[str], limit: int, fetch: Fetch) -> int:
    """Fetch one file into the staging folder beside the workspace, then rename it into place."""
    with tempfile.TemporaryFile() as tar_file:
        fetch(container, tar_file, limit, "/app/" + "/".join(parts))
        tar_file.seek(0)
        with tarfile.open(fileobj=tar_file, mode="r:") as tar:
            member = tar.next()
            if member is None or not member.isreg() or member.name != parts[-1]:
                raise Fallback("the file changed into something else while it was copied")
            staged.add(member, tar.extractfile(member), "new")
        parent = _parent(tree, parts)
        try:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISDIR(os.lstat(parts[-1], dir_fd=parent).st_mode):
                    shutil.rmtree(parts[-1], dir_fd=parent)  # a folder that became a file
            os.rename("new", parts[-1], src_dir_fd=staged.root, dst_dir_fd=parent)  # over a file: in one step
        finally:
            os.close(parent)
        return member.size
