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

import os
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

MAX_ENTRIES = 1_000_000  # empty files cost no bytes on disk: ~0.5 ms and (held) ~700 bytes each to unpack
MAX_DEPTH = 200  # folders in folders: deeper ones are refused (Python's recursion limit is 1000)
MAX_HOPS = 40  # links followed while checking where one leads (the kernel's own limit)
OUT = "links out of it, devices"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """One member is not unpacked; the reason is said in the summary."""


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


def _parts(name: str) -> list[str]:
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise Refused(OUT)
    if len(parts) > MAX_DEPTH:
        raise Refused("too deep")
    return parts


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

    def open_dir(self, parts: list[str] | tuple[str, ...], create: bool = False) -> int:
        """A new descriptor of the folder at `parts`, never through a link (Refused if one is in the way)."""
        fd = os.dup(self.root)
        try:
            for part in parts:
                try:
                    nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o700, dir_fd=fd)
                    nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
                    self._own(nxt)
                except OSError:
                    raise Refused(OUT) from None  # ELOOP (a link) or ENOTDIR (a file) in the way
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

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
        parts = _parts(name)
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
                while chunk := data.read(1 << 20):
                    os.write(fd, chunk)  # a regular file: whole writes
            os.fchmod(fd, mode | 0o600)
            self._own(fd)
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
        source = _parts(target)
        src = self.open_dir(source[:-1])
        try:
            if not stat.S_ISREG(os.lstat(source[-1], dir_fd=src).st_mode):
                raise Refused(OUT)
            parent = self._parent(parts)
            self._clear(parent, parts[-1])
            os.link(source[-1], parts[-1], src_dir_fd=src, dst_dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(src)

    # -- links that lead out -------------------------------------------------------------------
    def leads_inside(self, folder: list[str], target: str) -> bool:
        """Whether the link in `folder` to `target` ends inside the tree, followed through the tree
        itself (links in the way included, at most MAX_HOPS). Going above the top at any point, an
        absolute target, or too many links: out."""
        where: list[str] = list(folder)
        todo = target.split("/")[::-1]
        hops = 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not where:
                    return False
                where.pop()
                continue
            link = self._read_link(where, part)
            if link is None:
                where.append(part)  # a folder, a file or nothing: further parts are taken as written
                if len(where) > 2 * MAX_DEPTH:
                    return False
                continue
            hops += 1
            if hops > MAX_HOPS or link.startswith("/") or not link:
                return False
            todo.extend(link.split("/")[::-1])
        return True

    def _read_link(self, folder: list[str], name: str) -> str | None:
        try:
            fd = self.open_dir(folder)
        except (Refused, OSError):
            return None  # not a real folder: the kernel would not get further either
        try:
            if stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
                return os.readlink(name, dir_fd=fd)
            return None
        except OSError:
            return None
        finally:
            os.close(fd)

    def drop_links_out(self, pulled: Pulled) -> None:
        """Remove the links that lead out of the finished tree, until none does (a link removed can
        change where another one leads). Links can lead out only together (`a -> b/..`, `b -> .`);
        the mirror makes the workspace hold exactly this tree, so inside here is inside there."""
        links: list[tuple[list[str], str]] = []
        folders: list[list[str]] = [[]]
        while folders:  # no recursion, never into a link
            folder = folders.pop()
            fd = self.open_dir(folder)
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_symlink():
                            links.append((folder, entry.name))
                        elif entry.is_dir(follow_symlinks=False):
                            folders.append([*folder, entry.name])
            finally:
                os.close(fd)
        while links:
            out = [(f, n) for f, n in links if not self.leads_inside(f, self._read_link(f, n) or "/")]
            if not out:
                return
            for folder, name in out:  # after checking all: one removed first changes where others lead
                fd = self.open_dir(folder)
                try:
                    os.unlink(name, dir_fd=fd)
                finally:
                    os.close(fd)
                pulled.refuse("/".join([*folder, name]), OUT)
            links = [link for link in links if link not in out]


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
        tree.drop_links_out(pulled)
    finally:
        tree.close()
    return pulled
