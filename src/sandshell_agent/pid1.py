"""The agent as the container's PID 1, out of reach of everything the model runs (every transport).

No init sits beside it (one would be a root process outside the seccomp filter, open to tracing).
As PID 1 it receives a signal from inside the container only if it handles that signal, so it
handles none; the engine's SIGKILL, from outside, still ends it. Non-dumpable, so root inside,
without CAP_SYS_PTRACE, can neither trace it nor open its /proc fd, environ or mem.
"""

from __future__ import annotations

import ctypes
import platform
import signal

PR_SET_DUMPABLE = 4
RT_SIGACTION = {"x86_64": 13, "aarch64": 134}


def undumpable() -> None:
    """Without CAP_SYS_PTRACE, root inside can then neither trace this process nor open its /proc
    fd, environ or mem (every transport: a traced agent would run what the tracer likes, outside
    the seccomp filter, on the guard's thread)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def ignore_libc_signals() -> None:
    """Ignore signals 32 and 33, which glibc catches for its own use once a thread exists. A signal
    PID 1 catches is delivered even from inside the container, and 33 is real-time (each send is
    queued and handled): a few `kill -33 1` loops kept the agent busy for tens of seconds, its disk
    watchdog with it. glibc's sigaction refuses these two, so the call is made raw. In return the
    agent never calls the set*id family itself (glibc would wait forever for its threads to take
    signal 33); the set-id guard changes its thread's ids with raw calls."""
    libc = ctypes.CDLL(None, use_errno=True)
    ignore = (ctypes.c_ulong * 4)(1, 0, 0, 0)  # SIG_IGN, flags, restorer, mask
    for sig in (32, 33):
        if libc.syscall(RT_SIGACTION[platform.machine()], sig, ignore, None, 8) != 0:
            raise OSError(ctypes.get_errno(), f"could not ignore signal {sig}")


def handle_no_signals() -> None:
    """Python's own handlers (SIGINT's KeyboardInterrupt) back to the default, which PID 1 ignores."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
