"""No set-id files in the workspace, no device nodes: a seccomp filter on the agent and all it starts.

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

ARCH_X86_64, ARCH_I386, ARCH_AARCH64 = 0xC000003E, 0x40000003, 0xC00000B7
X32_BIT = 0x40000000  # x32 system calls are x86_64's numbers with this bit set

# Per architecture: name -> (number, rule, argument indexes). Rules: "chmod" (args[i] is the new
# mode: a set-id bit goes to the agent), "mode" (args[i] is the mode of a file created: refused),
# "create" (args[i] flags, args[j] mode: refused when the call creates), "node" (a mknod mode),
# "whiteout" (renameat2's flags: RENAME_WHITEOUT leaves a character device 0:0 behind, and the
# kernel lets that be made without CAP_MKNOD). And, since the model shares the agent's ids (which
# is all the kernel asks to renice it or lower its limits: `prlimit --pid 1 --nofile=12` killed
# it): "self" (args[i] a pid: only 0, the caller), "prlimit" (pid 0, or no new limit), "priority"
# (which == the given constant, who == 0: only the caller itself).
TABLES: dict[int, dict[str, tuple[int, str, tuple[int, ...]]]] = {
    ARCH_X86_64: {
        "open": (2, "create", (1, 2)),
        "creat": (85, "mode", (1,)),
        "chmod": (90, "chmod", (1,)),
        "fchmod": (91, "chmod", (1,)),
        "mknod": (133, "node", (1,)),
        "openat": (257, "create", (2, 3)),
        "mknodat": (259, "node", (2,)),
        "fchmodat": (268, "chmod", (2,)),
        "fchmodat2": (452, "chmod", (2,)),
        "renameat2": (316, "whiteout", (4,)),
        "setpriority": (141, "priority", (0,)),
        "sched_setparam": (142, "self", (0,)),
        "sched_setscheduler": (144, "self", (0,)),
        "ioprio_set": (251, "priority", (1,)),
        "prlimit64": (302, "prlimit", (0, 2)),
        "sched_setattr": (314, "self", (0,)),
        "sched_setaffinity": (203, "self", (0,)),
    },
    ARCH_I386: {
        "creat": (8, "mode", (1,)),
        "open": (5, "create", (1, 2)),
        "mknod": (14, "node", (1,)),
        "chmod": (15, "chmod", (1,)),
        "fchmod": (94, "chmod", (1,)),
        "openat": (295, "create", (2, 3)),
        "mknodat": (297, "node", (2,)),
        "fchmodat": (306, "chmod", (2,)),
        "fchmodat2": (452, "chmod", (2,)),
        "renameat2": (353, "whiteout", (4,)),
        "setpriority": (97, "priority", (0,)),
        "sched_setparam": (154, "self", (0,)),
        "sched_setscheduler": (156, "self", (0,)),
        "ioprio_set": (289, "priority", (1,)),
        "prlimit64": (340, "prlimit", (0, 2)),
        "sched_setattr": (351, "self", (0,)),
        "sched_setaffinity": (241, "self", (0,)),
    },
    ARCH_AARCH64: {
        "mknodat": (33, "node", (2,)),
        "fchmod": (52, "chmod", (1,)),
        "fchmodat": (53, "chmod", (2,)),
        "openat": (56, "create", (2, 3)),
        "renameat2": (276, "whiteout", (4,)),
        "ioprio_set": (30, "priority", (1,)),
        "sched_setparam": (118, "self", (0,)),
        "sched_setscheduler": (119, "self", (0,)),
        "setpriority": (140, "priority", (0,)),
        "prlimit64": (261, "prlimit", (0, 2)),
        "sched_setattr": (274, "self", (0,)),
        "sched_setaffinity": (122, "self", (0,)),
        "fchmodat2": (452, "chmod", (2,)),
    },
}
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
        if rule == "whiteout":
            p.arg(args[0])
            p.op(JSET, RENAME_WHITEOUT, to("deny"), to("allow"))
        elif rule == "self":  # a process's own scheduling, never another's (the agent's, above all)
            p.arg(args[0])
            p.op(JEQ, 0, to("allow"), to("deny"))
        elif rule == "prlimit":  # reading anyone's limits, setting only one's own
            p.arg(0)
            p.op(JEQ, 0, to("allow"), 0)
            p.arg(2)
            p.op(JEQ, 0, 0, to("deny"))
            p.op(LD_ABS, 16 + 8 * 2 + 4)  # the pointer's high half
            p.op(JEQ, 0, to("allow"), to("deny"))
        elif rule == "priority":  # (which, who): only the caller itself
            p.arg(0)
            p.op(JEQ, args[0], 0, to("deny"))
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
    for exit, value in (("allow", ALLOW), ("deny", ERRNO | errno.EPERM), ("notify", USER_NOTIF)):
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
