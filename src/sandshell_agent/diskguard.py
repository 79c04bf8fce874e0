"""The disk watchdog: the workspace and the container's own files stay under their size limits.

A thread measures the bytes on disk under /app and under the container's root filesystem (not
/app, /tmp or other mounts: /tmp is a sized tmpfs, which the kernel bounds itself), with the files
the engine binds in (/etc/hosts and the like), files deleted while still open or mapped, and files
written through shared mappings, flushed so their blocks show (`disktree.py`, `openfiles.py`).
inotify says which folders changed and only those are scanned again (a folder it cannot watch, by
its mtime); a full measure for every 2 s a command runs catches what inotify does not report. It
never spends more than a tenth of its time scanning. When an area grows past its
limit, `over` holds one sentence for the model and the user; the agent's loop stops the command
and everything started from the shell. Nothing is deleted: once over, only further growth trips
the watchdog again, so the model can still look and clean up.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from . import openfiles, procs
from .diskentry import blocks, inodes
from .disktree import Tree

BUSY_EVERY = 0.05  # seconds between scans while a command runs (at least), and sooner while an area
# nears its limit fast: in half the time it would take to get there at its pace (`Area.soon`), at most
# every SOONEST; the pace halves every PACE_HALF s the area stops growing. Writers at ~700 MB/s beside
# a slow look went up to 38 MB past a 50 MB limit measured every 50 ms, 7 MB paced (20 runs each).
SOONEST, PACE_HALF = 0.005, 0.25
IDLE_EVERY = 0.5  # ... and between commands (a writer left in the background)
FULL_BUSY_EVERY = 2.0  # seconds between full measures (growth of files that already existed)
FULL_IDLE_EVERY = 2.0  # a `chmod 4755` leaves its folder's mtime alone: only a full measure sees it
FULL_IDLE_WATCHED = 10.0  # ... unless inotify watches every folder: it reports chmods and writes
# As a command ends, a full measure, unless one was this recent (commands in a tight loop) or inotify
# watches every folder (then only a write through mmap escapes it, for the next scheduled measure).
FULL_AFTER_EVERY = 1.0
# Files deleted while held open or mapped, and files written through mappings, seen only in /proc
# (`openfiles.py`): looked at on their own clock, not only at the (rarer, costlier) full measures.
LOOK_BUSY_EVERY = 0.25
LOOK_IDLE_EVERY = 1.0
# ... never more often than ten times what a look takes, but while a command runs, at most this long
# after a look ends: a look made slow (0.3 s) spaced them 3 s apart, and a writer into a file deleted
# while held went ~25 MB past a 50 MB limit at 8 MB/s meanwhile.
LOOK_BUSY_GAP = 1.0
SLACK = 1 << 20  # growth tolerated while already over a limit
SKIP = ("/proc", "/sys", "/dev", "/app", "/tmp")  # (other mounts are left out by their device)
# Files the engine binds in read-write from its own folders: on no filesystem the areas measure, yet
# the model can grow them (up to the file limit each); counted with the container's own files.
ENGINE_BINDS = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")


def human(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


@dataclass
class Area:
    what: str
    root: str
    skip: tuple[str, ...]
    limit: int
    setting: str
    baseline: int = 0  # bytes of the `extra` files before the session
    threshold: int = field(init=False)  # the limit, or where the last trip left it
    tree: Tree = field(init=False)

    extra: tuple[str, ...] = ()  # files measured with the area wherever they are
    image: dict[int, tuple[int, int]] | None = None  # the image's files, which count once changed (Tree)
    looked: threading.Event = field(init=False)  # set by a look through /proc: measure at once
    used: int = 0  # bytes at the last measure
    measured_at: float = float("-inf")  # when
    pace: float = 0.0  # bytes a second the area grows by: the fastest of late (`measured`)
    grew: bool = False  # the last measure found it grown (if not, a change the kernel reports wakes its thread)
    started: bool = False  # ... after one that found it not growing: another follows at once (`_rest`)

    def __post_init__(self) -> None:
        self.threshold = self.limit
        self.tree = Tree(
            self.root, self.skip, strip_setid=self.root == "/app", extra=self.extra, held=True, image=self.image
        )
        self.looked = threading.Event()

    def measured(self, used: int, now: float) -> None:
        """Keep the pace: the growth since the last measure, or what is left of a faster one (halved
        every PACE_HALF s). A writer pauses (a new file, a new process, the host's writeback): paced by
        its last step alone, one measured 50 ms apart after a step of nothing went 22 MB past."""
        since = max(now - self.measured_at, 1e-3)
        self.pace = max((used - self.used) / since, self.pace * 0.5 ** (since / PACE_HALF), 0.0)
        self.started = used > self.used and not self.grew
        self.grew, self.used, self.measured_at = used > self.used, used, now

    def soon(self) -> float:
        """Seconds until the next measure should be made for its growth: half the time the area
        would take to reach its threshold at its pace (infinite when it does not grow)."""
        if not self.limit or not self.pace:
            return float("inf")
        return max(self.threshold - self.used, 0) / self.pace / 2


def _paced(a: Area, quick: float) -> float:
    """Seconds to the next quick measure for the area's growth: soon (`Area.soon`), but never more
    often than every SOONEST, nor than ten times what the last quick measure took."""
    return max(a.soon(), quick * 10, SOONEST)


def _rest(a: Area, quick: float) -> bool:
    """Wait for an area's next turn (`_paced`, at most BUSY_EVERY); True: measure at once. While its
    last measure found it not growing, a change the kernel reports in a watched folder ends the wait;
    a measure that finds growth after none is followed by another as soon as the pacing allows, and
    the growth between the two gives the pace. A writer at 1.4-2 GB/s went 20-50 MB past a 50 MB
    limit in the one turn before its first measure; now 0-7 MB (docs/benchmarks.md)."""
    wait = min(BUSY_EVERY, _paced(a, quick))
    first = min(wait, max(SOONEST, quick * 10))
    fd = a.tree.watches.fd
    if a.started:  # growth after none: a second measure as soon as the pacing allows, for the pace
        time.sleep(first)
        return True
    if a.grew or not a.limit or fd < 0:
        time.sleep(wait)
        return False
    time.sleep(first)
    try:
        return bool(select.select([fd], [], [], wait - first)[0])
    except (OSError, ValueError):  # (closed meanwhile: the turn ends)
        return False


class DiskGuard:
    """Scans in a thread; on a trip it stops every process started from the shell at once (from the
    thread: a fast writer must not wait for the agent's loop) and wakes the loop through a pipe so
    the running command line ends and the notice reaches the host."""

    def __init__(
        self, workspace_limit: int, scratch_limit: int, shell_pid: Callable[[], int], busy: Callable[[], bool]
    ) -> None:
        self.areas: list[Area] = []
        # The workspace is always watched (for set-id bits); its size only against a limit
        self.areas.append(Area("the workspace /app", "/app", (), workspace_limit, "SANDSHELL_WORKSPACE_LIMIT"))
        if scratch_limit and not os.statvfs("/").f_flag & os.ST_RDONLY:
            what = "the container's files outside /app and /tmp"
            base, image = sum(map(blocks, ENGINE_BINDS)), inodes("/", SKIP)
            area = Area(what, "/", SKIP, scratch_limit, "SANDSHELL_SCRATCH_LIMIT", base, ENGINE_BINDS, image)
            self.areas.append(area)
        self.shell_pid = shell_pid
        self.look_from = 0  # the first process the last look through /proc left out at its bounds
        # Whether a command runs (then scan often): asked by the threads every 50 ms, from the agent's
        # own state (an Event the agent set and cleared cost ~10 µs of Python a command, and was set
        # only at the loop's next turn: up to 1 s into a silent command).
        self.busy = busy
        self.over: str | None = None  # set here, taken by the agent's loop
        # Held through a trip (stop, notice, kill): the loop takes the notice and starts the next
        # command only after it, so a trip's kills never reach a command that started after it.
        self.tripping = threading.RLock()
        self.wake_r, self._wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self._wake_w, False)
        for a in self.areas:
            threading.Thread(target=self._watch, args=(a,), name=f"disk {a.root}", daemon=True).start()
        threading.Thread(target=self._look, name="disk /proc", daemon=True).start()

    def take(self) -> str | None:
        """The loop's side: take the notice, if any (and drain the wake-up pipe)."""
        if self.over is None:  # read without the lock: a trip under way wakes the loop through the pipe
            return None
        with self.tripping:  # (read again under it: the checker does not know a thread may have taken it)
            notice, self.over = cast("str | None", self.over), None
            if notice is None:
                return None
            try:
                os.read(self.wake_r, 64)
            except BlockingIOError:
                pass
            return notice

    def check(self, a: Area, full: bool = True) -> float:
        """Measure one area, acting on a trip; returns the CPU time it took. Not the time it waited:
        behind a look through /proc that holds the interpreter's lock, a quick measure of 0.5 ms of
        work can take 48 ms (each of its system calls gives the lock up and waits to get it back);
        timed so, it would slow the quick clock to 0.5 s, time for a fast writer to get hundreds of
        MB past a limit. The look itself
        (`_look`) stays timed by the wall clock: it is what holds the lock, and slowing it when it
        runs long leaves the measures more of it."""
        start = time.thread_time()
        a.tree.cap = a.threshold + a.baseline + a.limit if a.limit else 0  # (past it, a deep walk may stop)
        used = a.tree.measure(full) - a.baseline
        a.measured(used, time.monotonic())
        if a.limit and used > a.threshold:
            with self.tripping:
                self._trip(a, used)
        elif used < a.limit:
            a.threshold = a.limit
        return time.thread_time() - start

    def _trip(self, a: Area, used: int) -> None:
        shell = self.shell_pid()
        procs.signal_all([shell], signal.SIGSTOP)  # it starts nothing more; the agent's loop ends it
        self.over = (
            f"{a.what} grew to {human(used)}, over its limit of {human(a.limit)}: the command and "
            f"everything started from the shell were stopped (files already written are kept); "
            f"delete files to make room, or raise {a.setting}"
        )
        try:
            os.write(self._wake_w, b"!")
        except BlockingIOError:
            pass
        procs.kill_all({}, shell, {os.getpid(), 1})
        a.threshold = a.tree.measure() - a.baseline + SLACK

    def _watch(self, a: Area) -> None:
        """One thread an area, on its own clocks: a quick measure (changed folders only) every 50 ms
        while a command runs (sooner while the area nears its limit fast: `Area.soon`), and a full
        one for every 2 s it has run (a short command needs none: in a loop of quick ones a full
        measure every 2 s was most of the agent's CPU); as a command ends, a full one too, unless
        one was made in the last second or inotify watches every folder; never more often than ten
        times what a measure takes. Idle, when inotify watches every folder, a quick measure still
        every 50 ms (it costs nothing until something changes) and a full one every 10 s; when it
        does not, a quick one every 0.5 s and a full one every 2 s (a file made set-uid leaves no
        trace in its folder's mtime: only a full measure sees it).
        After each look through /proc (`_look`), a quick measure at once; and after a change the
        kernel reports while the area was not growing (`_rest`). Each clock is slowed to ten times
        the CPU its work takes (`check`)."""
        quick = full = 0.0
        last_quick = last_full = busy_since = float("-inf")
        was_busy = heard = False
        while True:
            busy = self.busy()
            now = time.monotonic()
            if busy and not was_busy:
                busy_since = now
            ended, was_busy = was_busy and not busy, busy  # a command just ended: measure it all now
            try:
                since = now - last_full
                idle_every = FULL_IDLE_WATCHED if a.tree.complete else FULL_IDLE_EVERY
                due = now - max(last_full, busy_since) >= FULL_BUSY_EVERY if busy else since >= idle_every
                after = ended and since >= FULL_AFTER_EVERY and not a.tree.complete
                quick_every = max(BUSY_EVERY if busy or a.tree.complete else IDLE_EVERY, quick * 10)
                quick_every = min(quick_every, _paced(a, quick))
                if since >= full * 10 and (due or after):
                    full, last_full = self.check(a, full=True), now
                    quick, last_quick = full / 4, now
                elif a.looked.is_set() or heard or now - last_quick >= quick_every:
                    a.looked.clear()  # (what a look found counts at once)
                    quick, last_quick = self.check(a, full=False), now
            except Exception as e:  # a watchdog must not die: say so and go on
                print(f"sandshell-agent: disk check failed: {e!r}", file=sys.stderr, flush=True)
                last_quick = last_full = time.monotonic()
                a.started = False  # (no second measure at once: the next one waits its turn)
            heard = _rest(a, quick)

    def _look_once(self) -> None:
        """One walk through /proc for every area (two areas on one device: it counts for both, with
        the larger limit as the most a file only mapped counts)."""
        devs: dict[int, list[Area]] = {}
        for a in self.areas:
            dev = a.tree.device()
            if dev is not None:
                devs.setdefault(dev, []).append(a)
        if not devs:
            return
        wanted = {dev: (areas[0].tree.flush_from, max(a.limit for a in areas)) for dev, areas in devs.items()}
        seen, self.look_from = openfiles.look_all(wanted, self.look_from)
        for dev, areas in devs.items():
            for a in areas:
                a.tree.seen(seen[dev])

    def _look(self) -> None:
        """The look through /proc (`openfiles.py`, one walk for every area), in a thread of its own: a look that many
        processes and descriptors make slow (0.2-0.7 s for 13 of 4,000; more for 60,000 mappings
        each) held up the quick measures of its area, and a plain writer went 540 MB past meanwhile.
        Every 0.25 s while a command runs, every second idle, and never more often than ten times
        what a look takes, nor, while a command runs, more than LOOK_BUSY_GAP after the last one ended;
        each area then measures at once."""
        last, took = float("-inf"), 0.0
        while True:
            now = time.monotonic()
            if self.busy():
                every = max(LOOK_BUSY_EVERY, min(took * 10, took + LOOK_BUSY_GAP))
            else:
                every = max(LOOK_IDLE_EVERY, took * 10)
            if now - last >= every:
                try:
                    self._look_once()
                except Exception as e:  # a watchdog must not die: say so and go on
                    print(f"sandshell-agent: disk look failed: {e!r}", file=sys.stderr, flush=True)
                for a in self.areas:
                    a.looked.set()
                last, took = now, time.monotonic() - now
            time.sleep(BUSY_EVERY)
