"""Which folders changed, from the kernel (inotify), so the disk watchdog need not look at them all.

A watch on a folder reports a file made, removed, renamed, written or chmod-ed in it. Watches
count against a limit shared by every process of the host user (root here: the engines' own
daemons included), so a tree takes at most a sixteenth of it and never more than `CAP`; folders
past that, or any folder the kernel refuses, are simply not watched and the watchdog checks them
by their mtime as before. Nothing here is trusted for more than saying where to look.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from collections.abc import Container

CREATE, DELETE, MOVED_FROM, MOVED_TO = 0x100, 0x200, 0x40, 0x80
MODIFY, ATTRIB, CLOSE_WRITE = 0x2, 0x4, 0x8
OVERFLOW, IGNORED = 0x4000, 0x8000
ONLYDIR, DONT_FOLLOW, EXCL_UNLINK = 0x01000000, 0x02000000, 0x04000000
MASK = CREATE | DELETE | MOVED_FROM | MOVED_TO | MODIFY | ATTRIB | CLOSE_WRITE | ONLYDIR | DONT_FOLLOW | EXCL_UNLINK
NONBLOCK, CLOEXEC = 0o4000, 0o2000000
CAP = 4096
HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
NAMES = 4096  # entries named per folder between two measures; past that, the folder as a whole


def share() -> int:
    """The watches one tree may take: a sixteenth of the user's limit, at most CAP."""
    try:
        with open("/proc/sys/fs/inotify/max_user_watches") as f:
            return max(0, min(CAP, int(f.read()) // 16))
    except (OSError, ValueError):
        return 0


class Watches:
    """An inotify descriptor and the folders it watches, by path. `add` before scanning a folder,
    `changed` to learn which folders to scan again; `overflowed` means some changes were lost."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.by_wd: dict[int, str] = {}
        self.by_path: dict[str, int] = {}
        self.fd = -1
        if limit <= 0:
            return
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.inotify_init1(NONBLOCK | CLOEXEC)
        if fd >= 0:
            self.fd = fd

    @property
    def active(self) -> bool:
        return self.fd >= 0

    def add(self, path: str) -> bool:
        """Watch a folder (again: a folder renamed keeps its watch, now under its new path)."""
        if self.fd < 0 or (path not in self.by_path and len(self.by_wd) >= self.limit):
            return False
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), MASK)
        if wd < 0:
            self.by_path.pop(path, None)
            return False
        old = self.by_wd.get(wd)
        if old is not None and old != path:
            self.by_path.pop(old, None)
        stale = self.by_path.get(path)
        if stale is not None and stale != wd:
            self.by_wd.pop(stale, None)
        self.by_wd[wd], self.by_path[path] = path, wd
        return True

    def watched(self, path: str) -> bool:
        return path in self.by_path

    def keep_only(self, paths: Container[str]) -> None:
        """Drop the watches of folders no longer in the tree (moved out of it, or past a skip)."""
        for path in [p for p in self.by_path if p not in paths]:
            wd = self.by_path.pop(path)
            self.by_wd.pop(wd, None)
            self._libc.inotify_rm_watch(self.fd, wd)

    def changed(self) -> tuple[dict[str, set[str] | None], bool]:
        """The folders with changes since the last call, each with the names of the entries that changed
        in it (None: the folder itself, or more than NAMES), and whether the kernel dropped some."""
        dirty: dict[str, set[str] | None] = {}
        overflowed = False
        while self.fd >= 0:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            at = 0
            while at + HEADER.size <= len(data):
                wd, mask, _cookie, length = HEADER.unpack_from(data, at)
                name = data[at + HEADER.size : at + HEADER.size + length].rstrip(b"\0")
                at += HEADER.size + length
                if mask & OVERFLOW:
                    overflowed = True
                    continue
                path = self.by_wd.get(wd)
                if path is None:
                    continue
                if mask & IGNORED:  # the folder is gone (or its watch was dropped)
                    del self.by_wd[wd]
                    if self.by_path.get(path) == wd:
                        del self.by_path[path]
                names = dirty.setdefault(path, set())
                if names is not None and name and len(names) < NAMES:
                    names.add(os.fsdecode(name))
                else:
                    dirty[path] = None
        return dirty, overflowed

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
