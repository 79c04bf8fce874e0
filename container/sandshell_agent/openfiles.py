"""Disk no folder shows and inotify does not report, found through /proc.

- Files deleted while a process still holds them open (a descriptor) or mapped (no descriptor left):
  they take disk until the last one lets go. A file only mapped counts at the bytes mapped (an
  overcount of a sparse file, never an undercount: its disk cannot grow past what is mapped).
- Files written through shared mappings: no write(2), so no inotify event, and on fuse-overlayfs
  their blocks show only once the kernel writes the pages back (seconds later, or never while the
  writer keeps them dirty: 64 MB written, 35 MB seen, for as long as it ran). Each is flushed here
  (an fsync through a descriptor of our own writes back the pages of every mapping of it; on FUSE
  the close does too) and named, so the measure rescans its folder.

Only processes the agent may look into count (its own uid, dumpable); everything is bounded.
"""

from __future__ import annotations

import bisect
import os
import stat
from typing import NamedTuple

HELD_FDS = 50_000  # the most descriptors looked at in one look
MAP_LINES = 100_000  # the most mapping lines read in one look
FLUSHES = 64  # the most files written through mappings flushed in one look
DELETED = " (deleted)"


class Mapping(NamedTuple):
    dev: int
    ino: int
    end: int  # the file offset where the mapping ends
    path: str  # as the kernel shows it (" (deleted)" at the end once unlinked)
    shared_writable: bool


class Seen(NamedTuple):
    held: int  # bytes of files on the device deleted while open or mapped
    written: list[str]  # named files on the device mapped shared and writable, flushed just now
    stopped_at: int  # the first process a bound left out (the next look begins there), or 0


def mapping(line: str) -> Mapping | None:
    """One line of /proc/PID/maps, if it maps a file: `start-end perms offset maj:min inode   path`."""
    fields = line.rstrip("\n").split(maxsplit=5)
    if len(fields) < 6 or fields[4] == "0":
        return None
    try:
        start, end = (int(x, 16) for x in fields[0].split("-"))
        major, minor = (int(x, 16) for x in fields[3].split(":"))
        ino, offset = int(fields[4]), int(fields[2], 16)
    except ValueError:
        return None
    perms = fields[1]
    writable = len(perms) == 4 and perms[1] == "w" and perms[3] == "s"
    return Mapping(os.makedev(major, minor), ino, offset + end - start, fields[5], writable)


def look(dev: int, start: int = 0, fds: int = HELD_FDS, lines: int = MAP_LINES) -> Seen:
    """What the processes in this container hold on `dev`, beyond what its folders show, beginning
    with the first process from pid `start` on (where the last look's bounds ended it, so that
    processes with descriptors or mappings by the ten thousand cannot hide the others for good)."""
    held: dict[int, int] = {}  # inode -> bytes, deleted files held by a descriptor
    mapped: dict[int, int] = {}  # inode -> bytes mapped, deleted files held by a mapping
    written: dict[int, str] = {}  # inode -> path, named files mapped shared and writable
    fds_left, lines_left, stopped_at = fds, lines, 0
    pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    at = bisect.bisect_left(pids, start)
    for pid in pids[at:] + pids[:at]:
        if fds_left <= 0 or lines_left <= 0:
            stopped_at = pid
            break
        fds_left -= _descriptors(pid, dev, held, fds_left)
        lines_left -= _mappings(pid, dev, mapped, written, lines_left)
    flushed = [path for ino, path in list(written.items())[:FLUSHES] if _flush(path, dev, ino)]
    return Seen(sum(held.values()) + sum(n for ino, n in mapped.items() if ino not in held), flushed, stopped_at)


def _descriptors(pid: int, dev: int, held: dict[int, int], most: int) -> int:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")[:most]
    except OSError:
        return 0
    for fd in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")  # the open file itself, even when no name is left
        except OSError:
            continue
        if st.st_nlink == 0 and st.st_dev == dev and stat.S_ISREG(st.st_mode):
            held[st.st_ino] = st.st_blocks * 512
    return len(fds)


def _mappings(pid: int, dev: int, mapped: dict[int, int], written: dict[int, str], most: int) -> int:
    read = 0
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                read += 1
                if read > most:
                    break
                m = mapping(line)
                if m is None or m.dev != dev:
                    continue
                if m.path.endswith(DELETED):
                    mapped[m.ino] = max(mapped.get(m.ino, 0), m.end)
                elif m.shared_writable:
                    written[m.ino] = m.path
    except OSError:
        pass
    return read


def _flush(path: str, dev: int, ino: int) -> bool:
    """Write back the dirty pages of the file at `path`, if it is still that file (the model may have
    put a link, a FIFO or another file there: nothing is followed, opened blocking, or trusted)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if st.st_ino != ino or st.st_dev != dev or not stat.S_ISREG(st.st_mode):
            return False
        rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.fsync(rfd)
        finally:
            os.close(rfd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
