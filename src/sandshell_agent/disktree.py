"""Bytes on disk under a folder, measured again cheaply: what changed, from inotify, and what /proc
shows (`openfiles.py`: files deleted while still open, files written through mappings); the disk
watchdog's measure, which `diskguard.py` runs."""

from __future__ import annotations

import os
import stat
import threading
import time

from . import inotify, openfiles
from .diskentry import DEEP_PATH, SETID, Folder, Linked, Scan, blocks, bytes_of, deep_bytes, let_in, strip_setid

# A folder whose scan takes longer than SLOW_SCAN is scanned again by a quick measure only after ten
# times that (a folder of 300,000 files kept changing would make every measure take a second, the
# next come ten seconds later, and a writer elsewhere take 4.7 GB meanwhile); in between, up to NAMED of
# the files inotify names in it are looked at one by one.
SLOW_SCAN = 0.005
NAMED = 10_000
LINKS_EACH = 2_000  # files of many links looked up again by one measure, in turn (the rest: as last seen)


class Tree:
    """Bytes on disk under `root`, on its own filesystem (links not followed, hard links once).

    A quick measure rescans only the folders that changed and reuses the rest: the folders inotify
    says changed (a file made, removed, renamed, written or chmod-ed in them; a watched folder
    costs nothing otherwise), and of the folders it does not watch, those whose mtime changed. A
    full measure stats every file, so a change inotify does not report (a write through `mmap`) is
    seen too. Folders in `skip` are left out; a folder's own blocks count (60,000 empty folders
    take 248 MB of the host's disk).
    """

    def __init__(
        self,
        root: str,
        skip: tuple[str, ...] = (),
        strip_setid: bool = False,
        watch: bool = True,
        extra: tuple[str, ...] = (),
        held: bool = False,
        image: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        """`extra`: files counted wherever they are; `held`: look through /proc at the files on the root's
        filesystem held open or mapped (for the container's PID 1, which sees every process in it);
        `image`: the files there before (inode -> bytes, ctime; `inodes`), which count nothing until they
        change, then in full (a change copies the file up, out of the image's layer): deleting one
        frees nothing on the host, and 114 MB of the image deleted let 115 MB be written past a 50 MB
        limit."""
        self.root, self.skip, self.strip_setid, self.extra = root, skip, strip_setid, extra
        self.image = image or {}
        self.count_held = held
        self.held = 0  # bytes of files deleted while open or mapped, as of the last look
        self.flush_from = 0  # the first file written through a mapping the last look's flushes left out
        self.written_lock = threading.Lock()
        self.written: dict[str, set[str]] = {}  # folder -> files written through mappings, since the last measure
        self.folders: dict[str, Folder] = {}
        self.total = 0  # the last measure's, but for the files of many links, which are looked at each time
        self.links: dict[int, list[tuple[str, int]]] = {}  # inode -> (a path, bytes) of each as scanned
        self.link_order: list[int] = []  # the same inodes, in the order their lookups take turns
        self.link_bytes: dict[int, int] = {}  # inode -> bytes, as last scanned or looked up
        self.links_sum = 0  # of link_bytes
        self.links_from = 0  # where the next measure's turn of lookups begins
        self.watches = inotify.Watches(inotify.share() if watch else 0)
        self.complete = False  # every folder watched, nothing lost since the last measure
        self.slow: dict[str, tuple[float, float]] = {}  # folder -> (when it was last scanned, how long it took)
        self.deferred: dict[str, dict[str, int]] = {}  # a slow folder not scanned again yet -> named files' bytes
        self.deep: set[str] = set()  # folders holding one whose path is too long to walk by path (`deep_bytes`)
        self.cap = 0  # bytes past which a deep walk may stop counting (the area's limit; 0: none)

    def measure(self, full: bool = True) -> int:
        """The tree's bytes, with files deleted while still open or mapped (as of the last look, which
        the watchdog makes in a thread of its own) and the `extra` files, wherever they are."""
        return self._measure_tree(full) + self.held + sum(blocks(path) for path in self.extra)

    def device(self) -> int | None:
        """The device a look through /proc is made for (`openfiles.look_all`, for every tree at once),
        or None: this tree does not count what processes hold, or its root is gone."""
        if not self.count_held:
            return None
        try:
            return os.lstat(self.root).st_dev
        except OSError:
            return None

    def seen(self, seen: openfiles.Seen) -> None:
        """What a look through /proc found on this tree's device; the folders of files written through
        mappings are measured again by the next measure, quick or full."""
        self.held, self.flush_from = seen.held, seen.flush_from
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
        for path in (*self.deferred, *self.deep):  # slow folders whose scan is still owed; folders too deep to watch
            dirty.setdefault(path, set())
        if not full and self.complete and not dirty and not lost:
            return self.total + self._links_now()
        full = full or lost
        try:
            root = os.lstat(self.root)
        except OSError:
            self.folders, self.total = {}, 0
            self._new_links({}, {})
            return 0
        total, stack = 0, [(self.root, root.st_ino)]
        linked: dict[int, list[tuple[str, int]]] = {}  # a file of many links counts once, wherever they are
        scanned: dict[int, int] = {}  # ... at its size in a folder scanned just now, if any
        known: dict[str, Folder] = {}
        every = True
        while stack:
            path, ino = stack.pop()
            cached = self.folders.get(path)
            watched = self.watches.watched(path)
            if cached is not None and cached.ino == ino and not full:
                try:
                    changed = path in dirty or (not watched and os.lstat(path).st_mtime_ns != cached.mtime_ns)
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
                size, subfolders, links = self._scan(path, root.st_dev)
                self._scanned(path, time.monotonic() - began)
                if not watched:  # (a folder `let_in` opened: now it can be)
                    watched = self.watches.add(path)
                scanned.update((ino, n) for ino, (_, n) in links.items())
                entry, excess = Folder(st.st_mtime_ns, st.st_ino, size + self._grown(st), subfolders, links), 0
            every = every and watched
            known[path] = entry
            total += entry.bytes + excess
            for ino, name in entry.linked.items():
                linked.setdefault(ino, []).append(name)
            stack.extend(entry.subfolders)
        self.folders, self.total = known, total
        self._new_links(linked, scanned)
        self.deferred = {path: counted for path, counted in self.deferred.items() if path in known}
        self.deep &= known.keys()
        self.complete = every and self.watches.active
        if full and self.watches.active:
            self.watches.keep_only(known)
        return total + self._links_now()

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

    def _named(self, path: str, names: set[str] | None, cached: Folder, dev: int) -> tuple[Folder, int]:
        """A slow folder not scanned this time: its last scan, with the entries inotify named in it since
        looked at one by one (a new folder is walked, a file's bytes counted on top until the next
        scan: an overcount, never an undercount, of a file that already was there)."""
        counted = self.deferred[path]
        subfolders = list(cached.subfolders)
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
                counted[name] = self._grown(st)
                if self.strip_setid and st.st_mode & SETID:
                    strip_setid(child)
        return cached._replace(subfolders=subfolders), sum(counted.values())

    def _new_links(self, linked: dict[int, list[tuple[str, int]]], scanned: dict[int, int]) -> None:
        """The files of many links a measure found: each at its size in a folder scanned just now, or
        else at the most it was last seen at (a lookup, or an older scan)."""
        old = self.link_bytes
        self.links, self.link_order = linked, list(linked)
        self.link_bytes = {
            ino: scanned[ino] if ino in scanned else max(old.get(ino, 0), *(n for _, n in names))
            for ino, names in linked.items()
        }
        self.links_sum = sum(self.link_bytes.values())

    def _links_now(self) -> int:
        """The files of many links, as they are now: a write through one of a file's names marks only
        that name's folder changed (or none, through a descriptor), and its other folders' scans keep
        its old size (such files grown through one name went 2.3 GiB past a 95.4 MiB limit, counted
        at 4 KiB each through the other). At most LINKS_EACH are looked up a measure
        (2,000: ~6 ms; a measure may come every 50 ms), in turns; the rest count as last seen."""
        n = len(self.link_order)
        start = self.links_from % n if n else 0
        for i in range(min(n, LINKS_EACH)):
            ino = self.link_order[(start + i) % n]
            was = self.link_bytes[ino]
            now = self._linked(ino, self.links[ino], was)
            self.links_sum += now - was
            self.link_bytes[ino] = now
        self.links_from = start + min(n, LINKS_EACH)
        return self.links_sum

    def _linked(self, ino: int, names: list[tuple[str, int]], was: int) -> int:
        """One, looked up by a name it had; if none is its any more, as it was."""
        for path, _ in names:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_ino == ino:
                return self._grown(st)
        return was

    def _grown(self, st: os.stat_result) -> int:
        """What a file or folder counts: its bytes, or, for one of the image's, nothing until it changes
        (its ctime: any write, chmod or touch, which copies it up on an overlay filesystem, or a new
        file that took its inode number)."""
        before = self.image.get(st.st_ino)
        return bytes_of(st) if before is None or st.st_ctime_ns != before[1] else 0

    def _scan(self, path: str, dev: int) -> Scan:
        """A folder's files' bytes (those of one link), its subfolders, and its files of many links.
        A folder the agent may not read or search, it makes readable and searchable for its owner
        first, if it is the owner (see `diskentry.let_in`)."""
        self.deep.discard(path)  # (until this scan finds it holds a folder too deep again)
        for tries in (1, 2):
            found, denied = self._entries(path, dev)
            if tries == 2 or not denied or not let_in(path):
                break
        return found

    def _entries(self, path: str, dev: int) -> tuple[Scan, bool]:
        """What `_scan` returns, and whether the agent was denied the folder or a file in it."""
        size, subfolders = 0, list[tuple[str, int]]()
        linked = Linked()
        try:
            entries = os.scandir(path)
        except PermissionError:
            return (0, [], {}), True
        except OSError:
            return (0, [], {}), False
        with entries:
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                except PermissionError:
                    return (size, subfolders, linked), True
                except OSError:
                    continue
                if st.st_dev != dev:
                    continue
                if e.is_dir(follow_symlinks=False):
                    if e.path in self.skip:
                        continue
                    if len(e.path) < DEEP_PATH // 4 or len(os.fsencode(e.path)) < DEEP_PATH:
                        subfolders.append((e.path, st.st_ino))
                    else:  # counted now, by descriptor; walked again by every measure, as its parent is
                        size += deep_bytes(path, e.name, dev, self._grown, self.strip_setid, self.cap)
                        self.deep.add(path)
                    continue
                if st.st_nlink > 1:  # (the image's files of many links too: `_linked`)
                    linked[st.st_ino] = (e.path, self._grown(st))
                else:
                    size += self._grown(st)
                if self.strip_setid and st.st_mode & SETID:
                    strip_setid(e.path)
        return (size, subfolders, linked), False
