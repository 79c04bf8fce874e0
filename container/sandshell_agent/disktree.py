"""Bytes on disk under a folder, measured again cheaply: what changed, from inotify, and what /proc
shows (`openfiles.py`: files deleted while still open, files written through mappings); the disk
watchdog's measure, which `diskguard.py` runs."""

from __future__ import annotations

import os
import stat
import threading
import time

from . import inotify, openfiles

SETID = stat.S_ISUID | stat.S_ISGID
# A folder whose scan takes longer than SLOW_SCAN is scanned again by a quick measure only after ten
# times that (a folder of 300,000 files kept changing made every measure take a second, so the next
# came ten seconds later, and a writer elsewhere took 4.7 GB meanwhile); in between, up to NAMED of
# the files inotify names in it are looked at one by one.
SLOW_SCAN = 0.005
NAMED = 10_000


class Tree:
    """Bytes on disk under `root`, on its own filesystem (links not followed, hard links once).

    A quick measure rescans only the folders that changed and reuses the rest: the folders inotify
    says changed (a file made, removed, renamed, written or chmod-ed in them; a watched folder
    costs nothing otherwise), and of the folders it does not watch, those whose mtime changed. A
    full measure stats every file, so a change inotify does not report (a write through `mmap`) is
    seen too. Folders in `skip` are left out; a folder's own blocks count (60,000 empty folders
    took 248 MB of the host's disk unseen).
    """

    def __init__(
        self,
        root: str,
        skip: tuple[str, ...] = (),
        strip_setid: bool = False,
        watch: bool = True,
        extra: tuple[str, ...] = (),
        held: bool = False,
    ) -> None:
        """`extra`: files counted wherever they are; `held`: look through /proc at the files on the root's
        filesystem held open or mapped (for the container's PID 1, which sees every process in it)."""
        self.root, self.skip, self.strip_setid, self.extra = root, skip, strip_setid, extra
        self.count_held = held
        self.held = 0  # bytes of files deleted while open or mapped, as of the last look
        self.look_from = self.flush_from = 0  # where the last look through /proc stopped at its bounds
        self.mapped_cap = 0  # the most one file only a mapping holds counts (0: no cap)
        self.written_lock = threading.Lock()
        self.written: dict[str, set[str]] = {}  # folder -> files written through mappings, since the last measure
        # path -> (mtime_ns, inode, bytes, subfolders)
        self.folders: dict[str, tuple[int, int, int, list[tuple[str, int]]]] = {}
        self.total = 0
        self.watches = inotify.Watches(inotify.share() if watch else 0)
        self.complete = False  # every folder watched, nothing lost since the last measure
        self.slow: dict[str, tuple[float, float]] = {}  # folder -> (when it was last scanned, how long it took)
        self.deferred: dict[str, dict[str, int]] = {}  # a slow folder not scanned again yet -> named files' bytes

    def measure(self, full: bool = True) -> int:
        """The tree's bytes, with files deleted while still open or mapped (as of the last look, which
        the watchdog makes in a thread of its own) and the `extra` files, wherever they are."""
        return self._measure_tree(full) + self.held + sum(_blocks(path) for path in self.extra)

    def look(self) -> None:
        """Look through /proc for what no folder shows (`openfiles.py`); the folders of files written
        through mappings are measured again by the next measure, quick or full."""
        if not self.count_held:
            return
        try:
            dev = os.lstat(self.root).st_dev
        except OSError:
            return
        seen = openfiles.look(dev, self.look_from, self.flush_from, self.mapped_cap)
        self.held, self.look_from, self.flush_from = seen.held, seen.stopped_at, seen.flush_from
        with self.written_lock:  # (the measure takes them from another thread)
            for path in seen.written:
                folder, name = os.path.split(path)
                self.written.setdefault(folder, set()).add(name)

    def _measure_tree(self, full: bool) -> int:
        dirty, lost = self.watches.changed()
        with self.written_lock:
            taken, self.written = self.written, {}
        for folder, written in taken.items():
            named = dirty.setdefault(folder, set())
            if named is not None:
                named |= written
        for path in self.deferred:  # slow folders whose scan is still owed
            dirty.setdefault(path, set())
        if not full and self.complete and not dirty and not lost:
            return self.total
        full = full or lost
        try:
            root = os.lstat(self.root)
        except OSError:
            self.folders, self.total = {}, 0
            return 0
        total, stack = 0, [(self.root, root.st_ino)]
        seen: set[int] = set()
        known: dict[str, tuple[int, int, int, list[tuple[str, int]]]] = {}
        every = True
        while stack:
            path, ino = stack.pop()
            cached = self.folders.get(path)
            watched = self.watches.watched(path)
            if cached is not None and cached[1] == ino and not full:
                try:
                    changed = path in dirty or (not watched and os.lstat(path).st_mtime_ns != cached[0])
                except OSError:
                    continue
                if not changed:
                    entry, excess = cached, 0
                elif (names := dirty.get(path) if watched else None) is not None and self._defer(path):
                    entry, excess = self._named(path, names, cached, root.st_dev)  # (None: nothing or too much named)
                else:
                    entry = None
            else:
                entry = None
            if entry is None:
                watched = self.watches.add(path)  # before the scan: a change during it is not lost
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                began = time.monotonic()
                size, subfolders = self._scan(path, root.st_dev, seen)
                self._scanned(path, time.monotonic() - began)
                entry, excess = (st.st_mtime_ns, st.st_ino, size + st.st_blocks * 512, subfolders), 0  # with its own
            every = every and watched
            known[path] = entry
            total += entry[2] + excess
            stack.extend(entry[3])
        self.folders, self.total = known, total
        self.deferred = {path: counted for path, counted in self.deferred.items() if path in known}
        self.complete = every and self.watches.active
        if full and self.watches.active:
            self.watches.keep_only(known)
        return total

    def _scanned(self, path: str, took: float) -> None:
        self.deferred.pop(path, None)
        if took > SLOW_SCAN:
            self.slow[path] = (time.monotonic(), took)
        else:
            self.slow.pop(path, None)

    def _defer(self, path: str) -> bool:
        """Put off a slow folder's scan if it was scanned too recently (it is then owed: `deferred`)."""
        slow = self.slow.get(path)
        if slow is None or time.monotonic() - slow[0] >= 10 * slow[1]:
            return False
        self.deferred.setdefault(path, {})
        return True

    def _named(
        self, path: str, names: set[str] | None, cached: tuple[int, int, int, list[tuple[str, int]]], dev: int
    ) -> tuple[tuple[int, int, int, list[tuple[str, int]]], int]:
        """A slow folder not scanned this time: its last scan, with the entries inotify named in it since
        looked at one by one (a new folder is walked, a file's bytes counted on top until the next
        scan: an overcount, never an undercount, of a file that already was there)."""
        counted = self.deferred[path]
        subfolders = list(cached[3])
        have = {sub for sub, _ in subfolders}
        for name in names or ():
            child = os.path.join(path, name)
            try:
                st = os.lstat(child)
            except OSError:
                counted.pop(name, None)
                continue
            if st.st_dev != dev:
                continue
            if stat.S_ISDIR(st.st_mode):
                if child not in have and child not in self.skip:
                    subfolders.append((child, st.st_ino))
            elif len(counted) < NAMED or name in counted:
                counted[name] = st.st_blocks * 512
                if self.strip_setid and st.st_mode & SETID:
                    _strip_setid(child)
        return (cached[0], cached[1], cached[2], subfolders), sum(counted.values())

    def _scan(self, path: str, dev: int, seen: set[int]) -> tuple[int, list[tuple[str, int]]]:
        size, subfolders = 0, []
        try:
            entries = os.scandir(path)
        except OSError:
            return 0, []
        with entries:
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_dev != dev:
                    continue
                if e.is_dir(follow_symlinks=False):
                    if e.path not in self.skip:
                        subfolders.append((e.path, st.st_ino))
                elif st.st_nlink > 1 and st.st_ino in seen:
                    continue
                else:
                    if st.st_nlink > 1:
                        seen.add(st.st_ino)
                    size += st.st_blocks * 512
                    if self.strip_setid and st.st_mode & SETID:
                        _strip_setid(e.path)
        return size, subfolders


def _strip_setid(path: str) -> None:
    """A set-uid or set-gid file left in the workspace would keep its bits on the host: take them off,
    through the file itself (an O_PATH descriptor: never a link put in its place, and a file its owner
    made unreadable, `chmod 4311`, still loses them)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
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


def _blocks(path: str) -> int:
    try:
        return os.lstat(path).st_blocks * 512
    except OSError:
        return 0


def usage(root: str, skip: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> int:
    return Tree(root, skip, watch=False, extra=extra).measure()
