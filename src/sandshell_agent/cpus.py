"""The agent and its shell on one CPU while commands come and go (SANDSHELL_SHELL_CPU=shared, not
the default: in sandbox_bench's round trip it makes no clear difference, 1.57-1.66x the bash pipe
against 1.63-1.66x free; the disk tests pass with it, the disk watchdog pacing its measures to a
writer's speed).

A command handed to bash and its record handed back each woke the other process, most often on
the other CPU: in this VM a halted CPU takes tens of µs to wake, and the agent waited on bash's
state save when both ran on one. Kept to the CPU the agent started on, the loop's bash yields
right after its record (bashloop.c), and the agent has it in 15-21 µs instead of 44-45 (a `true`'s
round trip 0.333 against 0.407 ms free, agents_bench). The loop's bash keeps to it
only between commands: it sets itself free as it starts one, so a command and all it starts
(`exec`'d programs too) run on every CPU the container has. The agent's main thread keeps to it
while a command is quick (a flood's output is then read where there is room); its other threads
(the disk watchdog's) run anywhere. The CPU is whichever the agent was on at its start, so
sessions should spread over a machine of many CPUs (not measured: only 2-CPU machines here).
"""

from __future__ import annotations

import os


def current() -> int:
    """The CPU this process runs on now (-1 when /proc does not say)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[36])  # (field 39, "processor")
    except (OSError, ValueError, IndexError):
        return -1


class Home:
    """The CPU the agent's thread and its shell keep to (`cpu`, -1: none), and all it was allowed."""

    def __init__(self, shared: bool) -> None:
        self.allowed = sorted(os.sched_getaffinity(0))
        self.cpu = current() if shared and len(self.allowed) > 1 else -1
        self.on = False

    def loop_args(self) -> tuple[str, str]:
        """The loop's last two arguments: its CPU, and every CPU what it starts may run on."""
        return str(self.cpu), ",".join(map(str, self.allowed)) or "-"

    def keep(self, on: bool) -> None:
        """This thread on the CPU (`on`), or on all it was allowed."""
        if self.cpu < 0 or on == self.on:
            return
        try:
            os.sched_setaffinity(0, {self.cpu} if on else self.allowed)
        except OSError:  # (the container's CPUs changed under it: left as it is)
            return
        self.on = on
