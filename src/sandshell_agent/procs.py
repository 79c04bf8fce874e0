"""Finding and killing the processes a command started, including ones that escaped its group."""

from __future__ import annotations

import os
import signal
import time


def _stat(pid: int) -> tuple[int, int] | None:
    """A live process's parent pid and start time (clock ticks after boot: with the pid, which
    processes reuse once the pids wrap, what tells one process from another)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: parse after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    # A zombie is dead already (nothing to kill, only, as PID 1, to reap) unless it is a leader whose
    # own thread ended (a raw `SYS_exit`) while its other threads run on: that process is alive, and
    # a kill of its pid ends them all.
    if fields[0] == b"Z" and int(fields[17]) <= 1:
        return None
    return int(fields[1]), int(fields[19])


def parents() -> dict[int, tuple[int, int]]:
    """Map every live pid in this pid namespace to its parent pid and its start time."""
    out: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            got = _stat(int(name))
            if got is not None:
                out[int(name)] = got
    return out


_protected: frozenset[int] = frozenset()


def protect(pid: int) -> None:
    """The shell the agent runs now. As PID 1 the agent is the parent of orphans and of its shell
    alike: this tells them apart (a watchdog thread may be killing while a new shell starts)."""
    global _protected
    _protected = frozenset({pid})


def snapshot() -> set[int]:
    """The pids alive now (taken before every command: names only, no /proc/PID/stat read, so a
    command's start costs the same with 5 processes running or 500)."""
    return {int(name) for name in os.listdir("/proc") if name.isdigit()}


class Alive:
    """The processes alive before the next command (pid -> start time), listed again only when a pid
    was handed out since the last listing: the pid namespace's newest pid (the last field of
    /proc/loadavg) is one pread, where listing /proc took ~60 µs after every command (a `true`
    starts no process), and each one's start time read with it. A listing may name processes that
    ended since: once the pids wrap, a new process may have one of their pids (a command's loop
    could run on under a dead `sleep`'s pid after its timeout, the pids wrapped by 176 s of
    forks): the start time tells them apart (`spawned_since`). (Kept from one listing to the
    next, a start time would be stale for a pid reused in between, and a job of the earlier
    command taken for the next one's.)"""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.fd = None
        self.newest = self.seen = b""
        self.seen_at = 0.0
        self.pids: dict[int, int] = {}

    def moved(self) -> bool:
        """Whether a pid was handed out since the last listing (what it read serves `now` for 1 ms)."""
        self.seen, self.seen_at = self._newest(), time.monotonic()
        return not self.seen or self.seen != self.newest

    def _newest(self) -> bytes:
        if self.fd is None:
            return b""
        try:
            return os.pread(self.fd, 128, 0).rsplit(None, 1)[-1]
        except (OSError, IndexError):
            return b""

    def now(self) -> dict[int, int]:
        """The processes alive, pid -> start time (listed again only if a pid was handed out since)."""
        fresh = self.seen and time.monotonic() - self.seen_at < 0.001
        newest, self.seen = (self.seen if fresh else self._newest()), b""
        if not newest or newest != self.newest:
            self.newest = newest  # read first: a process made during the listing is listed, or listed next time
            self.pids = {}
            for pid in snapshot():  # (at most the pids limit, ~10 µs each, after a command that started one)
                if (got := _stat(pid)) is not None:
                    self.pids[pid] = got[1]
        return self.pids


def spawned_since(before: dict[int, int], shell_pid: int, keep: set[int]) -> list[int]:
    """Pids that are new since `before` (pid -> start time: a pid reused since is new) and descend
    from the shell or were orphaned to init.

    A new process under an older, unrelated process (a server started by an earlier
    command forking a worker) is left alone.
    """
    tree = parents()

    def older(pid: int) -> bool:
        return before.get(pid) == tree[pid][1]

    ours: list[int] = []
    for pid in tree:
        if older(pid) or pid in keep or pid == shell_pid or pid in _protected:
            continue
        node = tree[pid][0]
        while True:
            if node in (shell_pid, 0, 1) or node not in tree:
                ours.append(pid)  # under the shell, or orphaned to init
                break
            if node in keep or older(node):
                break  # under the agent itself, or under an older process
            node = tree[node][0]
    return ours


def not_the_commands(before: dict[int, int], shell_pid: int, keep: set[int]) -> int:
    """How many processes the running command did not start: those alive before it, those under one
    of them, and orphans (their parent ended: under init, whoever started them)."""
    tree = parents()
    theirs = 0
    for pid, (parent, started) in tree.items():
        if pid in keep or pid == shell_pid or pid in _protected:
            continue
        node, older = parent, before.get(pid) == started
        while not older and node != shell_pid:
            if node in (0, 1) or node not in tree:
                older = True  # orphaned
            elif node in keep:
                break
            elif before.get(node) == tree[node][1]:
                older = True
            else:
                node = tree[node][0]
        theirs += older
    return theirs


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_all(before: dict[int, int], shell_pid: int, keep: set[int]) -> int:
    """SIGSTOP then SIGKILL every spawned process until none is left (a fork bomb included)."""
    killed = 0
    for _ in range(200):
        found = spawned_since(before, shell_pid, keep)
        if not found:
            break
        signal_all(found, signal.SIGSTOP)
        signal_all(found, signal.SIGKILL)
        killed += len(found)
        time.sleep(0.01)
        if os.getpid() == 1:
            reap_orphans(keep=next(iter(_protected), -1))
    return killed


def cwd_named(pid: int, said: str) -> str | None:
    """Where `pid` really is: `said` (the shell's name for it, a link kept as a link) when that is
    the same folder, else the kernel's path; None when the process is gone. `PWD=/x` or a hook
    of the model's cannot move the prompt."""
    real = f"/proc/{pid}/cwd"
    try:
        if os.readlink(real) == said:  # the kernel's own name for it: one call, where two stats took ~10 µs
            return said
        here = os.stat(real)
    except OSError:
        return None
    try:
        if said.startswith("/") and os.path.samestat(os.stat(said), here):
            return said
    except OSError:
        pass
    try:
        return os.readlink(real)
    except OSError:
        return None


def ignores(pid: int, sig: int) -> bool:
    """Whether `pid` ignores `sig` (its SigIgn mask in /proc)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"SigIgn:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def reap_orphans(keep: int) -> None:
    """As PID 1: collect every exited child but the shell (its Popen collects it), so zombies of
    orphaned processes never count against the container's process limit."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None:
            return
        if info.si_pid == keep:  # the shell ended: leave it to Popen, then look at the others
            for pid in _zombies(exclude=keep):
                _reap(pid)
            return
        _reap(info.si_pid)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _zombies(exclude: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != exclude:
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == b"Z" and int(fields[1]) == os.getpid():
                out.append(int(entry))
    return out
