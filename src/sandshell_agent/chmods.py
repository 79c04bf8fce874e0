"""The chmods the set-id filter hands over (`sysfilter.py`): done on the container's own files only.

A `chmod`, `fchmod`, `fchmodat` or `fchmodat2` asking for a set-uid or set-gid bit stops in the
kernel until this guard answers. The guard finds the file the caller named, through the
caller's /proc (its cwd, its descriptors, its memory for the path) and through no magic link:
/proc/self/fd/N would name the guard's own descriptor, not the caller's. On the container's own
filesystem and /tmp it makes the change itself, on the very file it checked, and answers with
the result: the call never goes on to the kernel after the check, so a path or a descriptor
swapped in between changes nothing. On any other mount (/app, a mount under it, the engine's
binds of /etc/hosts and the like: all of them host files) the answer is EPERM. The lookup and
the change are made with the caller's own file-system credentials (uid, gid, groups,
capabilities, on the guard's thread alone), so the kernel allows exactly what it would allow the
caller; the guard looks into the caller's /proc as the caller too, so a non-root user's own
set-gid file in /tmp works. Anything the guard cannot establish (the caller gone, its memory
unreadable, a caller whose ids or capabilities differ between its own sets) is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import queue
import stat
import sys
import threading
from collections.abc import Iterator

from . import sysfilter, watchers

AT_FDCWD, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH = -100, 0x100, 0x1000
OPENAT2, RESOLVE_NO_MAGICLINKS = 437, 0x02
NOTIF_RECV, NOTIF_SEND, NOTIF_ID_VALID = 0xC0502100, 0xC0182101, 0x40082102
CONTINUE = -1  # an answer: let the call go on to the kernel
PATH_MAX = 4096
CAP_V3 = 0x20080522
# Per-thread credential calls, made raw: glibc's setgroups changes every thread of the process.
SYSCALLS = {
    "x86_64": {"setgroups": 116, "setfsuid": 122, "setfsgid": 123, "capget": 125, "capset": 126},
    "aarch64": {"setgroups": 159, "setfsuid": 151, "setfsgid": 152, "capget": 90, "capset": 91},
}


class Data(ctypes.Structure):
    _fields_ = [("nr", ctypes.c_int), ("arch", ctypes.c_uint32), ("ip", ctypes.c_uint64), ("args", ctypes.c_uint64 * 6)]


class OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class Notif(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("pid", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("data", Data)]


class Resp(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("val", ctypes.c_int64), ("error", ctypes.c_int32), ("flags", ctypes.c_uint32)]


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def mount_id(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        for line in f:
            if line.startswith("mnt_id:"):
                return int(line.split()[1])
    raise OSError(errno.EPERM, "no mount id")


def mounts_at(points: tuple[str, ...]) -> set[int]:
    """The ids of the mounts on these mount points (/proc/self/mountinfo: id parent dev root point ...)."""
    with open("/proc/self/mountinfo") as f:
        return {int(fields[0]) for fields in (line.split() for line in f) if fields[4] in points}


def call_name(arch: int, nr: int) -> str | None:
    nr = nr & ~sysfilter.X32_BIT if arch == sysfilter.ARCH_X86_64 else nr
    return next(
        (
            n
            for n, (num, rule, _) in sysfilter.TABLES.get(arch, {}).items()
            if num == nr and rule in ("chmod", "watchers")
        ),
        None,
    )


class Caller:
    """Who asked: their credentials as the kernel checks them, and their memory."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        fields = {}
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields[key] = value.split()
        self.fsuid, self.fsgid = int(fields["Uid"][3]), int(fields["Gid"][3])
        self.groups = {int(g) for g in fields.get("Groups", [])}
        self.caps = int(fields["CapEff"][0], 16)

    def string(self, address: int) -> str:
        """A NUL-ended path from the caller's memory (read a piece at a time: it may end near a page's end)."""
        out = b""
        fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        try:
            while len(out) < PATH_MAX:
                piece = os.pread(fd, 256 - (address + len(out)) % 256, address + len(out))
                if not piece:
                    raise OSError(errno.EFAULT, "path unreadable")
                end = piece.find(b"\0")
                if end >= 0:
                    return os.fsdecode(out + piece[:end])
                out += piece
        finally:
            os.close(fd)
        raise OSError(errno.ENAMETOOLONG, "path too long")


class Guard:
    """Answers the handed-over chmods on a thread of its own, started before the filter exists (so
    that the changes it makes are not handed over to itself)."""

    def __init__(self, allowed: tuple[str, ...] = ("/", "/tmp")) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.allowed = mounts_at(allowed)  # fixed: nothing inside may mount (no CAP_SYS_ADMIN)
        self.listener: queue.Queue[int] = queue.Queue(1)
        self.thread = threading.Thread(target=self._serve, name="setid-guard", daemon=True)
        self.thread.start()

    def listen(self, fd: int) -> None:
        self.listener.put(fd)

    def _serve(self) -> None:
        fd = self.listener.get()
        self.own = (self._caps(), os.getgroups(), os.getegid(), os.geteuid())  # this thread's, put back after each call
        self.broken = False
        while True:
            notif = Notif()
            if self.libc.ioctl(fd, NOTIF_RECV, ctypes.byref(notif)) != 0:
                if ctypes.get_errno() in (errno.EINTR, errno.ENOENT):
                    continue  # interrupted, or the caller died before we got it
                print(f"sandshell-agent: the set-id guard stopped: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
                return
            try:
                err = self.answer(fd, notif)
            except OSError as e:
                err = e.errno or errno.EPERM
            except Exception:  # never leave a caller hanging in the kernel
                err = errno.EPERM
            # CONTINUE: the kernel makes the call itself (SECCOMP_USER_NOTIF_FLAG_CONTINUE)
            resp = Resp(notif.id, 0, 0, 1) if err == CONTINUE else Resp(notif.id, 0, -err if err else 0, 0)
            if self.libc.ioctl(fd, NOTIF_SEND, ctypes.byref(resp)) != 0 and err == CONTINUE:  # (ENOENT: gone)
                self.libc.ioctl(fd, NOTIF_SEND, ctypes.byref(Resp(notif.id, 0, -errno.EMFILE, 0)))  # (before 5.5)

    def answer(self, listener: int, n: Notif) -> int:
        """The errno for this call (0: done)."""
        name = call_name(n.data.arch, n.data.nr)
        if name is None or self.broken:
            return errno.EPERM
        if sysfilter.TABLES[n.data.arch][name][1] == "watchers":  # (nothing to look up: the kernel's, or refused)
            return CONTINUE if watchers.allowed(n.pid) else errno.EMFILE
        caller = Caller(n.pid)
        # All of it as the caller: its /proc is then open to the guard whatever its uid (the kernel
        # checks a reader's file-system ids), and the lookup and the change are what it may do.
        with self.acting_as(caller):
            return self._answer(listener, n, name, caller)

    def _answer(self, listener: int, n: Notif, name: str, caller: Caller) -> int:
        args, pid = n.data.args, n.pid
        mode = args[sysfilter.TABLES[n.data.arch][name][2][0]] & 0o7777
        path, flags = "", 0
        if name == "fchmod":
            start = os.open(f"/proc/{pid}/fd/{_int32(args[0])}", os.O_PATH | os.O_CLOEXEC)
        else:
            dirfd = AT_FDCWD if name == "chmod" else _int32(args[0])
            flags = _int32(args[3]) if name == "fchmodat2" else 0
            path = caller.string(args[0 if name == "chmod" else 1])
            if not path and not flags & AT_EMPTY_PATH:
                return errno.ENOENT
            base = f"/proc/{pid}/cwd" if dirfd == AT_FDCWD else f"/proc/{pid}/fd/{dirfd}"
            start = os.open(base, os.O_PATH | os.O_CLOEXEC | (os.O_DIRECTORY if path else 0))
        try:
            # everything read from /proc/PID is the caller's only if PID is still the caller
            if self.libc.ioctl(listener, NOTIF_ID_VALID, ctypes.byref(ctypes.c_uint64(n.id))) != 0:
                return errno.ENOENT
            if not path:
                return self.change(start, mode)
            nofollow = os.O_NOFOLLOW if flags & AT_SYMLINK_NOFOLLOW else 0
            target = self.lookup(start, path, os.O_PATH | os.O_CLOEXEC | nofollow)
            try:
                return self.change(target, mode)
            finally:
                os.close(target)
        finally:
            os.close(start)

    def lookup(self, dirfd: int, path: str, flags: int) -> int:
        """Open `path` as the caller named it, through no magic link: /proc/self/fd/3 would be the
        guard's own descriptor here, not the caller's (a way to chmod the agent's files)."""
        how = OpenHow(flags, 0, RESOLVE_NO_MAGICLINKS)
        fd = self.libc.syscall(OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            raise OSError(ctypes.get_errno(), "lookup failed")
        return int(fd)

    def change(self, fd: int, mode: int) -> int:
        if mount_id(fd) not in self.allowed:
            return errno.EPERM  # a host file (the workspace above all): a set-id file there is one on the host
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            return errno.EOPNOTSUPP
        os.chmod(f"/proc/self/fd/{fd}", mode)  # as the caller: the kernel's own owner and group rules
        return 0

    def _raw(self, name: str, *args: object) -> int:
        return int(self.libc.syscall(SYSCALLS[platform.machine()][name], *args))

    def _caps(self, data: ctypes.Array[CapData] | None = None) -> ctypes.Array[CapData]:
        header, out = CapHeader(CAP_V3, 0), (CapData * 2)()
        if self._raw("capset" if data else "capget", ctypes.byref(header), data or out) != 0:
            raise OSError(ctypes.get_errno(), "capabilities")
        return data or out

    def _set_ids(self, groups: list[int], fsgid: int, fsuid: int) -> None:
        if sorted(groups) != sorted(os.getgroups()):
            array = (ctypes.c_uint32 * max(1, len(groups)))(*groups)
            if self._raw("setgroups", len(groups), array) != 0:
                raise OSError(ctypes.get_errno(), "setgroups")
        for name, want in (("setfsgid", fsgid), ("setfsuid", fsuid)):
            self._raw(name, want)
            if self._raw(name, 0xFFFFFFFF) != want:  # an invalid id changes nothing and says the current one
                raise OSError(errno.EPERM, name)

    @contextlib.contextmanager
    def acting_as(self, caller: Caller) -> Iterator[None]:
        """This thread's file-system credentials made the caller's, and put back after."""
        mine, groups, gid, uid = self.own
        try:
            self._set_ids(sorted(caller.groups), caller.fsgid, caller.fsuid)
            want = (CapData * 2)(*mine)
            for i in range(2):
                want[i].effective = (caller.caps >> (32 * i)) & mine[i].permitted
            self._caps(want)
            yield
        finally:
            try:
                self._caps(mine)  # first: setting the ids back needs CAP_SETUID and CAP_SETGID again
                self._set_ids(groups, gid, uid)
            except OSError:
                self.broken = True  # credentials in an unknown state: refuse everything from now on
                raise
