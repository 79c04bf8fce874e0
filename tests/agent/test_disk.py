"""Disk limits, attacked from inside: one huge file, `yes >`, many small files, /tmp, the container's own
files, and a writer left in the background. Each must stop within seconds, name its limit, cost the
host at most the limit plus a margin, and leave a session whose next command works."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandshell.sandbox.sandbox import Sandbox
from sandshell_agent import inotify
from sandshell_agent.diskguard import PACE_HALF, Area, DiskGuard, _rest
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]

LIMIT = 50_000_000  # every limit, small so the tests are quick
MARGIN = 40_000_000  # what may get past a limit before it is noticed, plus noise from other writers on the host
# ... for a steady writer, which the watchdog measures the more often the nearer it gets to a limit
# (`Area.soon`): at ~700 MB/s beside a slow look, up to 7 MB past paced, 38 MB if measured every
# 50 ms whatever the pace (bench/slow_look_bench.py --fast, 20 runs each). A writer at 1.4-2 GB/s
# would cross the limit within the turn before its first measure (up to 50 MB past), but a change
# the kernel reports wakes the measures of a quiet area: 0-7 MB past (20 runs).
PACED = 20_000_000
QUICK = 15.0  # seconds a command may take to be stopped (writing 50 MB included)


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Path]]:
    ws = tmp_path_factory.mktemp("disk") / "workspace"
    ws.mkdir()
    s = _base_settings(
        sandbox={"workspace_limit": LIMIT, "scratch_limit": LIMIT, "file_limit": 1024**3, "exit_timeout": 60.0}
    )
    with Sandbox(workspace=ws, settings=s.sandbox) as sb:
        yield sb, ws


@pytest.fixture(scope="module")
def file_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Path]]:
    """The file limit alone: the workspace and scratch limits are twice as large, so one file at its
    limit never trips them too (with all three equal, the watchdog could stop the next command)."""
    ws = tmp_path_factory.mktemp("file") / "workspace"
    ws.mkdir()
    s = _base_settings(
        sandbox={"workspace_limit": 2 * LIMIT, "scratch_limit": 2 * LIMIT, "file_limit": LIMIT, "exit_timeout": 60.0}
    )
    with Sandbox(workspace=ws, settings=s.sandbox) as sb:
        yield sb, ws


def free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def used(folder: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in folder.rglob("*"))


def _read(fdinfo: Path) -> str:
    """A descriptor's fdinfo, or nothing if the agent closed it meanwhile (a listing of /proc, say)."""
    try:
        return fdinfo.read_text()
    except FileNotFoundError:
        return ""


def stopped_quickly(
    sb: Sandbox, ws: Path, command: str, setting: str, whole_line: bool = True, margin: int = MARGIN
) -> str:
    """Run a command that writes too much; check it ended fast, said why, and cost the host little."""
    before = free(ws)
    start = time.monotonic()
    r = sb.execute(command, timeout=60)
    took = time.monotonic() - start
    assert took < QUICK, f"took {took:.1f}s: {r}"
    assert r.notice and setting in r.notice and "47.7 MiB" in r.notice, r
    if whole_line:  # a file-size hit ends only the writing program, as any failing program would
        assert "after" not in r.output, "the command line ran on after the limit stopped it"
    assert before - free(ws) <= LIMIT + margin, f"the host lost {(before - free(ws)) / 1e6:.0f} MB: {r.notice}"
    assert sb.execute("echo next").output == "next\n"  # the session goes on
    return r.notice


def test_one_huge_file_stops_at_the_file_limit(file_box: tuple[Sandbox, Path]) -> None:
    sb, ws = file_box
    cmd = "dd if=/dev/zero of=/app/big bs=1M count=2000"
    notice = stopped_quickly(sb, ws, cmd, "SANDSHELL_FILE_LIMIT", whole_line=False)
    assert "file reached the size limit" in notice
    assert (ws / "big").stat().st_size <= LIMIT  # kept, not deleted: only the write stopped
    sb.execute("rm -f /app/big")


def test_the_file_limit_notice_comes_with_the_error_not_with_the_words(file_box: tuple[Sandbox, Path]) -> None:
    sb, _ = file_box
    said = sb.execute("echo File too large; echo 'EFBIG (File too large) is errno 27'")
    assert "size limit" not in (said.notice or ""), said
    # Python ignores SIGXFSZ: its write fails with EFBIG, and it says so
    r = sb.execute("python3 -c \"open('/app/p', 'wb').write(b'x' * 60_000_000)\"", timeout=60)
    assert r.return_code == 1 and "File too large" in r.output, r
    assert "file reached the size limit" in (r.notice or ""), r
    sb.execute("rm -f /app/p")


def test_yes_into_a_file_stops_at_the_file_limit(file_box: tuple[Sandbox, Path]) -> None:
    sb, ws = file_box
    stopped_quickly(sb, ws, "yes > /app/y", "SANDSHELL_FILE_LIMIT", whole_line=False)
    sb.execute("rm -f /app/y")


def test_many_small_files_stop_at_the_workspace_limit(box: tuple[Sandbox, Path]) -> None:
    sb, ws = box
    (ws / "precious").write_text("kept")
    cmd = "mkdir -p /app/many; for i in $(seq 1 1000); do head -c 1000000 /dev/zero > /app/many/f$i; done; echo after"
    notice = stopped_quickly(sb, ws, cmd, "SANDSHELL_WORKSPACE_LIMIT", margin=PACED)
    assert "workspace /app grew to" in notice
    assert used(ws) <= LIMIT + MARGIN
    assert (ws / "precious").read_text() == "kept"  # nothing that was there is lost
    # Over the limit, the model can still look and clean up; then writing works again.
    assert sb.execute("ls /app/many | wc -l").return_code == 0
    sb.execute("rm -rf /app/many")
    r = sb.execute("head -c 1000000 /dev/zero > /app/small && echo ok")
    assert r.output == "ok\n" and not r.notice, r
    sb.execute("rm -f /app/small")


def test_tmp_is_a_sized_tmpfs(box: tuple[Sandbox, Path]) -> None:
    sb, _ = box
    fill = "for i in $(seq 1 100); do head -c 1000000 /dev/zero > /tmp/f$i || break; done"
    r = sb.execute(f"{fill} 2>&1 | tail -1; df -B1 --output=size /tmp | tail -1")
    assert "No space left on device" in r.output, r
    assert int(r.output.split()[-1]) <= LIMIT + 64 * 1024  # the kernel rounds a tmpfs up to whole pages
    sb.execute("rm -f /tmp/f*")


def test_the_containers_own_files_are_bounded(box: tuple[Sandbox, Path]) -> None:
    sb, ws = box
    cmd = "mkdir -p /root/many; for i in $(seq 1 1000); do head -c 1000000 /dev/zero > /root/many/f$i; done; echo after"
    notice = stopped_quickly(sb, ws, cmd, "SANDSHELL_SCRATCH_LIMIT", margin=PACED)
    assert "outside /app and /tmp" in notice
    sb.execute("rm -rf /root/many")


def test_a_writer_left_in_the_background_is_stopped(box: tuple[Sandbox, Path]) -> None:
    sb, ws = box
    r = sb.execute(
        "(for i in $(seq 1 1000); do head -c 1000000 /dev/zero > /app/bg$i; sleep 0.02; done) >/dev/null 2>&1 &"
    )
    assert r.return_code == 0
    time.sleep(6)  # the model is thinking; the writer goes on alone
    assert used(ws) <= LIMIT + MARGIN
    after = sb.execute("true")  # the next command hears of it (bash may also report the killed job)
    assert after.notice and "SANDSHELL_WORKSPACE_LIMIT" in after.notice, after

    def count() -> int:
        return int(sb.execute("ls /app | grep -c '^bg'").output.split()[-1])

    before = count()
    time.sleep(1)
    assert count() == before  # it was stopped, not paused
    sb.execute("rm -f /app/bg*")


def test_the_watchdog_hears_of_changes_from_the_kernel(box: tuple[Sandbox, Path]) -> None:
    """Inside the sandbox (its seccomp filter, the engine's), the agent holds an inotify watch on each
    folder of the workspace: a quick measure then looks only where something changed."""
    sb, ws = box
    sb.execute("mkdir -p /app/w/a/b /app/w/c")
    folders = [ws / "w", ws / "w/a", ws / "w/a/b", ws / "w/c"]  # the same inodes on the host: a bind mount
    sb.container.reload()
    fdinfo = Path(f"/proc/{sb.container.attrs['State']['Pid']}/fdinfo")  # the agent is the container's PID 1

    def unwatched() -> list[Path]:
        lines = [line for f in fdinfo.iterdir() for line in _read(f).splitlines() if "inotify wd:" in line]
        return [p for p in folders if not any(f" ino:{p.stat().st_ino:x} " in line for line in lines)]

    deadline = time.monotonic() + 10
    while unwatched() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not unwatched(), unwatched()
    sb.execute("rm -rf /app/w")


def test_more_folders_than_its_share_of_watches_neither_exhaust_the_host_nor_hide_growth(
    box: tuple[Sandbox, Path],
) -> None:
    """Watches count against the host's root user: a workspace of 4,200 folders gets no more than the
    tree's share (at most 4,096), and a file growing in a folder past it (no event, no new mtime)
    still trips the limit, at the next full measure."""
    sb, ws = box
    assert sb.execute("mkdir -p /app/deep && cd /app/deep && mkdir $(seq 1 4200) && echo made").output == "made\n"
    sb.container.reload()
    fdinfo = Path(f"/proc/{sb.container.attrs['State']['Pid']}/fdinfo")
    app = f"{ws.stat().st_ino:x}"

    def workspace_watches() -> set[str]:
        """The inodes (hex) the workspace's inotify descriptor watches."""
        for f in fdinfo.iterdir():
            inodes = set(re.findall(r"inotify wd:\S+ ino:(\w+) ", _read(f)))
            if app in inodes:
                return inodes
        return set()

    share = inotify.share()
    deadline = time.monotonic() + 15
    while len(workspace_watches()) < min(share, 4200) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)  # a full measure more: it must not go past the share either
    watched = workspace_watches()
    assert len(watched) == min(share, 4200), (len(watched), share)
    unwatched = [d for d in range(1, 4201) if f"{(ws / 'deep' / str(d)).stat().st_ino:x}" not in watched]
    assert unwatched, "a folder past the share"
    # Slow enough that the limit is crossed well after a full measure's 2 s; it stops at one.
    grow = f"for i in $(seq 1 1000); do head -c 100000 /dev/zero >> /app/deep/{unwatched[0]}/f; sleep 0.01; done"
    stopped_quickly(sb, ws, f"{grow}; echo after", "SANDSHELL_WORKSPACE_LIMIT")
    sb.execute("rm -rf /app/deep")


# A process whose main thread ended (raw SYS_exit) while a worker writes shows no descriptor in its
# own /proc entry, only in its threads': the look through /proc must read those.
LEADER = """
import ctypes, os, platform, threading, time
def work():
    time.sleep(0.3)
    fds = []
    for i in range(40):
        fds.append(os.open(f"/app/lead{i}", os.O_RDWR | os.O_CREAT, 0o644))
        os.unlink(f"/app/lead{i}")
        os.write(fds[-1], b"x" * 2_000_000)
        time.sleep(0.25)
    time.sleep(5)
    os._exit(0)
threading.Thread(target=work).start()
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)  # exit: the main thread alone
"""
# ... and 64 small files mapped shared and writable by a process started first took every flush a look made.
DECOYS = """
import mmap, os, time
os.makedirs("/root/decoys", exist_ok=True)
maps = []
for i in range(100):
    fd = os.open(f"/root/decoys/d{i}", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4096)
    maps.append(mmap.mmap(fd, 4096))
    os.close(fd)
time.sleep(3600)
"""

MMAP_WRITER = """
import ctypes, mmap, os, sys, time
where = sys.argv[1] if len(sys.argv) > 1 else "/app/mm"
os.makedirs(where, exist_ok=True)
if sys.argv[2:] == ["gone"]:  # each file held by its mapping alone (Python's mmap would keep a descriptor)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    for i in range(30):
        fd = os.open(f"{where}/m{i}", os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, 4 << 20)
        at = libc.mmap(None, 4 << 20, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        assert at not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        os.close(fd)
        os.unlink(f"{where}/m{i}")
        ctypes.memset(at, 120, 4 << 20)
        time.sleep(0.5)
    time.sleep(5)
    sys.exit()
maps = []
for i in range(30):  # made and sized first, kept open: then the writes through the maps raise no event
    fd = os.open(f"{where}/m{i}", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4 << 20)
    maps.append(mmap.mmap(fd, 4 << 20))
time.sleep(0.5)
for m in maps:  # 8 MB/s: a full measure every 2-4 s under load stops it within the margin
    m[:] = b"x" * (4 << 20)
    time.sleep(0.5)
time.sleep(5)
"""


def test_a_writer_through_mmap_is_stopped_while_it_runs(box: tuple[Sandbox, Path]) -> None:
    """Writes through a shared mapping raise no inotify event: a command doing only that is found by
    the full measure made for every 2 s it runs, and stopped before it ends."""
    sb, ws = box
    sb.write_file("/tmp/mm.py", MMAP_WRITER)
    stopped_quickly(sb, ws, "python3 /tmp/mm.py; echo after", "SANDSHELL_WORKSPACE_LIMIT")
    sb.execute("rm -rf /app/mm /tmp/mm.py")


# Disk the areas' folders do not show, which the watchdog must still count.
HIDDEN = {
    "files under /run (the container's own layer, once skipped as a mount)": (
        "for i in 1 2 3 4 5 6; do head -c 20000000 /dev/zero > /run/big$i; sleep 0.2; done",
        "rm -f /run/big*",
    ),
    "folders' own blocks (60,000 empty folders)": (  # 4 KiB each, slowly enough for a margin of 40 MB under CI load
        "python3 -c 'import os, time\nfor i in range(60000): os.mkdir(f\"/app/d/{i}\"); i % 250 or time.sleep(0.05)'",
        "rm -rf /app/d",
    ),
    "the engine's binds of /etc/hosts and the like": (
        "cp /etc/hosts /etc/hostname /etc/resolv.conf /tmp/; for i in 1 2 3 4 5 6; do for f in /etc/hosts"
        " /etc/hostname /etc/resolv.conf; do head -c 4000000 /dev/zero >> $f; done; sleep 0.2; done",
        "for f in hosts hostname resolv.conf; do cat /tmp/$f > /etc/$f; done",
    ),
    # Written through shared mappings: no write(2), no inotify event, and on fuse-overlayfs no blocks until
    # the pages are written back: with full measures alone it ran its 20 s, 120 MB, with no notice.
    "the container's own files written through shared mappings": (
        "python3 /tmp/mm.py /root/mm",
        "rm -rf /root/mm",
    ),
    "a mapped file behind 100 others mapped first (the flushes' bound)": (
        "python3 /tmp/decoys.py & sleep 1; python3 /tmp/mm.py /root/mm",
        "rm -rf /root/mm /root/decoys",
    ),
    "deleted files held by a process whose main thread has ended": ("python3 /tmp/leader.py", "true"),
    # Measured by path, everything under the first folder past PATH_MAX counted nothing (241 MB).
    "files under a folder whose path is past PATH_MAX": (
        "(cd /app && n=$(printf 'd%.0s' $(seq 1 250)) && for i in $(seq 1 17); do mkdir $n && cd $n || exit; done;"
        " for i in $(seq 1 10); do head -c 20000000 /dev/zero > f$i; sleep 0.2; done)",
        "rm -rf /app/ddd*",
    ),
    "a deleted file only a mapping holds (no descriptor left)": (
        "python3 /tmp/mm.py /app/mm gone",
        "rm -rf /app/mm",
    ),
    # Two, each under the file limit, seen only through /proc (every 0.25 s of a command; with a full
    # measure alone, every 2 s or less often under load, this failed late in the suite): ~4 s of writing
    # left past the limit before the line ends.
    "files deleted while bash holds them open": (
        "exec 3>/app/gone3 4>/app/gone4; rm /app/gone*; for i in $(seq 1 40); do"
        " head -c 1000000 /dev/zero >&3; head -c 1000000 /dev/zero >&4; sleep 0.25; done",
        "exec 3>&- 4>&-",
    ),
}


@pytest.mark.parametrize("how", HIDDEN)
def test_disk_no_folder_shows_still_counts(box: tuple[Sandbox, Path], how: str) -> None:
    sb, ws = box
    command, cleanup = HIDDEN[how]
    sb.execute("mkdir -p /app/d")
    for name, script in (("mm", MMAP_WRITER), ("leader", LEADER), ("decoys", DECOYS)):
        sb.write_file(f"/tmp/{name}.py", script)
    try:
        stopped_quickly(sb, ws, f"{command}; echo after", "_LIMIT")
    finally:
        sb.execute(cleanup)


def fresh_box(tmp_path: Path) -> Sandbox:
    ws = tmp_path / "workspace"
    ws.mkdir()
    s = _base_settings(
        sandbox={"workspace_limit": LIMIT, "scratch_limit": LIMIT, "file_limit": 1024**3, "exit_timeout": 60.0}
    )
    return Sandbox(workspace=ws, settings=s.sandbox)


NEWLINE = "python3 /tmp/mm.py $'/root/new\\nline'"  # maps shows the newline as \012


def test_a_mapped_file_in_a_folder_whose_name_has_a_newline_still_counts(tmp_path: Path) -> None:
    with fresh_box(tmp_path) as sb:
        sb.write_file("/tmp/mm.py", MMAP_WRITER)
        stopped_quickly(sb, tmp_path / "workspace", f"{NEWLINE}; echo after", "SANDSHELL_SCRATCH_LIMIT")


@pytest.mark.xfail(
    strict=True,
    reason="known gap: after one mapped writer in /root was stopped and removed, a second one under a "
    "folder whose name has a newline wrote 120 MB past the 50 MB limit unnoticed (20 s); without the "
    "first, or with a plain folder name, it is stopped in 0.5-4 s",
)
def test_a_second_mapped_writer_under_a_newline_folder_is_stopped_too(tmp_path: Path) -> None:
    with fresh_box(tmp_path) as sb:
        sb.write_file("/tmp/mm.py", MMAP_WRITER)
        stopped_quickly(sb, tmp_path / "workspace", "python3 /tmp/mm.py /root/mm; echo after", "_LIMIT")
        sb.execute("rm -rf /root/mm")
        stopped_quickly(sb, tmp_path / "workspace", f"{NEWLINE}; echo after", "_LIMIT")


def test_deleting_the_images_own_files_frees_no_room(tmp_path: Path) -> None:
    """The image's files stay on the host in its layer whatever the container deletes: deleting them
    must not make room (114 MB of them deleted would let 115 MB go to /root past a 50 MB limit,
    with no notice)."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    s = _base_settings(
        sandbox={"workspace_limit": LIMIT, "scratch_limit": LIMIT, "file_limit": 1024**3, "exit_timeout": 60.0}
    )
    with Sandbox(workspace=ws, settings=s.sandbox) as sb:
        r = sb.execute("du -sm /usr/share | cut -f1; rm -rf /usr/share; echo x > /etc/os-release", timeout=60)
        assert int(r.output) >= 60 and not r.notice, r  # more than the file below
        writer = "for i in 1 2 3 4 5 6; do head -c 20000000 /dev/zero > /root/big$i; sleep 0.2; done; echo after"
        stopped_quickly(sb, ws, writer, "SANDSHELL_SCRATCH_LIMIT")


# Locked, the agent runs as the model's uid with no capability: a folder the model made unreadable
# and unsearchable would hide what was written in it (300 MB under a `chmod 0300` folder, 360 MB
# with /app itself made so, no notice).
HIDE = "chmod 0300 /app/m; chmod 0300 /app;"


@pytest.mark.parametrize(
    ("profile", "mode", "hide"), [("standard", "copy", ""), ("locked", "rw", ""), ("locked", "rw", HIDE)]
)
def test_the_workspace_limit_holds_in_other_modes_and_profiles(
    tmp_path: Path, profile: str, mode: str, hide: str
) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    if profile == "locked" and os.geteuid() == 0:
        os.chown(ws, 1000, 1000)  # locked runs as the workspace's owner
    s = _base_settings(
        sandbox={"workspace_limit": LIMIT, "scratch_limit": LIMIT, "profile": profile, "workspace_mode": mode}
    )
    with Sandbox(workspace=ws, settings=s.sandbox) as sb:
        cmd = f"mkdir -p /app/m; {hide} for i in $(seq 1 300); do head -c 1000000 /dev/zero > /app/m/f$i; done"
        cmd += "; echo after"
        r = sb.execute(cmd, timeout=60)
        assert r.notice and "SANDSHELL_WORKSPACE_LIMIT" in r.notice and "after" not in r.output, r
        # A trip the watchdog sees only after the command ended stops the next one (known, in the
        # notes): let a command take it before counting.
        time.sleep(1.5)
        sb.execute("true")
        n = int(sb.execute("ls /app/m | wc -l").output)
        assert n * 1_000_000 <= LIMIT + MARGIN


FALLOCATE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/app/fa", os.O_RDWR | os.O_CREAT)
os.write(fd, b"x" * 65536)
print(libc.fallocate(fd, 0, 0, 1 << 20), ctypes.get_errno() == errno.EOPNOTSUPP)
print(libc.fallocate(fd, 0x02 | 0x01, 0, 4096))  # PUNCH_HOLE | KEEP_SIZE: frees, allowed
os.posix_fallocate(fd, 0, 1 << 20)  # emulated by glibc: still works
print(os.fstat(fd).st_size)
"""


def test_gigabytes_a_call_are_refused(box: tuple[Sandbox, Path]) -> None:
    """One fallocate call takes 40 MB in ~0.1 ms: 400 of them would put 16 GB past a 50 MB limit,
    unseen (1,360 MB here with the filter's rule taken out). The filter answers EOPNOTSUPP
    and glibc writes a byte a block instead, still faster than the 50 ms look (52-94 MB lost here):
    a margin of its own."""
    sb, ws = box
    sb.execute("mkdir -p /app/d")
    many = "import os\nfor i in range(400): fd = os.open(f'/app/d/s{i}', os.O_WRONLY | os.O_CREAT); "
    many += "os.posix_fallocate(fd, 0, 40_000_000); os.close(fd)"
    sb.write_file("/tmp/many.py", many)
    try:
        stopped_quickly(sb, ws, "python3 /tmp/many.py; echo after", "SANDSHELL_WORKSPACE_LIMIT", margin=250_000_000)
    finally:
        sb.execute("rm -rf /app/d /tmp/many.py")


def test_fallocate_is_refused_but_posix_fallocate_and_punching_holes_work(box: tuple[Sandbox, Path]) -> None:
    sb, _ = box
    sb.write_file("/tmp/fa.py", FALLOCATE)
    r = sb.execute("python3 /tmp/fa.py; rm -f /app/fa /tmp/fa.py")
    assert r.output == f"-1 True\n0\n{1 << 20}\n", r


# Every look through /proc made as slow as its bounds allow. Looks made in the measuring thread
# would hold up its quick measures (a plain writer went 540-608 MB past): they have a thread of their own.
STALL = """
import os, time
for p in range(13):  # 13 processes of 4,000 descriptors: past the 50,000 a look reads, ~0.25 s a look
    if os.fork() == 0:
        fd = os.open("/etc/passwd", os.O_RDONLY)
        for _ in range(4000):
            os.dup(fd)
        while True:
            time.sleep(3600)
time.sleep(2)
print("up", flush=True)
"""


def test_a_measure_kept_waiting_counts_only_its_own_work() -> None:
    """The clocks are slowed by what a measure costs, not by how long it waited (for the interpreter's
    lock, held by a look through /proc; for the CPU): a measure timed by the wall clock, held up once,
    slowed its clock tenfold, the time a fast writer needs to get far past a limit."""

    class Held:
        def measure(self, full: bool = True) -> int:
            time.sleep(0.3)  # waiting, as behind a look that holds the lock
            sum(range(200_000))  # and a little work
            return 0

    area = Area.__new__(Area)
    area.tree, area.baseline, area.limit, area.threshold = Held(), 0, LIMIT, LIMIT  # type: ignore[assignment]
    took = DiskGuard.check(DiskGuard.__new__(DiskGuard), area)
    assert 0 < took < 0.1, f"a measure that waited 0.3 s counted as {took:.3f} s of work"


def test_an_area_is_measured_the_sooner_the_faster_it_nears_its_limit() -> None:
    """Half the time the area needs to reach its limit at its pace; a pause in the writing keeps the
    pace (halved every PACE_HALF s), as writers pause between files."""
    a = Area.__new__(Area)
    a.limit = a.threshold = 100_000_000
    a.used, a.measured_at, a.pace = 0, float("-inf"), 0.0
    a.measured(0, 10.0)
    assert a.soon() == float("inf")  # not growing: the watchdog's usual clock
    a.measured(35_000_000, 10.05)  # 700 MB/s: 65 MB to go
    assert a.soon() == pytest.approx(65 / 700 / 2)
    a.measured(80_000_000, 10.1)  # 900 MB/s: 20 MB to go
    assert a.soon() == pytest.approx(20 / 900 / 2)
    a.measured(80_000_000, 10.15)  # nothing written for 50 ms
    assert a.soon() == pytest.approx(20 / (900 * 0.5 ** (0.05 / PACE_HALF)) / 2)
    a.measured(80_000_000, 13.0)  # nor for seconds
    assert a.soon() > 10
    a.measured(120_000_000, 13.1)  # past the limit, while the trip is under way: at once
    assert a.soon() == 0


def test_a_quiet_area_is_measured_at_the_first_change_and_again_at_once(tmp_path: Path) -> None:
    """A writer starting at full speed (1.4-2 GB/s here) crossed a 50 MB limit within the one turn
    of the clock (50 ms) before its first measure. While an area was not growing, a change the kernel
    reports ends the wait for its turn; a measure that finds growth after none is followed by another
    at once (their growth apart gives the pace); while it grows, its pace sets the turns."""
    a = Area.__new__(Area)
    a.limit = a.threshold = LIMIT
    a.used, a.measured_at, a.pace = 0, float("-inf"), 0.0
    watches = inotify.Watches(16)
    a.tree = SimpleNamespace(watches=watches)  # type: ignore[assignment]
    assert watches.add(str(tmp_path))
    a.measured(0, time.monotonic())
    assert _rest(a, 0.0) is False  # nothing changed: a whole turn, and the turn's measure
    (tmp_path / "f").write_bytes(b"x" * 4096)
    assert _rest(a, 0.0) is True  # a change reported: measure now
    watches.changed()  # (what the measure does with the reports)
    a.measured(4096, time.monotonic())  # growth after none: a burst began
    assert _rest(a, 0.0) is True  # a second measure at once
    a.measured(8192, time.monotonic())  # still growing: the pace sets the turns, changes or not
    (tmp_path / "g").write_bytes(b"y")
    assert _rest(a, 0.0) is False
    a.measured(8193, time.monotonic())
    a.measured(8193, time.monotonic())  # quiet again
    (tmp_path / "h").write_bytes(b"z")
    assert _rest(a, 0.0) is True
    watches.close()


def test_a_look_made_slow_does_not_hold_up_the_measures(box: tuple[Sandbox, Path]) -> None:
    sb, ws = box
    sb.write_file("/tmp/stall.py", STALL)
    up = "python3 /tmp/stall.py > /tmp/stall.log 2>&1 & for i in $(seq 60); do grep -q up /tmp/stall.log && break;"
    up += " sleep 1; done"
    assert sb.execute(f"{up}; cat /tmp/stall.log", timeout=90).output == "up\n"
    try:
        writer = "for i in $(seq 1 100); do head -c 10000000 /dev/zero > /app/w$i; done"
        stopped_quickly(sb, ws, f"{writer}; echo after", "SANDSHELL_WORKSPACE_LIMIT", margin=PACED)
    finally:
        sb.execute("pkill -f stall.py; rm -rf /app/w* /tmp/stall.*", timeout=60)


HELD = """import os, time
fds = [os.open(f"/app/gone{i}", os.O_WRONLY | os.O_CREAT, 0o600) for i in range(4)]
for i in range(4):
    os.unlink(f"/app/gone{i}")
for _ in range(400):
    for fd in fds:
        os.write(fd, bytes(250_000))
    time.sleep(0.25)
"""


def test_files_deleted_while_held_are_found_with_the_cpu_taken(box: tuple[Sandbox, Path]) -> None:
    """The look through /proc, starved of CPU: 40 busy loops share the container's CPU with a writer
    into files deleted while held open (seen only by the look), at most 4 MB a second. Here it stopped
    0-2 MB past the limit (four runs of a script); with the look made every 30 s while a command
    runs, 25 MB past. The look does not give way to the measures: under load the measures cover
    the clock, the look waits, and 34 MB went past."""
    sb, _ = box
    sb.write_file("/tmp/held.py", HELD)
    try:
        sb.execute("for i in $(seq 40); do (while :; do :; done) & done")
        start = time.monotonic()
        r = sb.execute("python3 /tmp/held.py; echo after", timeout=120)
        took = time.monotonic() - start
        assert r.notice and "SANDSHELL_WORKSPACE_LIMIT" in r.notice and "after" not in r.output, r
        grew = re.search(r"grew to ([0-9.]+) MiB", r.notice)
        assert grew, r.notice
        past = float(grew.group(1)) * 2**20 - LIMIT
        assert past <= 12_000_000, f"stopped {past / 1e6:.0f} MB past the limit, {took:.0f} s in: {r.notice}"
        assert took < 60, r
    finally:
        sb.execute("pkill -f 'while :'; pkill -f held.py; true", timeout=60)
    assert sb.execute("echo next").output == "next\n"


DEEP_HIDDEN = (
    "cd /app && n=$(printf 'd%.0s' $(seq 1 250)) && for i in $(seq 1 13); do mkdir $n && cd $n || exit; done"
    " && mkdir m && chmod 0300 m && cd m"
)


def test_a_deep_folder_the_agent_may_not_read_still_counts_in_locked(tmp_path: Path) -> None:
    """Past 3,072 bytes of path a folder is walked by descriptor, and there a `chmod 0300` folder
    (which the locked profile's agent, without capabilities, may not read) would count nothing: 240 MB
    past a 50 MB limit. It is let in there as it is by the path walk."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    if os.geteuid() == 0:
        os.chown(ws, 1000, 1000)  # locked runs as the workspace's owner
    s = _base_settings(sandbox={"workspace_limit": LIMIT, "scratch_limit": LIMIT, "profile": "locked"})
    with Sandbox(workspace=ws, settings=s.sandbox) as sb:
        fill = "for i in $(seq 1 300); do head -c 1000000 /dev/zero > f$i; done"
        r = sb.execute(f"({DEEP_HIDDEN} && {fill}); echo after", timeout=60)
        assert r.notice and "SANDSHELL_WORKSPACE_LIMIT" in r.notice and "after" not in r.output, r
