"""Copying back only what changed since the last copy (archive transfer, rw mode).

A full copy tars all of /app while holding the sandbox's lock (~0.4 ms an entry: 100,000 files
would hold the next command ~45 s). Instead the agent lists /app over its channel (type, mode,
link count, size, ctime, inode, path: `sandshell_agent/listing.py`), compared with the listing
taken before the last copy; only files whose line changed are fetched (one archive each, through
the engine's archive API) and written through untar's descriptors, removed ones are removed,
folders made. ctime is used because no process without CAP_SYS_TIME can set it back, so content
cannot change unseen. The host runs nothing from the container's filesystem: the agent is PID 1,
under its own filter and limits, and nothing of the model's stands in for it.

Anything this does not handle takes the full copy instead: no listing yet, a listing refused
(a bound, an unreadable folder), a link, FIFO or hard link among the changes, more than
MAX_CHANGED files or more bytes than the workspace limit, anything refused last time.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from sandshell.sandbox import dirfd, hosttree, untar

MAX_LISTING = 64 << 20  # bytes of listing taken at most (the agent stops there too)
MAX_KEPT = 400_000  # entries: a bigger /app is copied whole each time (~250 bytes kept an entry)
MAX_CHANGED = 256  # files fetched one by one; more, and one archive of everything is as quick
HEADER = re.compile(rb"[a-zA-Z] [0-7]{1,7} \d{1,10} \d{1,20} \d{1,20}(\.\d{1,10})? \d{1,20}")  # %y %m %n %s %C@ %i
LIST_SECONDS = 20  # the agent gives up at 10 s; the listing takes ~0.3 s for 20,000 entries

Listing = dict[str, str]


class Fallback(Exception):
    """Copy everything instead (the reason is for the log)."""


def parse(records: bytes | None) -> Listing | None:
    """path -> its line (type mode links size ctime inode) for every record, or None when any is odd."""
    if records is None or len(records) > MAX_LISTING:
        return None
    entries: Listing = {}
    for record in records.split(b"\0")[:-1]:
        fields = record.split(b" ", 6)
        if len(fields) != 7 or len(entries) >= MAX_KEPT:
            return None
        if not HEADER.fullmatch(b" ".join(fields[:6])):
            return None
        path = os.fsdecode(fields[6])
        try:
            dirfd.parts(path)  # a name out of /app, or deeper than a copy takes: no listing
        except untar.Refused:
            return None
        entries[path] = b" ".join(fields[:6]).decode("ascii", "replace")
    return entries


def size(entries: Listing) -> int:
    """The bytes a copy of every file listed writes at most (apparent sizes: a sparse file in full)."""
    return sum(int(_field(line, 3)) for line in entries.values() if _kind(line) == "f")


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
    if limit and sum(int(_field(now[p], 3)) for p in files) > limit:
        raise Fallback("the changed files are larger than the workspace limit")
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
        hosttree.remove(staging.parent, staging.name)
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
        hosttree.remove_at(parent, name)  # by descriptor, never through a link, however deep
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
                    hosttree.remove_at(parent, parts[-1])  # a folder that became a file
            os.rename("new", parts[-1], src_dir_fd=staged.root, dst_dir_fd=parent)  # over a file: in one step
        finally:
            os.close(parent)
        return member.size
