"""The process watchdog: near the container's process limit (a fork bomb, even in the background),
every process started from the shell is killed."""

from __future__ import annotations

import os
import signal

from . import procs

CHECK_EVERY = 0.5


# The container's task count, as the kernel keeps it for --pids-limit (cgroup v2, then v1).
CGROUP_PIDS = ("/sys/fs/cgroup/pids.current", "/sys/fs/cgroup/pids/pids.current")


def _open_counter(pids_limit: int) -> int | None:
    """The cgroup file that counts this container's tasks, held open (a count is then one pread, where
    listing /proc took ~30 µs at every command's end); only when its pids.max is the limit we were
    given, so it is this container's own cgroup and not the host's."""
    for path in CGROUP_PIDS:
        try:
            with open(os.path.join(os.path.dirname(path), "pids.max")) as f:
                ours = f.read().strip() == str(pids_limit)
            if ours:
                return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            pass
    return None


class PidWatchdog:
    def __init__(self, pids_limit: int) -> None:
        self.pids_limit = pids_limit
        self.next_check = 0.0
        self.counter = _open_counter(pids_limit) if pids_limit else None

    def count(self) -> int:
        """Tasks in the container (threads count against the limit too), or its processes."""
        if self.counter is not None:
            try:
                return int(os.pread(self.counter, 32, 0))
            except (OSError, ValueError):
                pass
        return sum(1 for name in os.listdir("/proc") if name.isdigit())

    def check(
        self, now: float, shell_pid: int, force: bool = False, stop: bool = False, before: dict[int, int] | None = None
    ) -> str | None:
        """Kill the shell's descendants when the process count nears the limit; returns a notice.
        `stop`: a command runs, which this ends: the shell is stopped first, so that nothing more of
        its line runs once its processes are killed (`echo never` after a fork bomb ran); the agent
        then ends the line as at a timeout, which wakes the shell. `before`: the processes alive as
        that command started; the notice says how many of those killed it did not start (a fork bomb
        an earlier command left in the background is not this one's doing)."""
        if not self.pids_limit or (now < self.next_check and not force):
            return None
        self.next_check = now + CHECK_EVERY
        count = self.count()
        if count < self.pids_limit * 3 // 4:
            return None
        if stop:
            procs.signal_all([shell_pid], signal.SIGSTOP)
        keep = {os.getpid(), 1}
        theirs = procs.not_the_commands(before, shell_pid, keep) if before is not None else 0
        killed = procs.kill_all({}, shell_pid, keep)
        said = f"{count} processes reached the limit of {self.pids_limit}: {killed} processes started from the shell"
        said += " were killed"
        if theirs:
            said += (
                f"; {theirs} of them were not started by this command (left running by an earlier one, or orphaned:"
                " their parent had ended), and this command was stopped with them"
            )
        return said


class OomScoreWatch:
    """Root inside may raise the agent's OOM score (`/proc/1/oom_score_adj`: raising needs no
    capability, lowering it back does, so the agent cannot undo it); then a memory-hungry command
    gets the agent killed first. It cannot be prevented from inside: it is said, once per change."""

    PATH = "/proc/self/oom_score_adj"

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open(self.PATH, os.O_RDONLY | os.O_CLOEXEC)  # read again with pread
        except OSError:
            self.fd = None
        self.seen = self._read()

    def _read(self) -> int | None:
        if self.fd is None:
            return None
        try:
            return int(os.pread(self.fd, 32, 0))
        except (OSError, ValueError):
            return None

    def check(self) -> str | None:
        now = self._read()
        if now is None or now == self.seen:
            return None
        self.seen = now
        return (
            f"something in the sandbox set the agent's OOM score to {now}: if memory runs out, the kernel"
            " may now end the agent first (the session would then restart on a new container)"
        )
