"""A running sandbox's processes as the host sees them, and their CPU time: for the benches that
say where a command's CPU goes (agents_bench, process_cpu_bench, roundtrip_bench)."""

from __future__ import annotations

import psutil

from sandshell.sandbox.sandbox import Sandbox


def cpu(p: psutil.Process) -> float:
    """User and system seconds of `p` so far (clock ticks: time thousands of commands, not tens)."""
    t = p.cpu_times()
    return float(t.user + t.system)


def agent_of(sb: Sandbox) -> psutil.Process:
    """The agent: the container's first process."""
    sb.container.reload()
    return psutil.Process(sb.container.attrs["State"]["Pid"])


def bash_of(agent: psutil.Process) -> psutil.Process:
    """The shell the agent runs commands in (a new one after each restart: look it up again)."""
    return next(c for c in agent.children() if c.name() == "bash")
