"""What one file or folder counts to the disk watchdog (`disktree.py`), a folder as its last measure
found it, and what the watchdog does to one: takes set-id bits off, gives a folder it may not read
back to its owner's reading."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import NamedTuple

SETID = stat.S_ISUID | stat.S_ISGID
# Every file, folder and link counts at least one block: an empty file takes no block but an inode,
# and 300,000 of them counted 4.5 MB (15 bytes each) while the host's free inodes, which the engine
# needs too, fell by as many. So a limit bounds the files too: 4 GiB, a million.
FLOOR = 4096


Linked = dict[int, tuple[str, int]]  # inode -> (a path, bytes when scanned) of a file of many links
Scan = tuple[int, list[tuple[str, int]], Linked]  # what `Tree._scan` finds in one folder


class Folder(NamedTuple):
    """A folder as the last measure found it."""

    mtime_ns: int
    ino: int
    bytes: int  # its own blocks and its files', those with one link only
    subfolders: list[tuple[str, int]]  # (path, inode)
    linked: Linked  # its files of many links


def bytes_of(st: os.stat_result) -> int:
    """Its blocks, or its apparent size if larger: a sparse file (`truncate -s 1G`) takes one block
    here but its whole size in every copy, pack or archive of the workspace (2 TB of apparent size
    had counted 8 MB)."""
    return max(st.st_blocks * 512, st.st_size, FLOOR)


def let_in(path: str, dir_fd: int | None = None) -> bool:
    """Give a folder that the agent (without CAP_DAC_READ_SEARCH: the locked profile, where it runs as
    the model's own uid) may not list or search its owner's read and search bits back, if the agent is
    that owner: files the model wrote under a `chmod 0300` folder counted nothing, 300 MB past a 50 MB
    limit. Through the folder itself, never a link put in its place. Whether it changed anything."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid != os.geteuid() or mode & 0o500 == 0o500:
            return False
        os.chmod(f"/proc/self/fd/{fd}", (mode | 0o500) & ~SETID)  # (the guard refuses set-id bits in /app)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def strip_setid(path: str, dir_fd: int | None = None) -> None:
    """A set-uid or set-gid file left in the workspace would keep its bits on the host: take them off,
    through the file itself (an O_PATH descriptor: never a link put in its place, and a file its owner
    made unreadable, `chmod 4311`, still loses them)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_mode & SETID:
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) & ~SETID)
    except OSError:
        pass
    finally:
        os.close(fd)


def blocks(path: str) -> int:
    try:
        return bytes_of(os.lstat(path))
    except OSError:
        return 0


def inodes(root: str, skip: tuple[str, ...] = ()) -> dict[int, tuple[int, int]]:
    """Every file and folder under `root` on its filesystem: inode -> (bytes, ctime) (a Tree's `image`)."""
    dev, stack = os.lstat(root).st_dev, [root]
    out: dict[int, tuple[int, int]] = {}
    while stack:
        path = stack.pop()
        try:
            st = os.lstat(path)
            entries = os.scandir(path)
        except OSError:
            continue
        out[st.st_ino] = (bytes_of(st), st.st_ctime_ns)
        with entries:
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_dev != dev:
                    continue
                if e.is_dir(follow_symlinks=False):
                    if e.path not in skip:
                        stack.append(e.path)
                else:
                    out[st.st_ino] = (bytes_of(st), st.st_ctime_ns)
    return out


DEEP_PATH = 3072  # bytes: a folder's path from here on may leave its entries' past PATH_MAX (4096)
DEEP_LEVELS = 65_536  # folders below it, at the most, that `deep_bytes` follows
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def deep_bytes(
    folder: str, name: str, dev: int, grown: Callable[[os.stat_result], int], strip: bool, cap: int = 0
) -> int:
    """Bytes under `folder/name`, a folder whose path is too long to name what is under it (lstat and
    scandir of a path past PATH_MAX fail, and six 40 MB files 17 folders of 250 characters deep
    would count nothing against a 50 MiB limit). Walked through one descriptor at
    a time, down by name and back up by "..", so no depth runs out of descriptors; every file counts
    (those of many links too: more, never less), and set-id bits are taken off; a folder the agent
    may not read is let in as the path walk lets it in (`let_in`).

    The model may move folders while it runs. A folder moved away ends the walk with what was counted
    (the next measure walks again). A folder already on the way down is not entered again: a chain
    hung back under its own bottom as the walk goes would keep it walking for as long as that goes
    on (13 s, 780,000 levels, the agent's memory at 217 MB, while 360 MB went in unseen). So
    the walk goes only through folders it has not passed, each of which counts a block: it ends once
    it has counted more than `cap` (the limit: over it, how much more does not matter), or past
    DEEP_LEVELS levels, which count as `cap` and one more."""
    try:
        fd = os.open(folder, _DIR)
    except OSError:
        return 0
    top = _id(os.fstat(fd))
    total, ids, todo, on_path = 0, [top], [[name]], {top}  # ids: the folders from `folder` down to here
    try:
        while todo:
            if cap and total > cap:
                break
            if not todo[-1]:  # this folder is done: back up to its parent, if it is still where it was
                todo.pop()
                if not todo:
                    break
                up = os.open("..", _DIR, dir_fd=fd)
                os.close(fd)
                fd = up
                on_path.discard(ids.pop())
                if _id(os.fstat(fd)) != ids[-1]:
                    break
                continue
            if len(ids) > DEEP_LEVELS:
                return max(total, cap + 1)
            child = todo[-1].pop()
            try:
                sub = os.open(child, _DIR, dir_fd=fd)
            except PermissionError:
                if not let_in(child, dir_fd=fd):
                    continue
                try:
                    sub = os.open(child, _DIR, dir_fd=fd)
                except OSError:
                    continue
            except OSError:
                continue
            st = os.fstat(sub)
            if st.st_dev != dev or _id(st) in on_path:
                os.close(sub)
                continue
            os.close(fd)
            fd, total = sub, total + grown(st)
            ids.append(_id(st))
            on_path.add(ids[-1])
            subfolders: list[str] = []
            with os.scandir(fd) as entries:
                for e in entries:
                    try:
                        est = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(est.st_mode):
                        subfolders.append(e.name)
                        continue
                    total += grown(est) if est.st_dev == dev else 0
                    if strip and stat.S_ISREG(est.st_mode) and est.st_mode & SETID:
                        strip_setid(e.name, dir_fd=fd)
            todo.append(subfolders)
    except OSError:
        pass  # (what was counted so far counts)
    finally:
        os.close(fd)
    return total


def _id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino
