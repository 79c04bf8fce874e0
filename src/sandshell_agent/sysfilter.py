"""The agent's seccomp filter, on itself and all it starts: no set-id file or device node in the
workspace, and nothing done to another process's limits or scheduling (the agent's, above all).

Docker cannot mount a read-write bind `nosuid,nodev` (docs/security.md), and a set-uid file the
model leaves in /app is one on the host too: owned by root when the host user is root, a way in
for any host user who can reach the folder. So the bits never get there. The kernel itself
refuses (EPERM) a file created with a set-uid or set-gid mode (`open`, `openat`, `creat`,
`mknod`), every `mknod` of a character or block device, and every `renameat2` that would leave
a whiteout (a character device) behind. It hands every `chmod`, `fchmod`, `fchmodat` and
`fchmodat2` asking for such a bit to the agent (`chmods.py`), which makes the change for the
caller on the container's own filesystem and /tmp only, and refuses it on any other mount (/app
and whatever is mounted under it, the engine's binds of /etc/hosts and the like): `apt-get
install` unpacks set-uid programs with `fchmod`, and keeps working. `openat2` (its mode sits in
a struct a filter cannot read) and io_uring (which opens files on the kernel's side) answer
ENOSYS, so programs fall back to `openat`. The filter is stacked on the engine's own profile,
takes nothing away from it, and no process under it can remove it. 32-bit ARM programs on an
arm64 host get ENOSYS for everything (their system calls are not in the table).

The program is classic BPF over `struct seccomp_data` (nr, arch, ip, args[6]), built here rather
than with libseccomp's bindings, which a base image pulled from a registry may lack.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import platform
import struct
from collections.abc import Callable

SETID = 0o6000  # S_ISUID | S_ISGID
RENAME_WHITEOUT = 4
S_IFMT, S_IFCHR, S_IFBLK = 0o170000, 0o020000, 0o060000
CREATES = 0o100 | 0o20000000  # O_CREAT | __O_TMPFILE (the same on x86 and arm64)
FALLOC_FREES = 0x02 | 0x08  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_COLLAPSE_RANGE: modes that only free blocks

ARCH_X86_64, ARCH_I386, ARCH_AARCH64 = 0xC000003E, 0x40000003, 0xC00000B7
X32_BIT = 0x40000000  # x32 system calls are x86_64's numbers with this bit set

# name: (rule, argument indexes, its number on x86_64, i386, arm64; None: no such call there). Rules:
# "chmod" (args[i] is the new mode: a set-id bit goes to the agent), "mode" (args[i] is the mode of
# a file created: refused), "create" (args[i] flags, args[j] mode: refused when the call creates),
# "node" (a mknod mode), "whiteout" (renameat2's flags: RENAME_WHITEOUT leaves a character device
# 0:0 behind, and the kernel lets that be made without CAP_MKNOD). And, since the model shares the
# agent's ids (which is all the kernel asks to renice it or lower its limits: `prlimit --pid 1
# --nofile=12` killed it): "self" (args[i] a pid: only 0, the caller), "prlimit" (args[i] the pid:
# 0, or args[j], the new limit, NULL), "priority" (args: (which, who), where `which` must be the
# caller's own kind, PRIO_PROCESS or IOPRIO_WHO_PROCESS, and `who` 0). "allocate" (args[i] fallocate's
# mode: EOPNOTSUPP unless it only frees blocks; the disk watchdog looks every 50 ms, and one call took
# 40 MB in 0.1 ms: 16 GB went by unseen against a 50 MB limit). "watchers": every call to the guard
# (inotify instances are the whole machine's root's: `watchers.py`).
CALLS: dict[str, tuple[str, tuple[int, ...], int | None, int | None, int | None]] = {
    "open": ("create", (1, 2), 2, 5, None),
    "creat": ("mode", (1,), 85, 8, None),
    "openat": ("create", (2, 3), 257, 295, 56),
    "mknod": ("node", (1,), 133, 14, None),
    "mknodat": ("node", (2,), 259, 297, 33),
    "renameat2": ("whiteout", (4,), 316, 353, 276),
    "chmod": ("chmod", (1,), 90, 15, None),
    "fchmod": ("chmod", (1,), 91, 94, 52),
    "fchmodat": ("chmod", (2,), 268, 306, 53),
    "fchmodat2": ("chmod", (2,), 452, 452, 452),
    "setpriority": ("priority", (0, 0), 141, 97, 140),  # PRIO_PROCESS, self
    "ioprio_set": ("priority", (1, 0), 251, 289, 30),  # IOPRIO_WHO_PROCESS, self
    "sched_setparam": ("self", (0,), 142, 154, 118),
    "sched_setscheduler": ("self", (0,), 144, 156, 119),
    "sched_setattr": ("self", (0,), 314, 351, 274),
    "sched_setaffinity": ("self", (0,), 203, 241, 122),
    "prlimit64": ("prlimit", (0, 2), 302, 340, 261),
    "fallocate": ("allocate", (1,), 285, 324, 47),
    "inotify_init": ("watchers", (), 253, 291, None),
    "inotify_init1": ("watchers", (), 294, 332, 26),
}
ARCHES = (ARCH_X86_64, ARCH_I386, ARCH_AARCH64)  # the order of the numbers above
# Per architecture: name -> (number, rule, argument indexes), for the program and for the guard.
TABLES: dict[int, dict[str, tuple[int, str, tuple[int, ...]]]] = {arch: {} for arch in ARCHES}
for _name, (_rule, _args, *_numbers) in CALLS.items():
    for _arch, _nr in zip(ARCHES, _numbers, strict=True):
        if _nr is not None:
            TABLES[_arch][_name] = (_nr, _rule, _args)
NOSYS = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "openat2": 437}
NATIVE = {"x86_64": (ARCH_X86_64, ARCH_I386), "aarch64": (ARCH_AARCH64,)}

# Classic BPF opcodes and seccomp's return values.
LD_ABS, JEQ, JSET, AND, RET = 0x20, 0x15, 0x45, 0x54, 0x06
ALLOW, ERRNO, USER_NOTIF = 0x7FFF0000, 0x00050000, 0x7FC00000
PR_SET_NO_NEW_PRIVS, SECCOMP_SET_MODE_FILTER, FLAG_NEW_LISTENER = 38, 1, 8
SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277}


class Program:
    """A tiny assembler: jumps name labels, resolved to the 8-bit forward offsets BPF wants."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def arg(self, i: int) -> None:
        self.op(LD_ABS, 16 + 8 * i)  # the low 32 bits of args[i] (little-endian)

    def assemble(self) -> bytes:
        out = b""
        for pc, (code, jt, jf, k) in enumerate(self.code):
            offsets = [self.labels[j] - pc - 1 if isinstance(j, str) else j for j in (jt, jf)]
            if not all(0 <= o < 256 for o in offsets):
                raise ValueError("a jump out of BPF's reach")
            out += struct.pack("<HBBI", code, offsets[0], offsets[1], k)
        return out


def program(machine: str | None = None) -> bytes:
    """The filter for this machine's architectures; ValueError for one it does not know."""
    arches = NATIVE.get(machine or platform.machine())
    if arches is None:
        raise ValueError(f"no set-id filter for the {machine or platform.machine()} architecture")
    p = Program()
    for arch in arches:  # one block each, with its own exits (BPF jumps reach 255 instructions ahead)
        p.op(LD_ABS, 4)  # arch
        p.op(JEQ, arch, 0, f"not{arch}")
        _block(p, arch, functools.partial("{}.{}".format, arch))
        p.label(f"not{arch}")
    p.op(RET, ERRNO | errno.ENOSYS)  # a foreign ABI the table does not cover: nothing runs
    return p.assemble()


def _block(p: Program, arch: int, to: Callable[[str], str]) -> None:
    p.op(LD_ABS, 0)  # nr
    if arch == ARCH_X86_64:
        p.op(AND, 0xFFFFFFFF & ~X32_BIT)
    for nr in NOSYS.values():
        p.op(JEQ, nr, to("nosys"), 0)
    for name, (nr, _, _) in TABLES[arch].items():
        p.op(JEQ, nr, to(name), 0)
    p.op(RET, ALLOW)
    for name, (_, rule, args) in TABLES[arch].items():
        p.label(to(name))
        if rule == "watchers":  # each to the guard, which counts the instances held (watchers.py)
            p.op(RET, USER_NOTIF)
        elif rule == "whiteout":
            p.arg(args[0])
            p.op(JSET, RENAME_WHITEOUT, to("deny"), to("allow"))
        elif rule == "self":  # a process's own scheduling, never another's (the agent's, above all)
            p.arg(args[0])
            p.op(JEQ, 0, to("allow"), to("deny"))
        elif rule == "prlimit":  # reading anyone's limits, setting only one's own
            pid, limit = args
            p.arg(pid)
            p.op(JEQ, 0, to("allow"), 0)
            p.arg(limit)
            p.op(JEQ, 0, 0, to("deny"))
            p.op(LD_ABS, 16 + 8 * limit + 4)  # the pointer's high half
            p.op(JEQ, 0, to("allow"), to("deny"))
        elif rule == "allocate":  # blocks in one call, gigabytes a millisecond: EOPNOTSUPP (glibc's
            p.arg(args[0])  # posix_fallocate then writes a byte a block, which the watchdog sees);
            p.op(JSET, FALLOC_FREES, to("allow"), to("unsupported"))  # punching holes stays
        elif rule == "priority":  # which == the caller's own kind, who == 0: only the caller itself
            which, _ = args
            p.arg(0)
            p.op(JEQ, which, 0, to("deny"))
            p.arg(1)
            p.op(JEQ, 0, to("allow"), to("deny"))
        else:
            if rule == "create":
                p.arg(args[0])
                p.op(JSET, CREATES, 0, to("allow"))
            p.arg(args[-1])
            p.op(JSET, SETID, to("notify") if rule == "chmod" else to("deny"), 0)
            if rule == "node":
                p.op(AND, S_IFMT)
                p.op(JEQ, S_IFCHR, to("deny"), 0)
                p.op(JEQ, S_IFBLK, to("deny"), 0)
            p.op(RET, ALLOW)
    exits = [("allow", ALLOW), ("deny", ERRNO | errno.EPERM), ("notify", USER_NOTIF)]
    exits.append(("unsupported", ERRNO | errno.EOPNOTSUPP))
    for exit, value in exits:
        p.label(to(exit))
        p.op(RET, value)
    p.label(to("nosys"))
    p.op(RET, ERRNO | errno.ENOSYS)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> int:
    """Put the filter on this thread, and so on every process it starts; return the listener the
    handed-over chmods arrive on (`chmods.Guard`). OSError if the kernel refuses: the caller stops,
    as a sandbox without the filter could leave the host a set-uid file."""
    code = program()
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    nr = SECCOMP_SYSCALL[platform.machine()]
    fd = libc.syscall(nr, SECCOMP_SET_MODE_FILTER, FLAG_NEW_LISTENER, ctypes.byref(prog))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "could not install the set-id filter (seccomp)")
    return int(fd)
