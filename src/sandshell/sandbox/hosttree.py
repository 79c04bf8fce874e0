"""Walking, packing and removing a workspace folder on the host, where the model may have left
anything: folders nested thousands deep (Python's recursive `tarfile.add` and `shutil.rmtree`
raised RecursionError at ~1,000, leaving a partial archive), sparse files of terabytes, links,
FIFOs, names with newlines.

Everything here is iterative and reached by directory descriptor (O_NOFOLLOW at every step, so no
path is longer than one name and no link is followed), and bounded: entries, depth and bytes, the
bytes counted at each file's apparent size (what a copy writes) before anything is written. A
bound reached is one sentence (TooBig); what was being written is removed.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # a FIFO never blocks
MAX_ENTRIES = 1_000_000
MAX_DEPTH = 4096


class TooBig(Exception):
    """A bound was reached; the message is one sentence saying which."""


@dataclass(frozen=True)
class Bounds:
    """What one walk may meet: entries, folder depth, bytes of files (apparent size; 0: no bound)."""

    entries: int = MAX_ENTRIES
    depth: int = MAX_DEPTH
    bytes: int = 0
    setting: str = "SANDSHELL_WORKSPACE_LIMIT"  # named when `bytes` is reached


@dataclass(frozen=True)
class Entry:
    path: str  # relative, "/"-joined
    name: str
    parent: int  # a descriptor of its folder, open while the walk stands at this entry
    st: os.stat_result


def walk(root: Path, bounds: Bounds = Bounds()) -> Iterator[Entry]:
    """Every entry under `root` (not `root`), a folder before what it holds, names sorted; never
    through a link. Raises TooBig when a bound is reached (the caller undoes what it made)."""
    count = size = 0
    top = os.open(root, DIR_FLAGS)
    try:
        stack: list[tuple[int, Iterator[str], str]] = [(top, iter(sorted(os.listdir(top))), "")]
    except BaseException:
        os.close(top)
        raise
    try:
        while stack:
            fd, names, prefix = stack[-1]
            name = next(names, None)
            if name is None:
                os.close(fd)
                stack.pop()
                continue
            try:
                st = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                continue  # removed while we walked
            count += 1
            if count > bounds.entries:
                raise TooBig(f"it holds more than {bounds.entries} entries")
            if stat.S_ISREG(st.st_mode):
                size += st.st_size
                if bounds.bytes and size > bounds.bytes:
                    raise TooBig(
                        f"its files hold more than {bounds.bytes} bytes (sparse files counted at their full size), "
                        f"the limit of {bounds.setting}"
                    )
            path = prefix + name
            yield Entry(path, name, fd, st)
            if stat.S_ISDIR(st.st_mode):
                if len(stack) >= bounds.depth:
                    raise TooBig(f"it holds folders more than {bounds.depth} deep")
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
                try:
                    stack.append((child, iter(sorted(os.listdir(child))), path + "/"))
                except BaseException:
                    os.close(child)
                    raise
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def pack(
    tar: tarfile.TarFile,
    root: Path,
    bounds: Bounds,
    prefix: str = "",
    change: Callable[[tarfile.TarInfo], tarfile.TarInfo] = lambda info: info,
) -> None:
    """Add what `root` holds to `tar` (names under `prefix`): files, folders, links as links, FIFOs as
    FIFOs (never opened), hard links as hard links; sockets and devices left out."""
    seen: dict[tuple[int, int], str] = {}
    for entry in walk(root, bounds):
        st, name = entry.st, prefix + entry.path
        info = tarfile.TarInfo(name)
        info.mode, info.uid, info.gid, info.mtime = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime)
        data: IO[bytes] | None = None
        if stat.S_ISREG(st.st_mode):
            if st.st_nlink > 1 and (first := seen.get((st.st_dev, st.st_ino))) is not None:
                info.type, info.linkname = tarfile.LNKTYPE, first
            else:
                seen[(st.st_dev, st.st_ino)] = name
                data = _open_file(entry)
                if data is None:
                    continue  # replaced by something else since it was listed
                info.size = st.st_size
        elif stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
        elif stat.S_ISLNK(st.st_mode):
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(entry.name, dir_fd=entry.parent)
        elif stat.S_ISFIFO(st.st_mode):
            info.type = tarfile.FIFOTYPE
        else:
            continue
        try:
            tar.addfile(change(info), _Exactly(data, info.size) if data is not None else None)
        finally:
            if data is not None:
                data.close()


def _open_file(entry: Entry) -> IO[bytes] | None:
    """The file itself, if it is still the regular file listed (a FIFO swapped in cannot block us)."""
    try:
        fd = os.open(entry.name, FILE_FLAGS, dir_fd=entry.parent)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_ino != entry.st.st_ino:
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return open(fd, "rb")  # (the caller closes it)


class _Exactly:
    """A file read as `size` bytes whatever it does meanwhile: cut if it grew, zeros if it shrank
    (tarfile raises on a short read and the archive would be cut mid-member)."""

    def __init__(self, data: IO[bytes], size: int) -> None:
        self.data, self.left = data, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        chunk = self.data.read(n)
        chunk += bytes(n - len(chunk))
        self.left -= n
        return chunk


def remove(parent: Path, name: str) -> None:
    """Remove `parent/name` and, if a folder, all it holds, however deep; never through a link."""
    top = os.open(parent, DIR_FLAGS)
    try:
        remove_at(top, name)
    finally:
        os.close(top)


def remove_at(top: int, name: str) -> None:
    """Remove `name` in the folder `top` (a descriptor) as `remove` does."""
    try:
        st = os.lstat(name, dir_fd=top)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=top)
        return
    stack: list[tuple[int, str, int, Iterator[str]]] = []  # (its folder, its name, it, its folders left)
    try:
        stack.append(_emptied(top, name))
        while stack:
            parent, done, fd, folders = stack[-1]
            sub = next(folders, None)
            if sub is not None:
                stack.append(_emptied(fd, sub))
                continue
            stack.pop()
            os.close(fd)
            os.rmdir(done, dir_fd=parent)
    finally:
        for _, _, fd, _ in stack:
            os.close(fd)


def _emptied(parent: int, name: str) -> tuple[int, str, int, Iterator[str]]:
    """Open the folder `name` and unlink everything in it but folders: (parent, name, it, its folders)."""
    fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    try:
        folders = []
        for child in os.listdir(fd):
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISDIR(os.lstat(child, dir_fd=fd).st_mode):
                    folders.append(child)
                else:
                    os.unlink(child, dir_fd=fd)
    except BaseException:
        os.close(fd)
        raise
    return parent, name, fd, iter(folders)
