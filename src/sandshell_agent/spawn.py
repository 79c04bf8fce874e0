"""Starting the model's bash: in the first of a few folders it can enter, and when no process can be
had (the container's process limit full, with the last shell gone), after making room."""

from __future__ import annotations

import errno
import os
import subprocess
import time

from . import procs
from .shellenv import base_env

NO_PROCESS = (errno.EAGAIN, errno.ENOMEM)  # what a failed fork says
SHELL_OOM_SCORE = 500  # of -1000..1000, added to the model's processes' OOM scores (the agent's is 0)


def bash(
    places: tuple[str, ...], home: str, stdin: int, stdout: int, stderr: int, keep: tuple[int, ...]
) -> tuple[subprocess.Popen[bytes], str, int]:
    """Bash started in the first of `places` it can enter (a folder the model made one it cannot
    enter, `chmod 000 .` where root has no CAP_DAC_OVERRIDE, must not take the agent down); with
    where it started, and how many of the model's processes were killed to make room for it.

    A fork the process limit refuses is tried again a moment later, then once more after every
    process but the agent's own is killed: the shell is gone, and what is left is the model's (a
    fork bomb caught as the shell dies must not take the agent down here)."""
    killed = 0
    for where in dict.fromkeys(places):  # (each place once, in order)
        for attempt in range(3):
            try:
                proc = subprocess.Popen(
                    ["/bin/bash", "--noprofile", "--norc"],
                    stdin=stdin,
                    stdout=stdout,
                    stderr=stderr,
                    env=base_env(home),
                    cwd=where,
                    start_new_session=True,  # a signal to the agent's group never reaches it
                    pass_fds=keep,
                    close_fds=True,
                )
            except OSError as e:
                if e.errno not in NO_PROCESS:
                    if where == places[-1]:
                        raise
                    break  # this folder cannot be entered: the next one
                if attempt == 2:
                    raise
                if attempt == 1:
                    killed += procs.kill_all({}, -1, {os.getpid(), os.getppid(), 1})
                time.sleep(0.05)
                continue
            first_to_go(proc.pid)
            return proc, where, killed
    raise AssertionError("unreachable: the last place raises")


def first_to_go(pid: int) -> None:
    """Make bash, and so all it starts (children inherit it), the memory limit's first to go: the
    kernel's OOM killer takes the process of the highest score in the container, the agent not
    exempt (it is not the machine's init), and sixty workers smaller than the agent would take it
    down in 1.5 s. A raise needs no privilege; the model may bring its own processes
    back down to 0, never below the agent's. Written before bash reads its first line: it has no
    child yet."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write(str(SHELL_OOM_SCORE))
    except OSError:
        pass  # (a kernel without it: as before)
