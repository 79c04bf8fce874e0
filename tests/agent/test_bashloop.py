"""The compiled command loop (src/sandshell_agent/bashloop.c), attacked from inside: it is the
default, its key and nonces are in no variable, a process that steals the next command off bash's
input cannot pass a record for it, and no code can be loaded into the shell that reports results."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sandshell.resources import agent_dir
from sandshell.sandbox.image import compile_loop
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]


@pytest.fixture(params=["auto", "off"], ids=["loop", "wrapper"])
def box(workspace: Path, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    settings = _base_settings(sandbox={"exit_timeout": 3.0, "kill_grace": 0.5, "shell_loop": request.param})
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        yield sb


def test_commands_run_through_the_loop_by_default(sb: Sandbox) -> None:
    """A compile or load that failed would fall back to the bash functions without a word: the
    default sandbox must say it runs the loop."""
    assert sb.hello.get("shell") == "loop", sb.hello


def test_the_library_needs_nothing_newer_than_glibc_2_17(tmp_path: Path) -> None:
    """It is compiled on the host and loaded by the image's bash: symbols of a newer glibc than the
    image's (fstat@GLIBC_2.33, __isoc23_strtol@GLIBC_2.38 from a newer host) would keep it from loading."""
    context = tmp_path / "context"
    (context / "sandshell_agent").mkdir(parents=True)
    for name in ("bashloop.c", "blake2s.h"):
        (context / "sandshell_agent" / name).write_bytes((agent_dir() / name).read_bytes())
    assert compile_loop(context, lambda _m: None)
    symbols = subprocess.run(
        ["objdump", "-T", str(context / "sandshell_agent" / "bashloop.so")], capture_output=True, text=True, check=True
    ).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+\.\d+)", symbols)}
    assert versions and max(versions) <= (2, 17), sorted(versions)


SECRETS = r"""
{ set; declare -p; declare -f; env; alias; trap -p; cat /proc/$$/environ /proc/$$/cmdline | tr '\0' '\n'
  ls -l /proc/$$/fd; } 2>/dev/null | grep -oE '(^|[^0-9a-f])[0-9a-f]{32,64}([^0-9a-f]|$)' | head -3
"""


def test_no_nonce_or_key_is_in_a_variable_or_the_environment(box: Sandbox) -> None:
    """What a command can list of its own shell holds no 32 or 64 hex digits with the loop; the bash
    functions keep the running command's nonce in a variable (which is why they are the fallback)."""
    found = box.execute(SECRETS).output.strip()
    if box.hello.get("shell") == "loop":
        assert found == "", found
    else:
        assert found, "the bash path's nonce variable was not found: this test would not see one"


def test_loading_or_unloading_builtins_is_refused(sb: Sandbox) -> None:
    """`enable -f` would put code in the shell that writes records; `enable -d` would unload the loop
    while it runs. Both are refused; the rest of `enable` works, and the shell goes on."""
    sb.write_file("/tmp/evil.so", "not a library")
    for attempt in ("enable -f /tmp/evil.so evil", "enable -d __ss_loop", "enable -nf /tmp/evil.so x", "enable -fd x"):
        r = sb.execute(attempt)
        assert r.return_code == 2 and "enable -f, -d" in r.output and not r.restarted, (attempt, r)
    r = sb.execute("enable -n __ss_loop; enable -n echo; type -t echo; enable echo __ss_loop; echo back")
    assert r.output == "file\nback\n" and not r.restarted, r


THIEF = r"""
in=$(for fd in $(ls /proc/$$/fd); do
       case $fd in 0|1|2|200|201) continue;; esac
       case $(readlink /proc/$$/fd/$fd) in socket:*) echo $fd; break;; esac
     done)
tag=00000000000000000000000000000000
trap 'IFS= read -r n < /tmp/stolen; printf "%s\0%s\0%s\0%s\0%s\0" "${n:0:32}" 77 /forged ran $tag >&200' USR1
( sleep 0.3; kill -STOP $$; IFS= read -r -N 42 -u $in head; echo "$head" > /tmp/stolen
  kill -CONT $$; kill -USR1 $$ ) >/dev/null 2>&1 &
echo "thief on fd $in"
"""


def test_a_thief_of_the_next_command_cannot_pass_a_record_for_it(sb: Sandbox) -> None:
    """A background subshell of the shell's own holds its input: it stops the shell, reads the next
    command's nonce off it, and has a trap in the shell write a record with that nonce from the
    shell's own pid. Without the key the record's tag is wrong: the command is lost (it was
    stolen), never given a forged status."""
    r = sb.execute(THIEF)
    assert r.output == "thief on fd 202\n", r  # the loop's input
    time.sleep(0.6)  # the thief waits, reading, with the shell stopped
    r = sb.execute("echo two", timeout=2)
    assert r.return_code != 77 and "/forged" not in r.cwd, r
    assert r.timed_out or r.restarted or r.error, r
    assert sb.execute("cat /tmp/stolen | cut -c1-32").output.strip() != ""  # the theft itself worked
    r = sb.execute("trap - USR1; echo honest")
    assert r.output == "honest\n" and r.return_code == 0, r


# Attacks on the loop from inside the shell (each seen to break it without its guard).

MITM = r"""
rm -f /tmp/f; mkfifo /tmp/f
( export LC_ALL=C; exec 7>/tmp/f
  while IFS= read -r -N 42 head <&202; do
    nonce=${head:0:32}; len=$((10#${head:32}))
    IFS= read -r -N "$len" cmd <&202
    new="echo forged; builtin cd /etc; (exit 77)"
    printf '%s%010d%s' "$nonce" "${#new}" "$new" >&7
  done ) >/dev/null 2>&1 &
exec 202<&-; exec 202</tmp/f
echo armed
"""


def test_an_input_swapped_for_a_helpers_runs_no_command_of_the_helpers(sb: Sandbox) -> None:
    """A process holding the loop's input relays each nonce with a command of its own, through a FIFO
    put where the loop reads (closing fd 202 first lets `exec 202<` stick). The loop reads only from
    the input it started with, and only commands tagged under its key: the shell is replaced, and
    nothing of the relay's runs."""
    assert sb.execute(MITM).output.startswith("armed\n")  # (the loop's word on the swap may follow it)
    r = sb.execute("echo real; touch /tmp/real-ran", timeout=3)
    assert r.return_code != 77 and "forged" not in r.output and r.cwd != "/etc", r
    for _ in range(3):
        r = sb.execute("ls /tmp/real-ran >/dev/null 2>&1; echo rc=$?; pwd", timeout=3)
        assert "forged" not in r.output and r.return_code == 0, r
    sb.execute("rm -f /tmp/real-ran /tmp/f; cd /app")


def test_set_n_lasts_to_the_end_of_its_own_command(sb: Sandbox) -> None:
    """`set -n` made every later command a no-op reported as a success (timeouts, `exit` and
    `kill -9 $$` included), and it never wore off."""
    assert sb.execute("set -n").return_code == 0
    r = sb.execute("echo hi; false")
    assert r.output == "hi\n" and r.return_code == 1, r
    r = sb.execute("sleep 10", timeout=1)
    assert r.timed_out, r


def test_the_loop_cannot_be_started_again_from_inside(sb: Sandbox) -> None:
    """A second `__ss_loop` (returned from through a trap) swapped the folder states were saved to."""
    sb.execute("export BEFORE=1")
    nest = (
        "f() { trap 'trap - USR1; return 0' USR1; ( sleep 0.5; kill -USR1 $$ ) &"
        " __ss_loop 200 201 /tmp/evil 0 '' <&202; }; mkdir -p /tmp/evil; f; echo rc=$?; unset -f f"
    )
    r = sb.execute(nest, timeout=3)
    assert "rc=2" in r.output and "runs already" in r.output, r
    sb.execute("export LOST=1; lostfn() { echo hi; }; cd /etc")
    assert sb.execute("kill -9 $$").restarted
    r = sb.execute("echo BEFORE=$BEFORE LOST=$LOST; lostfn; pwd")
    assert r.output == "BEFORE=1 LOST=1\nhi\n/etc\n", r
    sb.execute("unset BEFORE LOST; unset -f lostfn; cd /app")


def _shell(sb: Sandbox) -> psutil.Process:
    """The loop's bash, as the host sees it (the engine here is this machine's)."""
    sb.container.reload()
    agent = psutil.Process(sb.container.attrs["State"]["Pid"])
    return next(p for p in agent.children() if p.name() == "bash")


def test_the_shell_sleeps_between_commands(sb: Sandbox) -> None:
    """Between commands the loop sleeps in its read. A loop that looked for the next command without
    sleeping (tried: ~10% off a quick command's round trip, docs/benchmarks.md) spends the CPU limit
    the model's processes share; one that never stopped looking would burn a core while the model
    thinks (seen red with such a look, 10 s long)."""
    shell = _shell(sb)
    for _ in range(20):
        sb.execute("true")
    time.sleep(0.1)
    before = sum(shell.cpu_times()[:2])
    time.sleep(1.0)
    used = sum(shell.cpu_times()[:2]) - before
    assert used < 0.05, f"the shell used {used:.3f} s of CPU in the second after its last command"


def test_a_signal_between_commands_runs_its_trap_at_once(sb: Sandbox) -> None:
    """A trap of the model's runs when its signal comes between commands, right after one ends and
    later, while the loop waits for the next (seen red with the wait's EINTR not taken to `pending`).
    The trap's file is read from the host, through the shell's /proc root: a command would run it."""
    shell = _shell(sb)
    trapped = Path(f"/proc/{shell.pid}/root/tmp/trapped")
    sb.execute("rm -f /tmp/trapped; trap 'echo x >> /tmp/trapped' USR1")
    try:
        for n, pause in enumerate((0.0, 0.0, 0.0, 0.0, 0.3), start=1):
            sb.execute("true")
            time.sleep(pause)
            os.kill(shell.pid, signal.SIGUSR1)
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and not (trapped.exists() and trapped.read_text().count("x") >= n):
                time.sleep(0.01)
            assert trapped.exists() and trapped.read_text().count("x") == n, (n, pause)
    finally:
        sb.execute("trap - USR1; rm -f /tmp/trapped")


def test_a_function_named_builtin_does_not_keep_the_exit_trap_from_saving(sb: Sandbox) -> None:
    """The traps ran bash functions that call `builtin ...`: a function of the model's by that name
    kept them from being put back, and `exit` lost the command's state."""
    sb.execute("export A=1; builtin() { :; }; trap 'echo bye' EXIT")
    r = sb.execute("export B=2; cd /etc; exit 4")
    assert r.restarted and r.return_code == 4 and "bye" in r.output, r
    r = sb.execute("echo A=$A B=$B; pwd")
    assert r.output == "A=1 B=2\n/etc\n", r
    sb.execute("unset -f builtin; trap - EXIT; unset A B; cd /app")


def test_a_function_named_like_an_assignment_does_not_lose_the_others(sb: Sandbox) -> None:
    """`declare -f` writes `function a=b {...}` as `a=b () ...`, which reads back as an assignment and
    ended the restore there: every function after it was gone from the new shell."""
    sb.execute("aa() { echo aa; }; zz() { echo zz; }; function a=b { echo ab; }; cd /etc")
    assert sb.execute("kill -9 $$").restarted
    r = sb.execute("aa; zz; 'a=b'; pwd")
    assert r.output == "aa\nzz\nab\n/etc\n", r
    sb.execute("unset -f aa zz a=b; cd /app")


def test_a_pwd_too_long_for_a_record_loses_no_result(sb: Sandbox) -> None:
    """A 20,000-character readonly `PWD` made every record too long to be read: every result was lost,
    after a restart too (the restore brought it back)."""
    r = sb.execute("declare -rx PWD=/$(head -c 20000 /dev/zero | tr '\\0' b); echo set")
    assert r.output == "set\n" and not r.timed_out, r
    r = sb.execute("echo hi")
    assert r.output == "hi\n" and not r.timed_out and r.return_code == 0, r


def test_extended_patterns_turned_on_in_the_command_itself_pass_the_check(sb: Sandbox) -> None:
    """The check parses the whole command before any of it runs: `shopt -s extglob` on its first
    line did not yet allow `@(...)` on the next, and the command was refused."""
    r = sb.execute("shopt -s extglob\ncase ab in @(ab|cd)) echo matched;; esac\nshopt -u extglob")
    assert r.output == "matched\n" and not r.syntax_error, r


def test_a_syntax_error_reaches_the_output_whatever_the_model_did_to_fd_2(sb: Sandbox) -> None:
    """The check's errors go to the shell's first stderr, not to whatever fd 2 is by then."""
    for setup in ("exec 2>/dev/null", "exec 2>&-"):
        assert sb.execute(setup).return_code == 0
        r = sb.execute("if then")
        assert r.syntax_error and "syntax error near unexpected token `then'" in r.output, (setup, r)
        assert sb.execute("echo still").output == "still\n"


@pytest.mark.parametrize("compiler", ["/nonexistent/cc", "false"])
def test_no_working_compiler_builds_no_library_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiler: str
) -> None:
    """The image then builds without it (the agent runs the bash functions): never a traceback, and
    never a library claimed that is not there."""
    context = tmp_path / "context"
    (context / "sandshell_agent").mkdir(parents=True)
    for name in ("bashloop.c", "blake2s.h"):
        (context / "sandshell_agent" / name).write_bytes((agent_dir() / name).read_bytes())
    monkeypatch.setenv("CC", compiler)
    said: list[str] = []
    assert not compile_loop(context, said.append)
    assert len(said) == 1 and "without it" in said[0], said
    assert not (context / "sandshell_agent" / "bashloop.so").exists()
