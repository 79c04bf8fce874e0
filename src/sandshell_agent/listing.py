"""/app listed for the host's quick copy back, by the agent itself: PID 1, under its own filter,
limits and OOM score, so the host never runs a program from the container's filesystem (a `find`
the model replaced had run outside all of them, by the engine's exec).

One record per entry, as `find -printf '%y %m %n %s %C@ %i %P\\0'` wrote them: type, mode,
links, size, ctime, inode, path. Walked by descriptor (no path is longer than one name, nothing
is followed), one folder open per level; bounded in entries, depth, bytes and time: past a
bound the reply is an error and the host copies everything instead.
"""

from __future__ import annotations

import os
import stat
import time
from typing import Any

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_ENTRIES = 400_000
MAX_DEPTH = 200  # the host's copy takes no deeper folder (sandshell.sandbox.dirfd)
MAX_BYTES = 64 << 20
SECONDS = 10.0
PART = 4 << 20  # bytes of records a frame

KINDS = {
    stat.S_IFREG: b"f",
    stat.S_IFDIR: b"d",
    stat.S_IFLNK: b"l",
    stat.S_IFIFO: b"p",
    stat.S_IFSOCK: b"s",
    stat.S_IFBLK: b"b",
    stat.S_IFCHR: b"c",
}


class TooBig(Exception):
    """A bound was reached; the message says which."""


def record(st: os.stat_result, path: bytes) -> bytes:
    kind = KINDS.get(stat.S_IFMT(st.st_mode), b"U")
    ctime = f"{st.st_ctime_ns // 1_000_000_000}.{st.st_ctime_ns % 1_000_000_000:09d}"
    head = f"{stat.S_IMODE(st.st_mode):o} {st.st_nlink} {st.st_size} {ctime} {st.st_ino} "
    return kind + b" " + head.encode() + path + b"\0"


def walk(root: str, seconds: float = SECONDS) -> bytes:
    """Every entry under `root` (not `root` itself) as records; TooBig or OSError when it cannot."""
    deadline = time.monotonic() + seconds
    out = bytearray()
    count = 0
    top = os.open(root, DIR_FLAGS)
    try:
        stack: list[tuple[int, Any, bytes]] = [(top, os.scandir(top), b"")]  # (a folder, its entries, its path)
    except BaseException:
        os.close(top)
        raise
    try:
        while stack:
            fd, entries, prefix = stack[-1]
            entry = next(entries, None)
            if entry is None:
                entries.close()
                os.close(fd)
                stack.pop()
                continue
            count += 1
            if count > MAX_ENTRIES or len(out) > MAX_BYTES:
                raise TooBig(f"more than {MAX_ENTRIES} entries or {MAX_BYTES} bytes of names")
            if count % 1024 == 0 and time.monotonic() > deadline:
                raise TooBig(f"listing took more than {seconds:g} s")
            path = prefix + os.fsencode(entry.name)
            st = entry.stat(follow_symlinks=False)
            out += record(st, path)
            if stat.S_ISDIR(st.st_mode):
                if len(stack) >= MAX_DEPTH:
                    raise TooBig(f"folders more than {MAX_DEPTH} deep")
                child = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                try:
                    stack.append((child, os.scandir(child), path + b"/"))
                except BaseException:
                    os.close(child)
                    raise
    finally:
        for fd, entries, _ in stack:
            entries.close()
            os.close(fd)
    return bytes(out)
