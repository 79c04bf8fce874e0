"""Attacks on the agent from inside, written as a careless model or a hostile process would make
them: each leaves something in the shell or the filesystem, and the agent must still report the
truth, keep the state a replacement shell starts from, and stay alive.

Each test gets a sandbox of its own: what they plant outlives a replaced shell (functions do)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandshell.errors import SandboxError
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]


@pytest.fixture(params=[("auto", "compiled"), ("off", "source")], ids=["loop", "wrapper-source"])
def box(workspace: Path, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """Both ways commands run: the compiled loop (the default) and the bash functions alone; the
    agent compiled (the default) and from its source."""
    loop, code = request.param
    settings = _base_settings(sandbox={"exit_timeout": 3.0, "kill_grace": 0.5, "shell_loop": loop, "agent_code": code})
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        assert sb.hello.get("code") == code, sb.hello
        yield sb


def _where(sb: Sandbox) -> tuple[str, str]:
    """(what the result says the cwd is, what the shell itself says)."""
    r = sb.execute("builtin pwd")
    return r.cwd, r.output.strip()


def test_a_cd_function_of_the_models_is_not_what_a_new_shell_runs(box: Sandbox) -> None:
    """`cd() { builtin cd "$@" && ls; }` is a common convenience. A new shell must not run it to
    reach the saved cwd: its output would land in the next command's, and a `cd` that fails
    would leave the shell elsewhere than the result says."""
    box.execute('cd() { builtin cd "$@" && echo "now in $PWD"; }')
    r = box.execute("cd /etc; exit 3")
    assert r.restarted and r.cwd == "/etc" and r.output == "now in /etc\n", r
    r = box.execute("pwd")
    assert r.output == "/etc\n" and r.cwd == "/etc", r  # nothing from the new shell's start-up
    box.execute("cd() { echo refused; return 1; }")
    r = box.execute("builtin cd /usr && exit 0")
    assert r.restarted and r.cwd == "/usr", r
    r = box.execute("builtin pwd")
    assert r.output == "/usr\n" and r.cwd == "/usr", r


def test_the_models_own_exit_trap_does_not_lose_the_state_of_an_exiting_command(box: Sandbox) -> None:
    """A script pasted at the prompt sets `trap 'rm -rf "$tmp"' EXIT`; later a command changes
    folder and exports, then exits (or `set -e` ends it): the new shell starts from that state,
    and the model's trap still runs."""
    box.execute("tmp=$(mktemp -d); trap 'rm -rf \"$tmp\"; echo cleaned' EXIT")
    r = box.execute("cd /etc && export KEPT=yes && exit 3")
    assert r.restarted and r.return_code == 3 and "cleaned" in r.output and r.cwd == "/etc", r
    r = box.execute("echo $KEPT; pwd")
    assert r.output == "yes\n/etc\n", r
    box.execute("trap - EXIT")  # no trap at all: still saved
    r = box.execute("set -e; cd /usr; export AGAIN=1; false; echo never")
    assert r.restarted and "never" not in r.output, r
    r = box.execute("echo $AGAIN; pwd")
    assert r.output == "1\n/usr\n", r


def test_a_folder_the_new_shell_cannot_enter_does_not_kill_the_agent(workspace: Path) -> None:
    """Locked, root has no CAP_DAC_OVERRIDE: `chmod 000 .` (or `chmod -R 644 .`, which takes the
    x bit off every folder) leaves the saved cwd one the next shell cannot enter. The agent must
    start that shell elsewhere and say where, not die (it is PID 1: the container goes with it)."""
    settings = _base_settings(sandbox={"exit_timeout": 3.0, "kill_grace": 0.5, "profile": "locked"})
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        r = sb.execute("mkdir -p /tmp/shut && cd /tmp/shut && chmod 000 .")
        assert r.return_code == 0 and r.cwd == "/tmp/shut", r
        r = sb.execute("exit 4")
        assert r.restarted and r.return_code == 4, r
        said, real = _where(sb)
        assert said == real == r.cwd != "/tmp/shut", (r, said, real)  # the result said where the new shell is
        assert r.notice and "could not enter /tmp/shut" in r.notice and "same cwd" not in (r.error or ""), r
        r = sb.execute("echo alive")
        assert r.output == "alive\n" and r.return_code == 0 and not r.restarted, r


def test_a_cwd_too_long_to_name_is_said_so_not_shown_as_slash(box: Sandbox) -> None:
    """25 folders of 200 characters make a cwd of 5,029 bytes, which neither bash's record
    (CWD_MAX) nor the kernel's readlink gives. Unguarded, the result says "/", a relative file
    action goes to the agent's own cwd (/app), and after `kill -9 $$` the new shell starts in /app
    under "a new one started in the same cwd", with no word of the folder it could not return to."""
    x, loop = "x" * 200, box.hello.get("shell") == "loop"
    deep = "/tmp/" + "/".join([x] * 25)  # (the bash functions say $PWD whole: the agent keeps what they say)
    said = "(a folder whose path is over 4,096 bytes)" if loop else deep
    r = box.execute(f"cd /tmp && for i in $(seq 1 25); do mkdir -p {x} && cd {x}; done; echo ${{#PWD}}")
    assert r.output == "5029\n" and r.cwd == said, r
    with pytest.raises(SandboxError, match=r"give 'rel\.txt' as a full path" if loop else "too long"):
        box.write_file("rel.txt", "hello")
    assert box.read_file("rel.txt").error is not None and not (box.workspace / "rel.txt").exists()
    r = box.execute("kill -9 $$")
    assert r.restarted and r.cwd == "/app" and "same cwd" not in (r.error or ""), r
    told = f"could not return to {said}" if loop else f"could not enter {deep}"
    assert r.notice and f"{told} and started in /app" in r.notice.replace(" (gone, or not permitted)", ""), r


def test_the_compiled_loop_removed_from_inside_leaves_the_bash_functions_not_a_dead_shell(workspace: Path) -> None:
    """Root inside removes bashloop.so and kills the shell: unguarded, every later command ends with
    exit 3 ("cannot open shared object") under a notice about the saved state."""
    settings = _base_settings(sandbox={"exit_timeout": 3.0, "kill_grace": 0.5})
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        assert sb.hello.get("shell") == "loop", sb.hello
        assert sb.execute("cd /tmp && export KEPT=1").ok  # (saved as the command ends: `kill -9` cannot be)
        r = sb.execute("rm /opt/sandshell/sandshell_agent/bashloop.so && kill -9 $$")
        assert r.restarted, r
        r = sb.execute("echo alive $KEPT; pwd")
        told = "no longer loads (removed or replaced from inside): commands run through the bash functions"
        assert told in (r.notice or "") and r.output == "alive 1\n/tmp\n", r  # (and bash's own error not in it)
        for _ in range(3):
            r = sb.execute("echo alive $KEPT; pwd")
            assert r.output == "alive 1\n/tmp\n" and r.return_code == 0 and not r.restarted, r


def test_a_short_tmout_never_runs_part_of_a_command_as_shell_input(box: Sandbox) -> None:
    """`TMOUT` is read's default timeout; hardened profiles set it (often readonly). A command bash
    has not finished reading when it runs out was cut short, and the rest of it (here the body of
    a heredoc) ran as commands of its own."""
    assert box.execute("readonly TMOUT=0.01; echo set").output == "set\n"
    body = "touch /tmp/ran-from-the-body\n" * 8000  # ~230 KB: bash reads it a byte at a time
    r = box.execute(f"cat > /tmp/note <<'EOF'\n{body}EOF\nwc -l < /tmp/note", timeout=20)
    assert r.output == "8000\n" and r.return_code == 0 and not r.timed_out, r
    r = box.execute("ls /tmp/ran-from-the-body 2>&1; echo $TMOUT")
    assert "No such file" in r.output and r.output.endswith("0.01\n"), r


# The loop keeps bash's input on fd 202 and the status channel on 200; the wrapper's `eval` saves them
# on 10 and 11.
THIEF = r"""[ -e /proc/$$/fd/200 ] && { i=202 s=200; } || { i=10 s=11; }; exec 5<&$i 7>&$s; P=$$; python3 -c '
import os, signal, sys, time
time.sleep(0.5)  # the command that planted it has ended: bash waits for the next one
os.kill(int(sys.argv[1]), signal.SIGSTOP)  # so the next command is ours to read, whole
data = b""
while b"\0" not in data:
    data += os.read(0, 65536)
nonce = data.split(b"\n", 1)[-1][:32]
os.write(1, nonce + b"\0" + b"0\0/app\0ran\0")  # the record the agent waits for
os.kill(int(sys.argv[1]), signal.SIGCONT)
' $P <&5 >&7 2>/dev/null & echo planted"""


def test_a_process_holding_the_shells_own_descriptors_cannot_answer_for_it(box: Sandbox) -> None:
    """During a command bash holds its input and its status channel (on fds 10 and 11 saved around
    the wrapper's `eval`; on 202 and 200 in the loop): a command can copy them (`exec 5<&10 7>&11`)
    and give them to a process that stops bash, reads the next command off its input with its
    nonce and writes the status record itself. That command then never ran, yet came back as a
    success. The status must be taken only from bash itself: a swallowed command may time out,
    never pass for one that ran."""
    assert box.execute(THIEF).output == "planted\n"
    time.sleep(1.0)
    r = box.execute("echo ran-for-real; false", timeout=3)
    forged = r.return_code == 0 and not r.timed_out and "ran-for-real" not in r.output
    assert not forged, r
    assert r.timed_out or (r.return_code == 1 and r.output == "ran-for-real\n"), r
    r = box.execute("echo next; false")
    assert r.output == "next\n" and r.return_code == 1 and not r.timed_out, r


def test_strict_mode_error_traps_see_only_the_models_own_failures(box: Sandbox) -> None:
    """`set -Eeuo pipefail; trap 'echo "error on line $LINENO"' ERR` is pasted from scripts. With
    `-E` functions inherit the ERR trap: a command of the wrapper's that fails must not fire it."""
    assert box.execute("set -E; trap 'echo ERR-TRAP' ERR").return_code == 0
    for command in ("true", "echo x", "cd /etc", "export A=1"):
        r = box.execute(command)
        assert "ERR-TRAP" not in r.output and r.return_code == 0, r
    r = box.execute("false")
    assert "ERR-TRAP" in r.output and r.return_code == 1, r


def test_the_models_own_term_trap_does_not_let_a_timed_out_line_go_on(box: Sandbox) -> None:
    """`trap cleanup EXIT INT TERM` comes with pasted scripts. A timeout sends the shell TERM: the
    model's trap ran and the line went on to its next statement, the one after the timed-out
    step, before the hard kill (which also lost the state of that command)."""
    box.execute("trap 'echo caught' TERM")
    r = box.execute("cd /etc; export K=1; sleep 30; touch /tmp/after-the-timeout", timeout=2)
    assert r.timed_out and r.return_code != 0, r
    time.sleep(1.5)
    r = box.execute("ls /tmp/after-the-timeout 2>&1; echo $K; pwd")
    assert "No such file" in r.output and r.output.endswith("1\n/etc\n"), r
    r = box.execute("trap '' TERM; echo ignored")  # ignoring TERM stays the model's choice
    r = box.execute("trap -p TERM")
    assert r.output == "trap -- '' SIGTERM\n", r


def test_exec_keeps_the_state_the_command_set_before_it(box: Sandbox) -> None:
    """`exec PROGRAM` replaces bash without running its EXIT trap: the cwd and exports the same
    command set before it were lost, though the exec'd program started with them."""
    r = box.execute("cd /usr && export VIA_EXEC=1 && exec sleep 1", timeout=10)
    assert r.restarted and r.cwd == "/usr", r
    r = box.execute("echo $VIA_EXEC; pwd")
    assert r.output == "1\n/usr\n", r
    r = box.execute("cd /etc && export VIA_EXEC=2 && exec bash")  # 'reload the shell': ends at once
    assert r.restarted, r
    r = box.execute("echo $VIA_EXEC; pwd")
    assert r.output in ("2\n/etc\n", "1\n/usr\n"), r  # the new bash may end before it is read


def test_a_save_that_fails_midway_keeps_the_state_saved_before(box: Sandbox) -> None:
    """`ulimit -f 0` (or a full state folder) kills bash with SIGXFSZ as it rewrites its state
    after the command: the files were truncated first, so every export and function made since
    the session began was gone from the new shell, not only those of this command. The command's
    result goes out before the save, so the next result says the shell ended after it."""
    assert box.execute("cd /usr && export KEPT=1 && f_kept() { echo fn; }").return_code == 0
    r = box.execute("ulimit -f 0; export LATER=2")
    assert r.return_code == 0 and not r.restarted, r
    r = box.execute("echo $KEPT; f_kept; pwd")
    assert r.output == "1\nfn\n/usr\n", r
    assert "the shell ended after the last command (killed by signal 25)" in (r.notice or ""), r


def test_a_closed_stderr_costs_nothing_but_stderr(box: Sandbox) -> None:
    """`exec 2>&-` (meant as `2>/dev/null`): the wrapper's read of the next command duplicated
    fd 2 for syntax errors, failed, and left the command unread on bash's input: it timed out
    and the shell was killed. Syntax errors still reach the model when its stderr is gone."""
    assert box.execute("exec 2>&-").return_code == 0
    r = box.execute("cd /etc; echo still", timeout=5)
    assert r.output == "still\n" and r.return_code == 0 and not r.timed_out and r.cwd == "/etc", r
    r = box.execute("echo 'unterminated", timeout=5)
    assert r.syntax_error and "unexpected EOF" in r.output and not r.timed_out, r


def test_the_next_command_sees_the_last_ones_status_in_dollar_question(box: Sandbox) -> None:
    """`make` then `echo $?` as two commands, as at a prompt: the second saw 0 whatever the first
    returned (the wrapper's own read came between), so a failed build looked like a good one."""
    for command, status in (("false", "1"), ("sh -c 'exit 7'", "7"), ("true", "0"), ("echo 'open", "2")):
        box.execute(command)
        r = box.execute("echo $?")
        assert r.output == f"{status}\n" and r.return_code == 0, (command, r)
    box.execute("trap 'echo ERR-TRAP' ERR")
    box.execute("sh -c 'exit 6'")
    r = box.execute("echo $?")  # handed on in an `if`: neither an ERR trap nor errexit sees it fail
    assert r.output == "6\n" and not r.restarted, r


def test_strict_mode_at_the_prompt_behaves_as_at_a_prompt(box: Sandbox) -> None:
    """`set -euo pipefail` pasted at the prompt. The command ran inside an `eval` whose own
    status errexit and the ERR trap saw as one more failure: `[ -d build ] && rm -r build`
    (status 1, which errexit ignores) ended the shell (its options lost with it), and every
    failed command fired the ERR trap twice."""
    box.execute("set -eo pipefail; trap 'echo ERR-TRAP' ERR")
    r = box.execute("[ -d /nope ] && echo yes")
    assert r.return_code == 1 and not r.restarted and r.output == "", r
    r = box.execute("echo $-; shopt -o pipefail | tr -s ' \\t' ' '")
    assert "e" in r.output.split("\n")[0] and "pipefail on" in r.output and not r.restarted, r
    r = box.execute("sh -c 'exit 3'")  # a failure errexit does see: the shell ends, as at a prompt
    assert r.output == "ERR-TRAP\n" and r.return_code == 3 and r.restarted, r


def test_dollar_underscore_is_the_last_commands_last_argument(box: Sandbox) -> None:
    """`mkdir -p build/out` then `cd $_`, as at a prompt: `$_` was the wrapper's own function's
    name, so the cd failed and named it."""
    box.execute("mkdir -p /tmp/deep/er")
    r = box.execute("cd $_ && pwd")
    assert r.output == "/tmp/deep/er\n" and r.return_code == 0, r


def test_a_term_trap_set_by_the_timed_out_command_itself_does_not_let_its_line_go_on(box: Sandbox) -> None:
    """The trap of a pasted script, set by the very command that then times out: before, the
    agent's TERM ran it, the killed `sleep` returned, and the line went on to `touch`."""
    r = box.execute("trap 'echo cleanup' EXIT INT TERM; cd /etc; export K2=1; sleep 30; touch /tmp/after-2", timeout=2)
    assert r.timed_out and r.return_code != 0, r
    time.sleep(1.5)
    r = box.execute("ls /tmp/after-2 2>&1; echo $K2; pwd")
    assert "No such file" in r.output and r.output.endswith("1\n/etc\n"), r


ZOMBIE_LEADER = r"""
import ctypes, os, threading, time
def work():
    while True:
        with open("/tmp/still-alive", "a") as f:
            f.write("%d\n" % os.getpid())
        time.sleep(0.2)
threading.Thread(target=work).start()
time.sleep(0.2)
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: only the main thread ends; /proc shows the process as a zombie
"""


def test_a_process_whose_main_thread_exited_is_still_killed_with_its_command(box: Sandbox) -> None:
    """Its leader a zombie, its other threads running: the kill walk took it for dead and left it
    writing after the result said timed out (the disk watchdog's and the process watchdog's kills
    share the walk)."""
    box.write_file("/tmp/zombie.py", ZOMBIE_LEADER)
    r = box.execute("setsid python3 /tmp/zombie.py >/dev/null 2>&1 & sleep 30", timeout=2)
    assert r.timed_out, r
    r = box.execute("sleep 0.5; wc -l < /tmp/still-alive; sleep 1; wc -l < /tmp/still-alive")
    before, after = r.output.split()
    assert before == after, f"a thread of the killed command is still writing: {r.output!r}"


def test_a_state_file_numbered_in_other_digits_cannot_end_the_agent(box: Sandbox) -> None:
    """`"²".isdigit()` is true and `int("²")` raises: both state scripts marked "whole ²", then
    the shell ended, must not make the next shell's start raise in the agent, PID 1."""
    container = box.container.id
    r = box.execute(
        "cd /etc; for f in /run/sandshell-agent/state0.sh /run/sandshell-agent/state1.sh; do "
        "printf '# sandshell: whole \\xc2\\xb2\\n' > $f; done; exit 4"
    )
    assert r.return_code == 4 and r.restarted, r
    r = box.execute("echo alive; pwd")
    assert r.output.startswith("alive\n") and r.error is None, r
    assert box.container.id == container, "the agent died and a fresh sandbox took its place"


def test_a_cwd_that_is_not_utf8_survives_a_killed_shell(box: Sandbox) -> None:
    """A folder named in bytes that are not UTF-8, the shell killed there (no EXIT trap, no saved
    cwd): the next shell is sent to that cwd, and sending its name must not end the agent."""
    container = box.container.id
    r = box.execute("mkdir -p $'/tmp/\\xff' && cd $'/tmp/\\xff'")
    assert r.cwd == "/tmp/\udcff", r  # (the name's bytes, escaped: what the agent holds and sends back)
    r = box.execute("kill -9 $$")
    assert r.restarted, r
    r = box.execute("pwd | od -An -c | tr -d ' \\n'")
    assert r.output == "/tmp/377\\n", r
    assert box.container.id == container, "the agent died and a fresh sandbox took its place"


def test_the_agents_own_process_files_are_closed_to_the_models_file_actions(box: Sandbox) -> None:
    """The agent does the model's file actions itself, and its own /proc entries are open to it
    where the agent's non-dumpable mark closes them to the model's processes. Through a write, a
    timer slack of 100 s would hold up every timeout after it (3 s took 19), and `comm` would rename
    the agent; through a read, its memory map and registers would come out."""
    own = "agent's own process files"
    tids = [t for t in box.execute("ls /proc/1/task").output.split() if t != "1"]
    assert tids, "the agent has threads of its own (the disk watchdog's)"
    paths = [
        "/proc/1/maps",
        "/proc/self/syscall",
        "/proc/1/task/1/comm",
        "/proc/thread-self/io",
        f"/proc/{tids[0]}/maps",
        "/app/maps-link",
    ]
    box.execute("ln -sf /proc/1/maps /app/maps-link")
    for path in paths:
        got = box.read_file(path)
        assert got.content is None and own in (got.error or ""), (path, got)
    for path, content in (
        ("/proc/1/timerslack_ns", "100000000000"),
        ("/proc/self/comm", "bash"),
        (f"/proc/{tids[0]}/timerslack_ns", "100000000000"),
    ):
        with pytest.raises(SandboxError, match=own):
            box.write_file(path, content)
    assert box.execute("cat /proc/1/comm 2>/dev/null || ps -o comm= -p 1").output.strip() != "bash"
    assert "MemTotal" in (box.read_file("/proc/meminfo").content or "")  # the rest of /proc as before
    box.execute("exec 9<>/tmp/gone; echo secret >&9; rm /tmp/gone")
    pid = box.execute("echo $$").output.strip()
    gone = box.read_file(f"/proc/{pid}/fd/9")
    assert gone.content is None and "no longer in the filesystem" in (gone.error or ""), gone
    start = time.monotonic()
    r = box.execute("sleep 60", timeout=2)
    assert r.timed_out and time.monotonic() - start < 6, (r, time.monotonic() - start)


BURST = r"""
import os, signal, sys, time
shell, (r, w) = int(sys.argv[1]), os.pipe()
for _ in range(150):  # under the pid watchdog's mark (3/4 of 256), waiting on the pipe
    if os.fork() == 0:
        os.close(w)
        os.read(r, 1)
        for _ in range(4):  # all at once: the limit is full before any watchdog looks
            try:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
            except OSError:
                pass
        time.sleep(30)
        os._exit(0)
os.close(r)
while not os.path.exists("/tmp/go"):
    time.sleep(0.001)
os.close(w)
time.sleep(0.005)
os.kill(shell, signal.SIGKILL)  # the agent must start a new shell now, with no process to be had
time.sleep(30)
"""


def test_a_process_table_filled_as_the_shell_dies_does_not_end_the_agent(box: Sandbox) -> None:
    """The agent's fork of a new shell fails (EAGAIN) in a full process table; the error must not
    end the agent, and with it the sandbox: it makes room and says so."""
    box.write_file("/tmp/burst.py", BURST)
    container, said = box.container.id, []
    for _ in range(3):
        box.execute("rm -f /tmp/go; python3 /tmp/burst.py $$ >/dev/null 2>&1 & sleep 1")
        box.execute("(sleep 0.5; touch /tmp/go) >/dev/null 2>&1 &")
        time.sleep(3)
        r = box.execute("echo ok")
        assert r.output == "ok\n" and not r.lost and box.container.id == container, r
        said.append(r.notice or "")
        box.execute("pkill -9 -f burst.py; sleep 0.5")
    assert all("in the background" in n and "new one started" in n for n in said), said
    # each time room was made: by the new shell's start, or by the pid watchdog when it looked first
    assert all("process limit was full" in n or "reached the limit of" in n for n in said), said
