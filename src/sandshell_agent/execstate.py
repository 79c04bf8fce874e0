"""The state of a shell that `exec` replaced: bash runs no EXIT trap then, so the cwd and the
exports the same command set before it were lost. The program that took its place started with
both (same process: its cwd, and its environment as exported at that moment); the agent reads
them from /proc when the status channel closes under it, before a program that ends at once
(`exec bash`, whose input is /dev/null) is gone. Best effort: a program gone first keeps the
state saved after the command before."""

from __future__ import annotations

import os
import re
import shlex
import stat

from . import files, procs
from .wrapper import CWD_FILE, EXEC_STATE, WHOLE, last_saved

BASH_ARGV = b"/bin/bash\0--noprofile\0--norc\0"  # the agent's own bash: not replaced (a channel closed)
ENV_LIMIT = 8 * 1024 * 1024
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _read(path: str, limit: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(limit)


def capture(pid: int, number: int) -> tuple[str, bytes] | None:
    """(cwd, exports script) of the program that replaced bash `pid`, or None if there is none;
    the script ends as state script `number` would (it comes after that one)."""
    try:
        if _read(f"/proc/{pid}/cmdline", len(BASH_ARGV) + 1) == BASH_ARGV:
            return None
        env = _read(f"/proc/{pid}/environ", ENV_LIMIT)
    except OSError:  # gone already
        return None
    lines, pwd = [], ""
    for item in env.split(b"\0"):
        raw_name, sep, raw_value = item.partition(b"=")
        name, value = raw_name.decode("ascii", "replace"), raw_value.decode("utf-8", "surrogateescape")
        if not sep or not NAME.fullmatch(name):
            continue  # BASH_FUNC_f%% (functions are saved apart) and names bash could not set
        if name == "PWD":
            pwd = value
        lines.append(f"declare -x {name}={shlex.quote(value)}\n")
    cwd = procs.cwd_named(pid, pwd)  # the name the shell had for it, when it is that folder
    if not env or cwd is None or not cwd.startswith("/"):
        return None
    lines.append(f"{WHOLE} {number}\n")  # written to its end, after the state script saved last
    return cwd, "".join(lines).encode("utf-8", "surrogateescape")


def _write(path: str, data: bytes) -> None:
    """Replace a state file's content: never through a link, never into a FIFO (the folder is the model's)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            # (not `view[os.write(fd, view):]`: mypyc evaluates a memoryview's slice bound twice, and
            # the state was written twice: the agent's tests caught it; see image.compile_agent)
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def keep(pid: int, state_dir: str) -> bool:
    """Save what `capture` finds where a new shell restores from; True if something was saved."""
    number = last_saved(state_dir)[0]
    got = capture(pid, number)
    if got is None:
        return False
    cwd, exports = got
    files.remove_unless_regular(state_dir, (EXEC_STATE, CWD_FILE))  # a link, a FIFO or a folder the model put there
    try:
        _write(os.path.join(state_dir, EXEC_STATE), exports)
        _write(os.path.join(state_dir, CWD_FILE), f"{number}\n{cwd}".encode("utf-8", "surrogateescape"))
    except OSError:
        return False
    return True
