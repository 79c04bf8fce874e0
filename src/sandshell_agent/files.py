"""File operations the host asks for: bounded reads and writes, the model's state, ownership."""

from __future__ import annotations

import errno
import itertools
import os
import secrets
import shutil
import stat
import time
from typing import Any

STATE_FILES = {"goal": "/app/goal", "system": "/app/system.md", "config": "/app/config.json"}


def read_text(path: str, limit: int) -> dict[str, Any]:
    """Read at most `limit` bytes of a regular file as text; never raises."""
    out: dict[str, Any] = {"path": path, "content": None, "error": None, "size": 0, "truncated": False}
    try:
        st = os.stat(path)
    except FileNotFoundError:
        out["error"] = "missing"
        return out
    except OSError as e:
        out["error"] = f"cannot stat: {e.strerror}"
        return out
    if stat.S_ISDIR(st.st_mode):
        out["error"] = "is a directory"
        return out
    if not stat.S_ISREG(st.st_mode):
        out["error"] = "not a regular file"
        return out
    out["size"] = st.st_size
    try:  # swapped for a FIFO since the stat: O_NONBLOCK opens it at once, fstat refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                out["error"] = "not a regular file"
                return out
            if (why := agents_own(fd)) is not None:
                out["error"] = why
                return out
            data = f.read(limit + 1)
    except OSError as e:
        out["error"] = f"cannot read: {e.strerror}"
        return out
    if len(data) > limit:
        data = data[:limit]
        out["truncated"] = True
    if b"\0" in data:
        out["error"] = "binary file"
        return out
    out["content"] = data.decode("utf-8", errors="replace")
    return out


def last_line(path: str, limit: int = 128) -> str | None:
    """The last line of a regular file (never a link or a FIFO) that ends with a newline, if it is
    within the file's last `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        end = os.pread(fd, limit, max(0, st.st_size - limit))
    except OSError:
        return None
    finally:
        os.close(fd)
    whole = len(end) < limit or b"\n" in end[:-1]
    return end[:-1].rpartition(b"\n")[2].decode("utf-8", "replace") if end.endswith(b"\n") and whole else None


def remove_unless_regular(folder: str, names: tuple[str, ...]) -> list[str]:
    """Remove each of `names` in `folder` that is not a regular file: a link, a FIFO, a socket or a
    device is unlinked (never followed), a folder removed with what it holds (`shutil.rmtree`
    works through descriptors and follows no link inside); the names removed."""
    removed = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                shutil.rmtree(path)
            elif not stat.S_ISREG(mode):
                os.unlink(path)
            else:
                continue
            removed.append(name)
        except OSError:
            continue
    return removed


def write_text(path: str, content: str, append: bool, owner: tuple[int, int] | None) -> dict[str, Any]:
    """Write a file, creating parent folders; returns the size or an error."""
    try:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        data = content.encode()  # the server refused content that is not valid text
        # Never blocks on a FIFO (O_NONBLOCK: ENXIO with no reader) and never writes into one.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (os.O_APPEND if append else 0)
        fd = os.open(path, flags, 0o644)
        with open(fd, "ab" if append else "wb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {"path": path, "size": 0, "error": "not a regular file"}
            if (why := agents_own(fd)) is not None:
                return {"path": path, "size": 0, "error": why}
            if not append:
                os.ftruncate(fd, 0)
            f.write(data)
        if owner is not None:
            os.lchown(path, *owner)
        return {"path": path, "size": os.path.getsize(path), "error": None}
    except OSError as e:
        return {"path": path, "size": 0, "error": f"{e.strerror or e}"}


def agents_own(fd: int) -> str | None:
    """Why the file open at `fd` is not for the model's file actions, or None. The agent does them
    itself, and the entries of its own process under /proc (its timer slack, name, memory map) are
    open to it where they are closed to the model's processes (the agent is not dumpable): a timer
    slack of 100 s set through a write would hold up every timeout after it. A file
    reached only through the agent's own descriptors (deleted, or in memory) is not the model's either."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "cannot tell where the file is"
    parts = where.split("/", 3)  # /proc/PID/...: a pid or thread id of the agent's, however it was named
    if len(parts) > 2 and parts[1] == "proc" and parts[2] in {str(os.getpid()), *os.listdir("/proc/self/task")}:
        return "the sandshell agent's own process files are not open to file actions"
    if os.fstat(fd).st_nlink == 0:  # (deleted since, or made in memory: nothing the model can name)
        return "the file is no longer in the filesystem"
    return None


def model_state(limit: int) -> dict[str, Any]:
    return {key: read_text(path, limit) for key, path in STATE_FILES.items()}


class Owner:
    """Gives what the model makes under `root` back to the host user who owns the workspace, after
    every command. A folder whose times and inode have not moved since the last look has had no entry
    made, removed or renamed in it: only its subfolders are looked at (a stat a folder, where every
    entry took one: with 10,000 files a host user's every command took ~30 ms). An entry given to
    someone else in place (`chown`) moves no folder's time; a full walk every FULL_SECONDS finds it."""

    FULL_SECONDS = 5.0

    def __init__(self, root: str, uid: int, gid: int, limit: int = 20000) -> None:
        self.root, self.uid, self.gid, self.limit = root, uid, gid, limit
        self.folders: dict[str, tuple[tuple[int, int, int], list[str]]] = {}  # path -> (times, inode), subfolders
        self.resume: dict[str, int] = {}  # a folder a walk was cut short in -> where the next one goes on
        self.full_at = float("-inf")

    def fix(self) -> int:
        """Fix what changed (everything, when a full walk is due); returns how many entries were given back."""
        now = time.monotonic()
        full, fixed, looked = now - self.full_at >= self.FULL_SECONDS, 0, 0
        if full:
            self.full_at = now
        folders: dict[str, tuple[tuple[int, int, int], list[str]]] = {}
        stack = [self.root]
        while stack and looked < self.limit:
            top = stack.pop()
            try:
                st = os.lstat(top)
            except OSError:
                continue
            key, known = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino), self.folders.get(top)
            looked += 1
            if known is not None and known[0] == key and not full:
                subfolders = known[1]
            else:
                subfolders, n, entries = self._scan(top, self.limit - looked)
                fixed, looked = fixed + n, looked + entries
                if top in self.resume:  # cut short: the next walk lists it again, from where this one stopped
                    key = (-1, -1, -1)
            folders[top] = (key, subfolders)  # the times from before the scan: a change during it is seen next time
            stack.extend(subfolders)
        self.folders = folders
        return fixed

    def _scan(self, folder: str, most: int) -> tuple[list[str], int, int]:
        """The folder's subfolders, the entries given back, and the entries looked at (at most `most`)."""
        subfolders: list[str] = []
        fixed, start = 0, self.resume.pop(folder, 0)
        try:
            with os.scandir(folder) as listing:
                entries = list(itertools.islice(listing, start, start + max(most, 0)))
                if len(entries) == most and next(listing, None) is not None:
                    self.resume[folder] = start + most
        except OSError:
            return subfolders, 0, 0
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
                if st.st_uid != self.uid:
                    os.lchown(entry.path, self.uid, self.gid)
                    fixed += 1
                if entry.is_dir(follow_symlinks=False):
                    subfolders.append(entry.path)
            except OSError:
                continue
        return subfolders, fixed, len(entries)


def open_dir(path: str, create: bool = True) -> int:
    """Open the folder `path` (absolute) without following a link at any step, creating missing
    steps; a step that is a link, a file or a FIFO gives OSError rather than a detour or a hang."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [p for p in path.split("/") if p and p != "."]:
            if part == "..":
                raise OSError(errno.EINVAL, "'..' in a private path")
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_new(folder: str, stem: str, suffix: str) -> tuple[int, str]:
    """Create a file that did not exist in `folder` (no links followed, never a FIFO or device):
    `stem + suffix`, or with a random part when that name is taken. Returns (fd, path)."""
    dfd = open_dir(folder)
    try:
        for attempt in range(4):
            name = f"{stem}{suffix}" if attempt == 0 else f"{stem}-{secrets.token_hex(4)}{suffix}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                return os.open(name, flags, 0o644, dir_fd=dfd), os.path.join(folder, name)
            except FileExistsError:
                continue
        raise OSError(errno.EEXIST, "every name tried is taken")
    finally:
        os.close(dfd)
