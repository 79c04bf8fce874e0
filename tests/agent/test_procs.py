"""The agent's process bookkeeping on its own, in a pid namespace of the test's (where the pids can be
made to wrap at once: in the container it takes 176 s of forks)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import types

import pytest

REUSE = """
import os, subprocess, time
from sandshell_agent import procs
old = subprocess.Popen(["sleep", "60"])
time.sleep(0.05)  # start times are in clock ticks (10 ms): a wrap of 4 million pids takes far longer
before = procs.Alive().now()  # what the agent takes as a command's result goes out
assert old.pid in before
old.kill()
old.wait()
with open("/proc/sys/kernel/ns_last_pid", "w") as f:  # the pids wrap: the next process gets old's pid
    f.write(str(old.pid - 1))
new = subprocess.Popen(["sleep", "60"])  # started by the next command
assert new.pid == old.pid, (old.pid, new.pid)
found = procs.spawned_since(before, os.getpid(), set())
new.kill()
new.wait()
print("killed" if new.pid in found else "spared")
"""


def test_a_process_with_the_pid_of_one_alive_before_the_command_is_still_the_commands() -> None:
    """A command's processes are those not alive before it, but a pid alone may name a process that
    ended since: once the pids wrap, a timed-out command's loop may get one of those pids and run on
    after its result said timed out. The start time tells the two apart."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    argv = ["unshare", *user, "--pid", "--fork", "--mount-proc", sys.executable, "-c", REUSE]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "killed\n", done


STALE = """
import os, subprocess, time
from sandshell_agent import procs
alive = procs.Alive()
old = subprocess.Popen(["sleep", "60"])
alive.now()  # listed after one command
time.sleep(0.05)
old.kill()
old.wait()
with open("/proc/sys/kernel/ns_last_pid", "w") as f:  # the pids wrap during the next command:
    f.write(str(old.pid - 1))
job = subprocess.Popen(["sleep", "60"])  # which leaves this job behind, on old's pid
assert job.pid == old.pid, (old.pid, job.pid)
subprocess.run(["true"])  # (a pid handed out after it: the newest is not the one listed last time)
before = alive.now()  # listed after it: the job is older than the command after
found = procs.spawned_since(before, os.getpid(), set())
job.kill()
job.wait()
print("killed" if job.pid in found else "spared")
"""


def test_a_job_left_by_an_earlier_command_on_a_reused_pid_is_not_the_next_ones() -> None:
    """The other way round: a start time kept from an earlier listing for a pid reused since would
    make a job the command before had left (on that pid) look new, to be killed at the next one's
    timeout. Every listing reads them afresh."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    argv = ["unshare", *user, "--pid", "--fork", "--mount-proc", sys.executable, "-c", STALE]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "spared\n", done


def test_a_shell_that_no_fork_can_start_gets_room_made_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The container's process limit full as a new shell must start: tried again a moment later,
    then after every process but the agent's own is killed (it raised out of the agent: its end).
    A folder that cannot be entered is passed over for the next, as before."""
    from sandshell_agent import spawn

    tries: list[str] = []
    killed: list[set[int]] = []

    bash = types.SimpleNamespace(pid=-7)
    scored: list[int] = []

    def popen(args: list[str], **kw: object) -> types.SimpleNamespace:
        tries.append(str(kw["cwd"]))
        if kw["cwd"] == "/gone":
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/gone")
        if not killed:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return bash

    monkeypatch.setattr(spawn.subprocess, "Popen", popen)
    monkeypatch.setattr(spawn.procs, "kill_all", lambda before, shell, keep: killed.append(keep) or 57)
    monkeypatch.setattr(spawn, "first_to_go", scored.append)  # (its OOM score: the sandbox tests')
    assert spawn.bash(("/app", "/app", "/"), "/root", 0, 1, 2, ()) == (bash, "/app", 57)
    assert tries == ["/app"] * 3 and killed == [{os.getpid(), os.getppid(), 1}] and scored == [-7]
    tries.clear()
    assert spawn.bash(("/gone", "/app", "/"), "/root", 0, 1, 2, ()) == (bash, "/app", 0)
    assert tries == ["/gone", "/app"]
