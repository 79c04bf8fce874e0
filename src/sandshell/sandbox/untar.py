"""Unpacking the container's /app without trusting tarfile's extraction or its filters.

tarfile only reads the headers here. Each member is written by this module relative to open
directory descriptors (openat-style: O_NOFOLLOW on every component, O_CREAT|O_EXCL for files),
so no path component is ever followed through a link, whatever realpath would say: the 2025
tarfile filter bypasses (CVE-2025-4517, -4330, -4138, 2024-12718: a chain of links that pushes
realpath past PATH_MAX, then a file or a hard link through it) do not apply, and the host's
Python need not carry their fixes. Kept: regular files, folders, hard links to a file unpacked
before, and symbolic links that stay inside once the whole tree is there (each checked by
following the tree itself, at most 40 links deep, never by realpath). Refused: everything else.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sandshell.sandbox import dirfd
from sandshell.sandbox.dirfd import DIR_FLAGS, OUT, Refused, open_dir
from sandshell.sandbox.links import Links

__all__ = ["DIR_FLAGS", "MAX_ENTRIES", "Pulled", "Refused", "TooMany", "Tree", "one_line", "unpack"]

MAX_ENTRIES = 1_000_000  # empty files cost no bytes on disk: ~0.5 ms and (held) ~700 bytes each to unpack


class TooMany(Exception):
    """More than MAX_ENTRIES members."""


@dataclass
class Pulled:
    """What one copy back brought: files and bytes, and entries refused."""

    files: int = 0
    size: int = 0
    refused: list[str] = field(default_factory=list)  # the first few, each on one line
    refused_count: int = 0
    why: set[str] = field(default_factory=set)

    def refuse(self, name: str, why: str) -> None:
        self.refused_count += 1
        self.why.add(why)
        if len(self.refused) < 5:
            self.refused.append(one_line(name[:200]))


def one_line(text: str) -> str:
    """Control characters and undecodable bytes (surrogates) written as escapes: a name cannot fake a log line."""
    return text.encode("unicode_escape", "backslashreplace").decode("ascii")


class Tree:
    """A folder written only through descriptors; `owner` (uid, gid) is given to what is made."""

    def __init__(self, root: Path, owner: tuple[int, int] | None = None) -> None:
        self.root = os.open(root, DIR_FLAGS)
        self.owner = owner
        self.files: set[str] = set()  # regular files written: the only things a hard link may name
        self._cached: tuple[tuple[str, ...], int] | None = None

    def close(self) -> None:
        if self._cached is not None:
            os.close(self._cached[1])
            self._cached = None
        os.close(self.root)

    def open_dir(self, names: list[str] | tuple[str, ...], create: bool = False) -> int:
        """A new descriptor of the folder at `names`, never through a link (dirfd.open_dir)."""
        return open_dir(self.root, names, create, self.owner)

    def _parent(self, parts: list[str]) -> int:
        """The (cached) descriptor of the folder holding `parts[-1]`, made if missing."""
        key = tuple(parts[:-1])
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        fd = self.open_dir(key, create=True)
        if self._cached is not None:
            os.close(self._cached[1])
        self._cached = (key, fd)
        return fd

    def _own(self, fd: int) -> None:
        if self.owner is not None:
            os.fchown(fd, *self.owner)

    def _clear(self, parent: int, name: str, for_dir: bool = False) -> bool:
        """Make room for `name`; True when a folder is already there (kept for a folder, else Refused)."""
        try:
            st = os.lstat(name, dir_fd=parent)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            if for_dir:
                return True
            raise Refused("a folder in the way")
        os.unlink(name, dir_fd=parent)  # a file or a link given twice: the last one wins, as in tar
        return False

    def add(self, member: tarfile.TarInfo, data: IO[bytes] | None, name: str) -> None:
        """Write one member named `name` (relative); Refused when it may not be."""
        parts = dirfd.parts(name)
        if member.isreg():
            self._file(parts, member, data)
        elif member.isdir():
            self._dir(parts, member)
        elif member.issym():
            if not member.linkname or member.linkname.startswith("/"):
                raise Refused(OUT)
            parent = self._parent(parts)
            self._clear(parent, parts[-1])
            os.symlink(member.linkname, parts[-1], dir_fd=parent)
            if self.owner is not None:
                os.chown(parts[-1], *self.owner, dir_fd=parent, follow_symlinks=False)
        elif member.islnk():
            self._hard_link(parts, member.linkname.partition("/")[2])
        else:
            raise Refused(OUT)  # FIFOs, devices

    def _file(self, parts: list[str], member: tarfile.TarInfo, data: IO[bytes] | None) -> None:
        mode = member.mode & 0o755  # no set-id bits, nobody else may write (as tarfile's data filter)
        if not mode & 0o100:
            mode &= ~0o111
        parent = self._parent(parts)
        self._clear(parent, parts[-1])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, 0o600, dir_fd=parent)
        try:
            if data is not None:
                copy_sparse(data, fd)
            os.fchmod(fd, mode | 0o600)
            self._own(fd)
            with contextlib.suppress(OSError, OverflowError, ValueError):  # a time out of range: now
                os.utime(fd, (member.mtime, member.mtime))
        finally:
            os.close(fd)
        self.files.add("/".join(parts))

    def _dir(self, parts: list[str], member: tarfile.TarInfo) -> None:
        parent = self._parent(parts)
        if not self._clear(parent, parts[-1], for_dir=True):
            os.mkdir(parts[-1], 0o700, dir_fd=parent)
        fd = os.open(parts[-1], DIR_FLAGS, dir_fd=parent)
        try:
            os.fchmod(fd, (member.mode & 0o755) | 0o700)  # we must be able to fill and empty it
            self._own(fd)
        finally:
            os.close(fd)

    def _hard_link(self, parts: list[str], target: str) -> None:
        """A second name for a file unpacked before (tarfile would look the first name up among the
        members, not find a refused one under its stripped name and raise KeyError)."""
        if target not in self.files:
            raise Refused(OUT)
        source = dirfd.parts(target)
        src = self.open_dir(source[:-1])
        try:
            if not stat.S_ISREG(os.lstat(source[-1], dir_fd=src).st_mode):
                raise Refused(OUT)
            parent = self._parent(parts)
            self._clear(parent, parts[-1])
            os.link(source[-1], parts[-1], src_dir_fd=src, dst_dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(src)


def copy_sparse(data: IO[bytes], fd: int, block: int = 1 << 16) -> int:
    """Copy `data` into the file `fd`, leaving a hole for every block of zeros: a sparse file the
    model left (`truncate -s 1G`) takes on the host the blocks it took in the container. Its size."""
    size = 0
    with open(fd, "wb", closefd=False) as out:  # buffered: a short write is retried
        while chunk := data.read(block):
            if chunk.count(0) == len(chunk):
                out.seek(len(chunk), os.SEEK_CUR)
            else:
                out.write(chunk)
            size += len(chunk)
        out.truncate(size)
    return size


def unpack(tar_file: IO[bytes], staging: Path, owner: tuple[int, int] | None = None) -> Pulled:
    """Unpack the archive of /app (entries app/...) into `staging`, one member at a time."""
    pulled = Pulled()
    tree = Tree(staging, owner)
    try:
        with tarfile.open(fileobj=tar_file, mode="r:") as tar:
            count = 0
            while (member := tar.next()) is not None:
                count += 1
                if count > MAX_ENTRIES:
                    raise TooMany
                name = member.name.partition("/")[2]  # the archive's entries are app/...
                if name:
                    try:
                        tree.add(member, tar.extractfile(member) if member.isreg() else None, name)
                        if member.isreg():
                            pulled.files += 1
                            pulled.size += member.size
                    except Refused as e:
                        pulled.refuse(name, str(e))
                tar.members.clear()  # type: ignore[attr-defined]  # else every member read is kept (~700 bytes)
        Links(tree.root).drop_out(pulled.refuse)
    finally:
        tree.close()
    return pulled
