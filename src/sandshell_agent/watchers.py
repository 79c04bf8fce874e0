"""The model's share of inotify instances. Their limit (fs.inotify.max_user_instances, 128 by default)
is per user of the whole machine, and root inside is root outside: every instance the model holds is
one the engine, the host's services and other sessions' agents do not get (a command could hold
126 of 128). The set-id filter hands every `inotify_init` and `inotify_init1` to the agent's
guard (`chmods.py`), which lets the call go on while the container's processes hold fewer than
INSTANCES, and answers EMFILE (the kernel's own word for too many) once they hold that many."""

from __future__ import annotations

import os
import time

from . import openfiles, procs

INSTANCES = 16  # a `tail -f`, a dev server's watcher, an editor's: each takes one


def held(agent: int) -> int:
    """Instances open in the container's processes but the agent's (an instance two processes share
    counts twice: the model gets fewer, never more), listed as the disk watchdog's look lists them
    (`openfiles.entry`: a process whose main thread has ended shows its descriptors only under its
    other threads, and held 100 unseen). Not seen: instances in flight, sent over a socket
    (SCM_RIGHTS) and held in its buffer by no process."""
    count = 0
    for pid in procs.snapshot() - {agent}:
        try:
            base, fds = openfiles.entry(pid)
            count += sum(_inotify(f"{base}/fd/{fd}") for fd in fds)
        except PermissionError:  # not dumpable: what it holds is unseen,
            count += INSTANCES  # so it is taken to hold the whole share
    return count


def _inotify(link: str) -> bool:
    try:
        return os.readlink(link) == "anon_inode:inotify"
    except PermissionError:
        raise
    except OSError:  # (closed meanwhile)
        return False


def allowed(caller: int, now: float | None = None) -> bool:
    """Whether thread `caller` may make one more: always the agent (its disk watchdog's), else while
    the model holds fewer than INSTANCES. For RECOUNT seconds after a count that refused, refused
    without one: a loop of calls would otherwise keep the guard's thread (and the agent's lock) busy.
    (Not after every refusal: calls that kept coming faster than that were refused for good.)"""
    global _refused_at
    if os.path.isdir(f"/proc/self/task/{caller}"):
        return True
    now = time.monotonic() if now is None else now
    if now - _refused_at < RECOUNT:
        return False
    if held(os.getpid()) >= INSTANCES:
        _refused_at = now
        return False
    return True


RECOUNT = 0.25
_refused_at = float("-inf")
