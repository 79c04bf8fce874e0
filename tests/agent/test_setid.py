"""No set-id file and no device node reaches the host folder: every way a process inside tries.

The workspace is a bind mount Docker cannot make `nosuid` (docs/security.md); a set-uid file in
it is one on the host. The agent's seccomp filter and its chmod guard (src/sandshell_agent/
sysfilter.py, chmods.py) refuse such a bit in /app while `apt-get`'s set-uid programs elsewhere keep
theirs. Each attack is checked by its result inside and by the host folder's modes.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sandshell.config import Settings
from sandshell.sandbox.sandbox import Sandbox

pytestmark = [pytest.mark.docker]

SETID = stat.S_ISUID | stat.S_ISGID
PY = "python3 -c"


def _set_id_files(root: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_mode & SETID or stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                found.append(f"{os.path.join(dirpath, name)} {oct(st.st_mode)}")
    return found


ATTACKS = {
    "chmod": "cp /bin/sh /app/a1 && chmod 6755 /app/a1",
    "chmod, relative to the cwd": "cp /bin/sh /app/a2 && cd /app && chmod u+s a2",
    "chmod through a link from /tmp": "cp /bin/sh /app/a3 && ln -sf /app/a3 /tmp/l3 && chmod 4755 /tmp/l3",
    "install -m": "install -m 4755 /bin/sh /app/a4",
    "cp -a of the image's set-uid su": "cp -a /bin/su /app/a5",
    "fchmod on a descriptor": (
        f"touch /app/a6 && {PY} \"import os; os.fchmod(os.open('/app/a6', os.O_RDONLY), 0o4755)\""
    ),
    "fchmodat with a folder descriptor": (
        f"touch /app/a7 && {PY} \"import os; os.chmod('a7', 0o2755, dir_fd=os.open('/app', os.O_RDONLY))\""
    ),
    # refused by the engine's own profile here (ENOSYS) before our filter sees it: ours is a second layer
    "fchmodat2 (452)": (
        f'touch /app/a8 && {PY} "import ctypes as c, os; l = c.CDLL(None, use_errno=True);'
        f" r = l.syscall(452, -100, b'/app/a8', 0o4755, 0); raise SystemExit(0 if r == 0 else c.get_errno())\""
    ),
    "open with O_CREAT and a set-uid mode": f"{PY} \"import os; os.open('/app/a9', os.O_CREAT | os.O_WRONLY, 0o4755)\"",
    "mknod of a set-uid regular file": f"{PY} \"import os; os.mknod('/app/a10', 0o104755)\"",
    # refused for want of CAP_MKNOD before our filter sees it: ours is a second layer
    "mknod of a character device (null)": f"{PY} \"import os; os.mknod('/app/a11', 0o20666, os.makedev(1, 3))\"",
    "chmod of /proc/self/fd/N, N an /app file": "touch /app/a12 && exec 7</app/a12 && chmod 4755 /proc/self/fd/7",
    "a link to /proc/self/fd/N": (
        "touch /app/a13 && exec 8</app/a13 && ln -sf /proc/self/fd/8 /tmp/l13 && chmod 4755 /tmp/l13"
    ),
    "renameat2 leaving a whiteout (a character device 0:0)": (
        f'touch /app/a14 && {PY} "import ctypes as c; l = c.CDLL(None, use_errno=True);'
        f" r = l.syscall(316, -100, b'/app/a14', -100, b'/app/a15', 4);"
        f' raise SystemExit(0 if r == 0 else c.get_errno())"'
    ),
    "io_uring (opens on the kernel's side)": (
        f'{PY} "import ctypes as c; l = c.CDLL(None, use_errno=True); p = (c.c_char * 120)();'
        f' r = l.syscall(425, 4, p); raise SystemExit(0 if r >= 0 else c.get_errno())"'
    ),
}


def test_no_way_in_leaves_a_set_id_file_or_a_device_in_the_workspace(sb: Sandbox, shared_workspace: Path) -> None:
    failed = {}
    for name, attack in ATTACKS.items():
        r = sb.execute(attack)
        failed[name] = r.return_code != 0
    assert all(failed.values()), f"an attack reported success: {[n for n, f in failed.items() if not f]}"
    assert _set_id_files(shared_workspace) == []
    sb.execute("rm -f /app/a*; exec 7<&- 8<&-")


def test_the_guard_cannot_be_turned_on_the_agents_own_files(sb: Sandbox) -> None:
    """/proc/self/fd/N, resolved by the guard, would be the agent's descriptor N (its /dev/null, its
    state files): every such chmod is refused, and nothing of the agent's changes mode."""
    r = sb.execute(
        "for n in $(seq 0 40); do chmod 4600 /proc/self/fd/$n 2>/dev/null && echo changed $n; done;"
        " cd /proc/self && chmod 4600 fd/0 2>/dev/null && echo relative; stat -c %a /dev/null"
    )
    assert r.output.split() == ["666"], r.output
    assert sb.execute("echo still here").output == "still here\n"


def test_a_link_swapped_while_the_guard_checks_never_lands_the_bit_in_the_workspace(
    sb: Sandbox, shared_workspace: Path
) -> None:
    """The path flips between a file in /tmp and one in /app as fast as a loop can: the guard acts
    on the file it checked, so /tmp's file may get the bit and /app's never does."""
    r = sb.execute(
        "cp /bin/sh /app/target && cp /bin/sh /tmp/decoy;"
        " (while [ ! -e /tmp/stop ]; do ln -sfn /tmp/decoy /tmp/flip; ln -sfn /app/target /tmp/flip; done) &"
        " ok=0; for i in $(seq 150); do chmod 4755 /tmp/flip 2>/dev/null && ok=$((ok+1)); done;"
        " touch /tmp/stop; wait;"
        " echo ok=$ok; stat -c %a /tmp/decoy"
    )
    assert r.return_code == 0 and "ok=" in r.output, r.output
    assert not (shared_workspace / "target").stat().st_mode & SETID, r.output
    sb.execute("rm -f /app/target")


def test_set_id_programs_outside_the_workspace_keep_their_bits(sb: Sandbox) -> None:
    """`apt-get install` unpacks set-uid programs (ssh-keysign, chrome-sandbox) with fchmod: outside
    /app the guard makes the change for a caller allowed to, and no more than it may."""
    r = sb.execute(
        "cp /bin/true /usr/local/bin/t && chmod 4755 /usr/local/bin/t && stat -c %a /usr/local/bin/t;"
        f" {PY} \"import os; fd = os.open('/usr/local/bin/t', os.O_RDONLY); os.fchmod(fd, 0o2711);"
        ' print(oct(os.stat(fd).st_mode & 0o7777))"'
    )
    assert r.return_code == 0 and r.output.split() == ["4755", "0o2711"], r.output
    # a process that dropped to nobody may not make root's file set-uid through the guard (it is
    # refused: the guard, without CAP_SYS_PTRACE, cannot even look at another uid's process)
    nobody = "setpriv --reuid 65534 --regid 65534 --clear-groups"
    r = sb.execute(f"{nobody} chmod 4755 /usr/local/bin/t; stat -c %a /usr/local/bin/t")
    assert "chmod: changing permissions" in r.output and r.output.split()[-1] == "2711", r.output
    # a non-root user may make its own file set-gid to its own group: the guard looks at it as it
    r = sb.execute(
        "id u1 >/dev/null 2>&1 || useradd -M u1; touch /app/u1f && chown u1:u1 /app/u1f;"
        " setpriv --reuid=u1 --regid=u1 --init-groups sh -c"
        " 'touch /tmp/u1f && chmod g+s /tmp/u1f && stat -c %a /tmp/u1f; chmod g+s /app/u1f'; rm -f /app/u1f"
    )
    assert r.output.split("\n")[0] == "2644" and "/app/u1f': Operation not permitted" in r.output, r.output
    # ...and no descriptor of the guard's listener reaches the shell
    r = sb.execute("ls -l /proc/$$/fd /proc/self/fd | grep -c seccomp || true")
    assert r.output.strip() == "0", r.output


def test_in_locked_the_workspace_refuses_set_id_bits_too(workspace: Path, settings: Settings) -> None:
    """In locked the agent and the model run as the workspace's non-root owner."""
    os.chown(workspace, 1000, 1000)
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(profile="locked")) as sb:
        r = sb.execute("cp /bin/sh /app/s && chmod 4311 /app/s")
        assert r.return_code != 0 and "Operation not permitted" in r.output, r.output
        r = sb.execute("touch /tmp/own && chmod 4755 /tmp/own && stat -c %a /tmp/own")  # not the workspace
        assert r.output.split()[-1] == "4755", r.output
    assert _set_id_files(workspace) == []


def test_no_host_file_takes_a_set_id_bit_not_even_outside_the_workspace(workspace: Path, settings: Settings) -> None:
    """Every mount but the container's own filesystem and /tmp is a host file: the engine's binds of
    /etc/hosts and the like, and a mount under the workspace (bound in with it: its own mount)."""
    if os.geteuid() != 0:
        pytest.skip("mounting under the workspace needs root on the host")
    sub = workspace / "sub"
    sub.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "sandshell-test", str(sub)], check=True)
    try:
        with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
            r = sb.execute("cp /bin/sh /app/sub/x && chmod 4755 /app/sub/x")
            assert r.return_code != 0 and "Operation not permitted" in r.output, r.output
            r = sb.execute(
                "for f in /etc/hosts /etc/hostname /etc/resolv.conf; do chmod 4755 $f && echo $f; done; true"
            )
            assert "/etc/" not in r.output.replace("changing permissions of '/etc/", ""), r.output
            assert not (sub / "x").stat().st_mode & SETID
    finally:
        subprocess.run(["umount", str(sub)], check=True)


def test_the_guard_allows_no_more_than_the_caller_may(sb: Sandbox) -> None:
    """It acts with the caller's own credentials: a root process without CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH cannot reach a file in another user's 0700 folder through it. (The system
    call itself: coreutils' chmod stats the file first and would stop there.)"""
    chmod = f"{PY} \"import os, sys; os.chmod('/tmp/priv/f', int(sys.argv[1], 8))\""
    r = sb.execute(
        "mkdir -p /tmp/priv && touch /tmp/priv/f && chown 1000 /tmp/priv && chmod 700 /tmp/priv;"
        " drop='--inh-caps=-dac_override,-dac_read_search --bounding-set=-dac_override,-dac_read_search';"
        f" setpriv $drop {chmod} 755 2>/dev/null; echo plain=$?; setpriv $drop {chmod} 4755 2>/dev/null;"
        " echo setid=$?; stat -c %a /tmp/priv/f; chmod 4755 /tmp/priv/f && stat -c %a /tmp/priv/f"
    )
    assert r.output.split() == ["plain=1", "setid=1", "644", "4755"], r.output
    sb.execute("rm -rf /tmp/priv")


def test_an_agent_that_cannot_install_the_filter_refuses_to_start_in_one_sentence() -> None:
    """A kernel or engine profile without seccomp filters: the agent stops before any shell exists,
    and says why (the host shows the agent's last stderr line when it dies)."""
    deny_seccomp = (
        "import ctypes, errno, struct, sys; sys.path.insert(0, sys.argv[1]);"
        "from sandshell_agent import sysfilter as s;"
        "p = s.Program(); p.op(s.LD_ABS, 0); p.op(s.JEQ, 317, 'no', 0);"
        "p.op(s.RET, s.ALLOW); p.label('no'); p.op(s.RET, s.ERRNO | errno.ENOSYS); code = p.assemble();"
        "libc = ctypes.CDLL(None, use_errno=True); buf = ctypes.create_string_buffer(code, len(code));"
        "prog = s._SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p));"
        "assert libc.prctl(38, 1, 0, 0, 0) == 0 and libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0;"
        "import runpy; sys.argv = ['sandshell_agent', '--stdio'];"
        "runpy.run_module('sandshell_agent', run_name='__main__')"
    )
    agent_dir = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        [sys.executable, "-c", deny_seccomp, agent_dir],
        input=b"",
        capture_output=True,
        timeout=30,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode != 0
    said = done.stderr.decode().strip().splitlines()
    assert said and "refusing to run a shell that could leave set-uid files on the host" in said[-1], said
    assert "Traceback" not in done.stderr.decode()


INOTIFY = """
import ctypes, errno, os, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while len(held) < 200:
    fd = libc.inotify_init1(0) if len(held) % 2 else libc.inotify_init()
    if fd < 0:
        break
    held.append(fd)
print(len(held), errno.errorcode.get(ctypes.get_errno()))
for fd in held:
    os.close(fd)
time.sleep(0.3)  # (right after a refusal the guard refuses without counting: watchers.RECOUNT)
fd = libc.inotify_init1(0)
print("again" if fd >= 0 else "refused")
os.close(fd)
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: its descriptors are then hidden from the agent
time.sleep(0.3)
print("undumpable", "refused" if libc.inotify_init1(0) < 0 else "allowed")
"""


def test_the_model_holds_a_bounded_share_of_the_machines_inotify_instances(sb: Sandbox) -> None:
    """Their limit is per user of the whole machine, and root inside is root outside: a command
    could hold 126 of 128, leaving none to the engine, the host's services or other sessions'
    agents. Past its share the model hears EMFILE, as from the kernel's own limit; a
    tool that watches a file still can, and the disk watchdog, which holds its own, goes on."""
    from sandshell_agent.watchers import INSTANCES

    sb.write_file("/tmp/inotify.py", INOTIFY)
    r = sb.execute("python3 /tmp/inotify.py")
    assert r.output.split() == [str(INSTANCES), "EMFILE", "again", "undumpable", "refused"], r
    watch = "(timeout 2 tail -F /tmp/t 2>&1 &); sleep 0.5; echo two >> /tmp/t; sleep 0.5"
    r = sb.execute(f"sleep 0.3; echo one > /tmp/t; {watch}")  # (0.3 s: a refusal's recount window)
    assert "one" in r.output and "two" in r.output and "polling" not in r.output, r


LEADERLESS = """
import ctypes, os, platform, threading, time
libc = ctypes.CDLL(None, use_errno=True)
def hold():
    time.sleep(0.5)  # the main thread has ended: /proc/PID/fd shows nothing of the process now
    held = []
    while len(held) < 100 and (fd := libc.inotify_init1(0)) >= 0:
        held.append(fd)
    print(len(held), flush=True)
    os._exit(0)
threading.Thread(target=hold).start()
libc.syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)  # exit: the main thread alone
"""


def test_instances_held_by_a_process_whose_main_thread_ended_count(sb: Sandbox) -> None:
    """Once its main thread has ended, a process's own /proc entry lists no descriptors (its other
    threads' entries do), so the count saw none of what such a process held, and it went on to hold
    as many instances as the machine had left. Counted now as the disk watchdog's look counts them."""
    from sandshell_agent.watchers import INSTANCES

    sb.write_file("/tmp/leaderless.py", LEADERLESS)
    r = sb.execute("pkill -f 'tail -F'; sleep 0.3; python3 /tmp/leaderless.py; sleep 0.3")  # (the test before's)
    assert r.output.split() == [str(INSTANCES)], r


def test_calls_right_after_a_refusal_are_refused_without_counting_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count reads every process's descriptors: a loop of refused calls must not keep the guard busy."""
    from sandshell_agent import watchers

    counts: list[int] = []
    monkeypatch.setattr(watchers, "held", lambda agent: counts.append(agent) or watchers.INSTANCES)
    monkeypatch.setattr(watchers, "_refused_at", float("-inf"))
    stranger = 2**22 + 7  # (no thread of this process)
    assert not watchers.allowed(stranger, now=100.0) and len(counts) == 1
    assert not any(watchers.allowed(stranger, now=100.0 + i / 100) for i in range(20)) and len(counts) == 1
    monkeypatch.setattr(watchers, "held", lambda agent: counts.append(agent) or 0)
    assert watchers.allowed(stranger, now=101.0) and len(counts) == 2  # a pause, then counted again
    assert watchers.allowed(threading.get_native_id(), now=101.0) and len(counts) == 2  # the agent's own: never counted
    # Calls that keep coming faster than RECOUNT are counted again every RECOUNT, not refused for good.
    monkeypatch.setattr(watchers, "held", lambda agent: watchers.INSTANCES)
    assert not watchers.allowed(stranger, now=200.0)
    monkeypatch.setattr(watchers, "held", lambda agent: 0)  # the model closed its instances meanwhile
    assert [watchers.allowed(stranger, now=200.0 + i * 0.2) for i in range(1, 4)] == [False, True, True]


@pytest.mark.docker
def test_the_agent_runs_as_an_untraceable_pid_1(workspace: Path, settings: Settings) -> None:
    """With Docker's init as PID 1 and the agent traceable, a process inside ran `chmod` in them
    through ptrace, outside the filter (a set-uid root shell in the host folder), and could stop
    the agent with SIGSTOP."""
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        r = sb.execute(
            "tr '\\0' ' ' </proc/1/cmdline; echo; cat /proc/1/environ >/dev/null 2>&1 && echo read-environ;"
            " python3 -c 'import ctypes; print(\"ptrace\", ctypes.CDLL(None).ptrace(16, 1, 0, 0))'; kill -STOP 1"
        )
        assert "sandshell_agent" in r.output and "read-environ" not in r.output, r.output
        assert "ptrace -1" in r.output, r.output
        assert sb.ping() < 1.0
        assert sb.execute("echo alive").output == "alive\n"
