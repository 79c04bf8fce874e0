"""Disk no folder shows and inotify does not report, found through /proc.

- Files deleted while a process still holds them open (a descriptor) or mapped (no descriptor left):
  they take disk until the last one lets go. A file only mapped counts at the bytes mapped, at most
  the area's limit (its blocks cannot be read: an overcount of a sparse file, and an undercount of
  one written further before it was mapped by a small window and deleted).
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
MAP_BYTES = 8 << 20  # the most text of /proc/PID/maps read in one look
FLUSHES = 64  # the most files written through mappings flushed in one look (the next look goes on)
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
    stopped_at: int  # the first process a bound left out (the next look begins there), or 0 (`look` only)
    flush_from: int  # the first inode the flushes' bound left out, or 0


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


def look(dev: int, start: int = 0, flush_from: int = 0, cap: int = 0, fds: int = HELD_FDS) -> Seen:
    """`look_all` for one device."""
    seen, stopped_at = look_all({dev: (flush_from, cap)}, start, fds)
    return seen[dev]._replace(stopped_at=stopped_at)


def look_all(devs: dict[int, tuple[int, int]], start: int = 0, fds: int = HELD_FDS) -> tuple[dict[int, Seen], int]:
    """What the processes in this container hold on each device in `devs`, beyond what its folders
    show, in one walk through /proc, beginning with the first process from pid `start` on (where the
    last look's bounds ended it, so that processes with descriptors or mappings by the ten thousand
    cannot hide the others for good), and the first process the bounds left out (or 0). `devs`: a
    device's (inode the flushes begin with, the most a file only mapped counts)."""
    held: dict[int, dict[int, int]] = {dev: {} for dev in devs}  # inode -> bytes, deleted files held by a descriptor
    mapped: dict[int, dict[int, int]] = {dev: {} for dev in devs}  # inode -> bytes mapped, deleted, held by a mapping
    written: dict[int, dict[int, str]] = {dev: {} for dev in devs}  # inode -> path, named, mapped shared and writable
    fds_left, text_left, stopped_at = fds, MAP_BYTES, 0
    pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    at = bisect.bisect_left(pids, start)
    for pid in pids[at:] + pids[:at]:
        if fds_left <= 0 or text_left <= 0:
            stopped_at = pid
            break
        try:
            base, names = entry(pid)
        except PermissionError:  # (not ours to look into: see the module's docstring)
            base, names = f"/proc/{pid}", []
        fds_left -= _descriptors(base, names[:fds_left], held)
        text_left -= _mappings(base, mapped, written, text_left)
    return {dev: _seen(dev, held[dev], mapped[dev], written[dev], *devs[dev]) for dev in devs}, stopped_at


def _seen(
    dev: int, held: dict[int, int], mapped: dict[int, int], written: dict[int, str], flush_from: int, cap: int
) -> Seen:
    """One device's share of a look: the flushes' turn taken from inode `flush_from` on."""
    inodes = sorted(written)
    first = bisect.bisect_left(inodes, flush_from)
    turn = (inodes[first:] + inodes[:first])[:FLUSHES]
    flushed = []
    for ino in turn:
        real = _flush(written[ino], dev, ino)
        if real is not None:
            flushed.append(real)
    later = inodes[(first + FLUSHES) % len(inodes)] if len(inodes) > FLUSHES else 0
    only_mapped = sum(min(n, cap) if cap else n for ino, n in mapped.items() if ino not in held)
    return Seen(sum(held.values()) + only_mapped, flushed, 0, later)


def entry(pid: int) -> tuple[str, list[str]]:
    """Where /proc shows a process's descriptors and mappings, and its descriptors: its own entry, or,
    once its main thread has ended (a zombie leader whose other threads write on: its own entry then
    shows none), another thread's. PermissionError when the agent may not list them."""
    base = f"/proc/{pid}"
    try:
        names = os.listdir(f"{base}/fd")
        if names:
            return base, names
        for tid in os.listdir(f"{base}/task"):
            if tid != str(pid):
                return f"{base}/task/{tid}", os.listdir(f"{base}/task/{tid}/fd")
    except PermissionError:
        raise
    except OSError:  # (gone meanwhile)
        pass
    return base, []


def _descriptors(base: str, names: list[str], held: dict[int, dict[int, int]]) -> int:
    for fd in names:
        try:
            st = os.stat(f"{base}/fd/{fd}")  # the open file itself, even when no name is left
        except OSError:
            continue
        if st.st_nlink == 0 and st.st_dev in held and stat.S_ISREG(st.st_mode):
            held[st.st_dev][st.st_ino] = st.st_blocks * 512
    return len(names)


def _mappings(base: str, mapped: dict[int, dict[int, int]], written: dict[int, dict[int, str]], most: int) -> int:
    """Read a process's mappings, at most `most` characters of them (a path may be 4,096 long, and a
    process may have 65,530 mappings); returns how many were read."""
    read = 0
    try:
        with open(f"{base}/maps", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                read += len(line)
                if read > most:
                    break
                m = mapping(line)
                if m is None or m.dev not in mapped:
                    continue
                if m.path.endswith(DELETED):
                    mapped[m.dev][m.ino] = max(mapped[m.dev].get(m.ino, 0), m.end)
                elif m.shared_writable:
                    written[m.dev][m.ino] = m.path
    except OSError:
        pass
    return read


def _flush(path: str, dev: int, ino: int) -> str | None:
    """Write back the dirty pages of the file at `path`, if it is still that file (the model may have
    put a link, a FIFO or another file there: nothing is followed, opened blocking, or trusted); the
    path it was found at, or None. Maps shows a newline in a name as \\012: the measure must be told
    the real path, or the file's folder is never measured again before a full measure."""
    if "\\012" in path:
        real = _flush(path.replace("\\012", "\n"), dev, ino)
        if real is not None:
            return real
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_ino != ino or st.st_dev != dev or not stat.S_ISREG(st.st_mode):
            return None
        rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.fsync(rfd)
        finally:
            os.close(rfd)
        return path
    except OSError:
        return None
    finally:
        os.close(fd)
