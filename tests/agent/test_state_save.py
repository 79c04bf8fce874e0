"""Bash saves the state a new shell starts from after each command's result has gone out; attacked
from inside: the save made to hang, the shell killed in it, and a timed-out command whose shell
finished first. Each costs at most a notice on the next result, never a command's run or state."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandshell.sandbox.sandbox import Sandbox
from sandshell_agent.execution import SAVE_WAIT
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]

STATE = "/run/sandshell-agent"


@pytest.fixture(scope="module", params=["auto", "off"], ids=["loop", "wrapper"])
def sb(shared_workspace: Path, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """Both ways commands run: the compiled loop saves in C, the bash functions with `>|`."""
    settings = _base_settings(sandbox={"exit_timeout": 3.0, "kill_grace": 0.5, "shell_loop": request.param})
    with Sandbox(workspace=shared_workspace, settings=settings.sandbox) as box:
        yield box


def test_a_save_that_hangs_costs_the_next_command_a_notice_not_its_run(sb: Sandbox) -> None:
    """A FIFO where the next save goes (the older of the two state scripts): bash's `>|` blocks there
    forever; the compiled loop opens without waiting and puts a regular file in its place."""
    sb.execute("cd /tmp && export KEPT=before")
    older = f"cd {STATE}; if [ state0.sh -nt state1.sh ]; then f=state1.sh; else f=state0.sh; fi; rm -f $f; mkfifo $f"
    r = sb.execute(f"({older}); export LOST=yes; echo planted", timeout=3)
    assert r.output == "planted\n" and r.return_code == 0 and not r.restarted, r  # its result came first
    if sb.hello.get("shell") == "loop":
        r = sb.execute("kill -9 $$", timeout=3)
        assert r.restarted, r
        r = sb.execute("echo $KEPT $LOST; pwd", timeout=3)
        assert r.output == "before yes\n/tmp\n" and not r.notice, r  # saved, in a regular file
        sb.execute("unset KEPT LOST; cd /app")
        return
    start = time.monotonic()
    r = sb.execute("echo ran; echo $KEPT $LOST; pwd", timeout=3)
    assert r.output == "ran\nbefore\n/tmp\n" and not r.timed_out, r  # the state from before the hung save
    assert r.notice and f"did not finish saving its state within {SAVE_WAIT:g} s" in r.notice, r
    assert time.monotonic() - start < SAVE_WAIT + 2
    r = sb.execute("echo again", timeout=3)
    assert r.output == "again\n" and not r.notice, r
    sb.execute("unset KEPT; cd /app")


def test_a_shell_killed_in_its_save_is_said_on_the_next_result(sb: Sandbox) -> None:
    """`ulimit -f 0`: writing the state script kills bash (SIGXFSZ) after the command's result."""
    sb.execute("cd /tmp && export KEPT=before")
    r = sb.execute("ulimit -f 0; export LOST=yes; echo limited", timeout=3)
    assert r.output == "limited\n" and r.return_code == 0, r
    r = sb.execute("echo $KEPT $LOST; pwd; ulimit -f", timeout=3)
    assert r.output.startswith("before\n/tmp\n") and not r.output.endswith("\n0\n"), r
    assert r.notice and "the shell ended after the last command (killed by signal 25)" in r.notice, r
    sb.execute("unset KEPT; cd /app")


def test_the_next_command_waits_for_the_save_so_a_killed_shell_keeps_every_change(sb: Sandbox) -> None:
    """The host sends the next command as soon as it has the result; bash saves before it reads it."""
    for i in range(20):
        sb.execute(f"cd /usr && export ROUND={i} && f{i}() {{ echo {i}; }}")
        r = sb.execute("kill -9 $$", timeout=3)
        assert r.restarted, r
        r = sb.execute(f"echo $ROUND; pwd; f{i}", timeout=3)
        assert r.output == f"{i}\n/usr\n{i}\n", (i, r)
    sb.execute("unset ROUND; cd /app")


def test_every_kind_of_change_to_the_exports_is_saved(sb: Sandbox) -> None:
    """The loop prints `export -p` again only when what it prints from changed (it kept ~20 µs of
    each `true`): a value changed in place to one of the same length, an attribute alone, the export
    taken away, an exported variable unset, an unset one exported; and, printed each time, an
    exported array's element. Each must reach a new shell."""
    sb.execute("export SAME=aaaa CASE=abc GONE=1 DROP=1")
    changes = (
        "SAME=bbbb",
        "declare -u CASE",
        "export -n GONE",
        "unset DROP",
        "export NOVAL",
        "declare -ax ARR=(1 2)",
        "ARR[1]=3",
    )
    for change in changes:
        sb.execute(change)
        r = sb.execute("kill -9 $$", timeout=3)
        assert r.restarted, (change, r)
    r = sb.execute("CASE=xyz; echo $SAME $CASE ${ARR[1]} ${GONE-none} ${DROP-unset}; declare -p NOVAL", timeout=3)
    assert r.output == "bbbb XYZ 3 none unset\ndeclare -x NOVAL\n", r
    sb.execute("unset SAME CASE GONE NOVAL ARR")


def test_an_export_hidden_in_a_functions_scope_is_saved_after_it(sb: Sandbox) -> None:
    """In a function, a local variable not exported hides the exported one of the same name from
    `export -p`; a save made there (`__ss_end`, as a trap runs it) would print the exports without
    it while the copy they are printed from (every exported variable) still had it. Back at the top
    the copy would match, and that text would be saved again: a new shell would lose the variable."""
    if sb.hello.get("shell") != "loop":
        pytest.skip("the compiled loop's save (the bash functions print `export -p` every time)")
    sb.execute("export HID=1")
    r = sb.execute("f() { local +x HID=0; export OTHER=1; __ss_end; }; f; unset -f f")
    assert r.return_code == 0, r
    r = sb.execute("kill -9 $$", timeout=3)
    assert r.restarted, r
    r = sb.execute("echo ${HID-lost} $OTHER", timeout=3)
    assert r.output == "1 1\n", r
    sb.execute("unset HID OTHER")


def test_a_timed_out_command_whose_shell_ended_it_first_keeps_its_state(sb: Sandbox) -> None:
    """The model's USR2 trap swallows the agent's signal and the command ends as its child is killed:
    the shell is replaced once it has saved its state, so the command's changes are kept (a big
    function makes the save take a while: killed at once, the shell lost them)."""
    big = "eval \"big() { : $(head -c 20M /dev/zero | tr '\\0' x); }\""
    r = sb.execute(f"trap 'echo caught' USR2; cd /etc; export MINE=1; {big}; sleep 3", timeout=2)
    assert r.timed_out and "caught" in r.output, r
    r = sb.execute("echo $MINE; pwd; declare -f big | wc -c", timeout=3)
    assert r.output == f"1\n/etc\n{(20 << 20) + 20}\n", r
    sb.execute("trap - USR2; unset MINE; unset -f big; cd /app")


def test_an_exported_posixly_correct_does_not_break_every_new_shell(sb: Sandbox) -> None:
    """It turns posix mode on half way through the restore, where a function named `my-func` is an
    error that ends a non-interactive shell: unguarded, every replacement dies in its setup and no
    command runs again."""
    sb.execute("my-func() { echo mine; }; keepme() { echo kept; }; export KEEP=1; export POSIXLY_CORRECT=1")
    sb.execute("export SHELLOPTS")  # readonly: posix mode's `export SHELLOPTS=...` read back ended the shell too
    r = sb.execute("kill -9 $$", timeout=3)
    assert r.restarted, r
    r = sb.execute("echo ran $KEEP; keepme; my-func; [[ -o posix ]] && echo posix", timeout=3)
    assert r.output == "ran 1\nkept\nmine\nposix\n" and not r.restarted, r
    sb.execute("unset POSIXLY_CORRECT KEEP; set +o posix; export -n SHELLOPTS; unset -f my-func keepme")


def test_a_function_with_extended_patterns_is_restored_with_those_after_it(sb: Sandbox) -> None:
    """The state was read back with extglob off: a function using `@(x|y)` was a syntax error there,
    and it and every function saved after it were lost, without a word."""
    sb.execute("shopt -s extglob")  # (a line is parsed whole before it runs: on first, then the patterns)
    r = sb.execute("a_first() { echo a; }; m() { case $1 in @(x|y)) echo xy;; esac; }; z_last() { echo z; }")
    assert r.return_code == 0, r
    sb.execute("export ZVAR=kept")
    r = sb.execute("kill -9 $$", timeout=3)
    assert r.restarted, r
    r = sb.execute("a_first; m x; z_last; echo $ZVAR; shopt -q extglob && echo on", timeout=3)
    assert r.output == "a\nxy\nz\nkept\non\n", r
    sb.execute("shopt -u extglob; unset ZVAR; unset -f a_first m z_last")
    r = sb.execute("kill -9 $$", timeout=3)
    r = sb.execute("shopt -q extglob || echo off", timeout=3)  # and off when the model had it off
    assert r.output == "off\n", r


def planted(line: str) -> str:
    """A command that puts `line` first in both state scripts (the model may write them: root inside)."""
    return f"for f in {STATE}/state0.sh {STATE}/state1.sh; do [ -f $f ] && sed -i '1i {line}' $f; done"


def test_a_saved_state_that_ends_every_new_shell_gives_way_to_a_fresh_one(sb: Sandbox) -> None:
    """The state scripts are in the model's reach (root in the container): one that ends the shell
    reading it back ended every replacement, and no command ran again. The next shell starts
    without it, the result says so, and what is saved from then on is restored as before."""
    sb.execute("cd /tmp && export KEPT=before")
    r = sb.execute(f"{planted('builtin kill -9 $$')}; kill -9 $$", timeout=3)  # (no trap: `exit` would save over it)
    assert r.restarted, r
    r = sb.execute("echo alive; pwd; echo ${KEPT:-lost}", timeout=3)
    assert r.output == "alive\n/tmp\nlost\n" and r.return_code == 0, r
    assert r.notice and "ended while it read the saved state back" in r.notice, r
    assert "with the state saved before" not in r.notice, r
    r = sb.execute("echo again", timeout=3)
    assert r.output == "again\n" and not r.notice, r
    r = sb.execute("cd /app && export NEW=1; exit 4", timeout=3)
    assert r.restarted, r
    r = sb.execute("echo $NEW; pwd", timeout=3)
    assert r.output == "1\n/app\n" and not r.notice, r
    sb.execute("unset NEW")


def test_a_command_cannot_take_the_new_shells_ready_byte(sb: Sandbox) -> None:
    """Through the bash functions, a function of the model's named `exec` keeps the ready channel
    open in bash (its `exec N>&-` calls the function); were it a pipe, a command could reopen it
    through /proc for reading, take the byte and kill the shell: the agent would drop the saved
    state and run the command again. A socket cannot be reopened (ENXIO)."""
    sb.execute('exec() { builtin exec "$@"; }; export KEPT=yes', timeout=3)
    sb.execute("kill -9 $$", timeout=3)  # a new shell, whose setup's `exec N>&-` calls that function
    steal = "for f in /proc/$$/fd/*; do timeout 1 cat $f 2>/dev/null | head -c 1; done; kill -9 $$"
    r = sb.execute(steal, timeout=5)
    assert r.restarted and "." not in r.output, r
    r = sb.execute("echo ${KEPT:-lost}", timeout=3)
    assert r.output == "yes\n" and not r.notice, r
    sb.execute("unset -f exec; unset KEPT")


def test_a_shell_killed_while_it_reads_a_slow_state_back_keeps_the_state(sb: Sandbox) -> None:
    """A command that times out while its shell still reads the saved state back (a big state, or
    here a state script made slow once) kills that shell in its setup: the next one tries the state
    again before it gives up on it, so one timeout does not cost the exports and functions."""
    sb.execute("export KEPT=yes", timeout=3)
    slow = planted("[ -e /tmp/slow ] && { rm -f /tmp/slow; sleep 10; }")
    sb.execute(f"touch /tmp/slow; {slow}; kill -9 $$", timeout=3)
    r = sb.execute("echo ran", timeout=2)
    assert r.timed_out and "ran" not in r.output, r
    r = sb.execute("echo ${KEPT:-lost}", timeout=3)
    assert r.output == "yes\n" and "saved state" not in (r.notice or ""), r
