"""The model's share of inotify instances. Their limit (fs.inotify.max_user_instances, 128 by default)
is per user of the whole machine, and root inside is root outside: every instance the model holds is
one the engine, the host's services and other sessions' agents do not get (an attacker's review
held 126 of 128). The set-id filter hands every `inotify_init` and `inotify_init1` to the agent's
guard (`chmods.py`), which lets the call go on while the container's processes hold fewer than
INSTANCES, and answers EMFILE (the kernel's own word for too many) once they hold that many."""

from __future__ import annotations

import os
import time

INSTANCES = 16  # a `tail -f`, a dev server's watcher, an editor's: each takes one


def held(agent: int) -> int:
    """Instances open in the container's processes but the agent's (an instance two processes share
    counts twice: the model gets fewer, never more). Not seen: instances in flight, sent over a
    socket (SCM_RIGHTS) and held in its buffer by no process."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == agent:
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:  # (gone meanwhile)
            continue
        for fd in fds:
            try:
                count += os.readlink(f"/proc/{name}/fd/{fd}") == "anon_inode:inotify"
            except PermissionError:  # not dumpable (a second review held 40 so): what it holds is
                count += INSTANCES  # unseen, so it is taken to hold the whole share
                break
            except OSError:  # (closed meanwhile)
                pass
    return count


def allowed(caller: int, now: float | None = None) -> bool:
    """Whether thread `caller` may make one more: always the agent (its disk watchdog's), else while
    the model holds fewer than INSTANCES. For RECOUNT seconds after a refusal, refused without a
    count: a loop of calls would otherwise keep the guard's thread (and the agent's lock) busy."""
    global _refused_at
    if os.path.isdir(f"/proc/self/task/{caller}"):
        return True
    now = time.monotonic() if now is None else now
    if now - _refused_at < RECOUNT or held(os.getpid()) >= INSTANCES:
        _refused_at = now
        return False
    return True


RECOUNT = 0.25
_refused_at = float("-inf")
