"""Finding and killing the processes a command started, including ones that escaped its group."""

from __future__ import annotations

import os
import signal
import time


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: parse after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def parents() -> dict[int, int]:
    """Map every live pid in this pid namespace to its parent pid."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            ppid = _ppid(int(name))
            if ppid is not None:
                out[int(name)] = ppid
    return out


def snapshot() -> set[int]:
    return set(parents())


def spawned_since(before: set[int], shell_pid: int, keep: set[int]) -> list[int]:
    """Pids that are new since `before` and descend from the shell or were orphaned to init.

    A new process under an older, unrelated process (a server started by an earlier
    command forking a worker) is left alone.
    """
    tree = parents()
    ours: list[int] = []
    for pid in tree:
        if pid in before or pid in keep or pid == shell_pid:
            continue
        node = tree[pid]
        while True:
            if node in (shell_pid, 0, 1) or node not in tree:
                ours.append(pid)  # under the shell, or orphaned to init
                break
            if node in keep or node in before:
                break  # under the agent itself, or under an older process
            node = tree[node]
    return ours


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_all(before: set[int], shell_pid: int, keep: set[int]) -> int:
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
    return killed


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
