"""The chmods the set-id filter hands over (`setid.py`): refused in /app, done elsewhere.

A `chmod`, `fchmod`, `fchmodat` or `fchmodat2` asking for a set-uid or set-gid bit stops in the
kernel until this guard answers. The guard finds the file the caller named (through the caller's
/proc: its cwd, its descriptors, its memory for the path; through no magic link, as
/proc/self/fd/N would name the guard's own descriptor, not the caller's), and if that file is reached through
the /app mount the answer is EPERM. Anywhere else the guard makes the change itself, on the very
file it checked, and answers with the result: the call is never let through to the kernel after
the check, so swapping a path or a descriptor between the two changes nothing. It does for the
caller only what the caller could do: the file's owner, or a caller holding CAP_FOWNER; set-gid
on a file of another group needs CAP_FSETID, as the kernel's own rule, or it is left out.
Anything the guard cannot establish (the caller gone, its memory unreadable) is EPERM.
"""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import stat
import sys
import threading

from . import setid

AT_FDCWD, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH = -100, 0x100, 0x1000
OPENAT2, RESOLVE_NO_MAGICLINKS = 437, 0x02
NOTIF_RECV, NOTIF_SEND, NOTIF_ID_VALID = 0xC0502100, 0xC0182101, 0x40082102
CAP_FOWNER, CAP_FSETID = 3, 4
PATH_MAX = 4096


class Data(ctypes.Structure):
    _fields_ = [("nr", ctypes.c_int), ("arch", ctypes.c_uint32), ("ip", ctypes.c_uint64), ("args", ctypes.c_uint64 * 6)]


class OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


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


def call_name(arch: int, nr: int) -> str | None:
    nr = nr & ~setid.X32_BIT if arch == setid.ARCH_X86_64 else nr
    return next((n for n, (num, rule, _) in setid.TABLES.get(arch, {}).items() if num == nr and rule == "chmod"), None)


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

    def can(self, cap: int) -> bool:
        return bool(self.caps >> cap & 1)

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

    def __init__(self, protected: str = "/app") -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.protected: int | None = None
        if os.path.isdir(protected):
            fd = os.open(protected, os.O_PATH | os.O_CLOEXEC)
            try:
                self.protected = mount_id(fd)
            finally:
                os.close(fd)
        self.listener: queue.Queue[int] = queue.Queue(1)
        self.thread = threading.Thread(target=self._serve, name="setid-guard", daemon=True)
        self.thread.start()

    def listen(self, fd: int) -> None:
        self.listener.put(fd)

    def _serve(self) -> None:
        fd = self.listener.get()
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
            resp = Resp(notif.id, 0, -err if err else 0, 0)
            self.libc.ioctl(fd, NOTIF_SEND, ctypes.byref(resp))  # ENOENT: the caller is gone

    def answer(self, listener: int, n: Notif) -> int:
        """The errno for this call (0: done)."""
        name = call_name(n.data.arch, n.data.nr)
        if name is None:
            return errno.EPERM
        args = n.data.args
        mode = args[setid.TABLES[n.data.arch][name][2][0]] & 0o7777
        pid = n.pid
        if name == "fchmod":
            target = os.open(f"/proc/{pid}/fd/{_int32(args[0])}", os.O_PATH | os.O_CLOEXEC)
        else:
            path_at = 0 if name == "chmod" else 1
            dirfd = AT_FDCWD if name == "chmod" else _int32(args[0])
            flags = _int32(args[3]) if name == "fchmodat2" else 0
            path = Caller(pid).string(args[path_at])
            base = f"/proc/{pid}/cwd" if dirfd == AT_FDCWD else f"/proc/{pid}/fd/{dirfd}"
            if not path and flags & AT_EMPTY_PATH:
                target = os.open(base, os.O_PATH | os.O_CLOEXEC)
            elif not path:
                return errno.ENOENT
            else:
                bfd = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    nofollow = os.O_NOFOLLOW if flags & AT_SYMLINK_NOFOLLOW else 0
                    target = self.lookup(bfd, path, os.O_PATH | os.O_CLOEXEC | nofollow)
                finally:
                    os.close(bfd)
        try:
            caller = Caller(pid)  # read after the file: the pid is checked to still be the caller's below
            if self.libc.ioctl(listener, NOTIF_ID_VALID, ctypes.byref(ctypes.c_uint64(n.id))) != 0:
                return errno.ENOENT
            return self.change(target, mode, caller)
        finally:
            os.close(target)

    def lookup(self, dirfd: int, path: str, flags: int) -> int:
        """Open `path` as the caller named it, through no magic link: /proc/self/fd/3 would be the
        guard's own descriptor here, not the caller's (a way to chmod the agent's files)."""
        how = OpenHow(flags, 0, RESOLVE_NO_MAGICLINKS)
        fd = self.libc.syscall(OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            raise OSError(ctypes.get_errno(), "lookup failed")
        return int(fd)

    def change(self, fd: int, mode: int, caller: Caller) -> int:
        st = os.fstat(fd)
        if self.protected is not None and mount_id(fd) == self.protected:
            return errno.EPERM  # the workspace: a set-id file there would be one on the host
        if stat.S_ISLNK(st.st_mode):
            return errno.EOPNOTSUPP
        if caller.fsuid != st.st_uid and not caller.can(CAP_FOWNER):
            return errno.EPERM
        if not caller.can(CAP_FSETID) and st.st_gid != caller.fsgid and st.st_gid not in caller.groups:
            mode &= ~stat.S_ISGID
        os.chmod(f"/proc/self/fd/{fd}", mode)
        return 0
