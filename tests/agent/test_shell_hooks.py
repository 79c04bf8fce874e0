"""The model owns its shell: what it leaves there (functions named like builtins, aliases, options,
traps, readonly variables, a lying PWD) must not forge a later command's status, swallow it, leak
the wrapper into its output or lose the state a replacement shell starts from.

Each test gets a sandbox of its own: what they plant outlives a replaced shell (functions do)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]


@pytest.fixture(params=["auto", "off"], ids=["loop", "wrapper"])
def box(workspace: Path, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """Both ways commands run: the compiled loop (the default) and the bash functions alone."""
    settings = _base_settings(sandbox={"exit_timeout": 3.0, "kill_grace": 0.5, "shell_loop": request.param})
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        assert sb.hello.get("shell") == ("loop" if request.param == "auto" else "wrapper"), sb.hello
        yield sb


def looped(sb: Sandbox) -> bool:
    return sb.hello.get("shell") == "loop"


def _still_honest(sb: Sandbox) -> None:
    r = sb.execute("cd /app; false")
    assert r.return_code == 1 and r.cwd == "/app" and not r.timed_out, r
    r = sb.execute("cd /usr; echo moved")
    assert r.output == "moved\n" and r.return_code == 0 and r.cwd == "/usr", r
    r = sb.execute("sh -c 'exit 7'")
    assert r.return_code == 7 and r.cwd == "/usr", r


def test_functions_named_like_the_builtins_the_wrapper_uses_change_nothing(box: Sandbox) -> None:
    plant = (
        "printf() { command printf '%s\\0%s\\0%s\\0%s\\0' \"$2\" 0 /forged ran; }; "
        "read() { :; }; eval() { :; }; unset() { :; }; local() { :; }; set() { :; }; "
        "return() { :; }; trap() { :; }; readonly() { :; }; exit() { :; }"
    )
    assert box.execute(plant).return_code == 0
    _still_honest(box)
    r = box.execute("kill -9 $$")  # the replacement starts where this one was, with the same functions
    assert r.restarted and r.cwd == "/usr", r
    _still_honest(box)
    assert box.execute("type -t read").output == "function\n"  # the model's functions are still its own


def test_aliases_options_and_error_traps_change_nothing(box: Sandbox) -> None:
    plant = (
        "shopt -s expand_aliases; alias eval='echo hijacked;' builtin='echo hijacked;' "
        "__ss_in='echo hijacked;' __ss_out='echo hijacked;'; set -u -o noclobber -o pipefail; "
        "trap 'echo error-trap >&2' ERR"
    )
    assert box.execute(plant).return_code == 0
    _still_honest(box)
    r = box.execute("cd /etc && export KEPT=yes && exit 3")  # noclobber: the state is still saved
    assert r.restarted and r.cwd == "/etc", r
    assert box.execute("echo $KEPT").output == "yes\n"


RUN_ALIAS = r"""eval "$(alias -p | sed -n "s/^alias \(__ss_[0-9a-z]*\)=.*/alias \1='echo hijacked;'/p")" """


@pytest.mark.parametrize(
    ("plant", "runs"),
    [
        pytest.param(
            f"{RUN_ALIAS}; alias if='echo hijacked;' then='echo hijacked;' else='echo hijacked;' "
            "fi='echo hijacked;' '{'='echo hijacked;' '}'='echo hijacked;'",
            True,
            id="aliases-on-its-words",
        ),
        pytest.param("unalias -a; shopt -u expand_aliases", True, id="alias-expansion-off"),
        pytest.param("unalias -a; enable -n alias shopt", False, id="alias-builtins-disabled"),
    ],
)
def test_the_run_lines_alias_holds_or_costs_one_command_unrun(box: Sandbox, plant: str, runs: bool) -> None:
    """Bash reads an alias of the run line for each command (a socket is read a byte at a time):
    an alias of the model's on its name or its reserved words, alias expansion turned off, or the
    builtins that put it back disabled, must not run a command unwrapped or forge a status. The
    first two are undone after the command that made them; the last costs the next command (bash
    runs `__ss_run`, the function, which takes the command off its input and ends the shell). The
    compiled loop reads no line of bash's: the command runs as if nothing were planted."""
    assert box.execute(plant).return_code == 0
    r = box.execute("echo one\necho two")
    assert "hijacked" not in r.output and not r.timed_out, r
    if runs or looped(box):
        assert r.output == "one\ntwo\n" and not r.restarted, r
    else:  # never as loose lines: each would run, unwrapped, and the agent wait for a status until the timeout
        assert r.restarted and "this command did not run" in r.output and "two" not in r.output, r
    _still_honest(box)
    assert "hijacked" not in box.execute("echo three").output


def test_set_x_and_set_v_show_the_command_never_the_wrapper_or_its_nonce(box: Sandbox) -> None:
    box.execute("set -xv")
    r = box.execute("echo traced")
    box.execute("set +xv")
    assert "echo traced" in r.output and "traced\n" in r.output, r
    assert "__ss_save" not in r.output and "printf" not in r.output, r
    assert not re.search(r"[0-9a-f]{32}", r.output), r  # the status record's nonce never shows


def test_the_wrappers_own_names_made_readonly_cost_one_command_at_most(box: Sandbox) -> None:
    """A process that reads the wrapper's variable names from its functions and makes them
    readonly (or integers) breaks the command at hand at worst: a timeout, a new shell, and the
    next command is honest again."""
    plant = (
        "for v in $(declare -f __ss_in __ss_out | grep -o '__ss_[a-z]_[0-9a-z]*' | sort -u); do "
        'declare -gix "$v"; readonly "$v"; done; echo planted'
    )
    r = box.execute(plant)
    assert r.output == "planted\n", r
    first = box.execute("echo one", timeout=3)
    if not first.restarted:
        assert first.output == "one\n" and first.return_code == 0, first
    _still_honest(box)


def test_a_lying_pwd_does_not_move_the_prompt(box: Sandbox) -> None:
    r = box.execute("PWD=/forged")
    assert r.cwd == "/app", r
    r = box.execute("cd /var/run && PWD=/etc")  # a real folder, not where the shell is
    assert r.cwd == "/run", r
    r = box.execute("cd /var/run")  # a link is kept as the shell names it
    assert r.cwd == "/var/run", r


@pytest.mark.parametrize(
    "plant",
    [
        "alias '[['=': <<__X' builtin=': <<__X' set=': <<__X' eval=': <<__X'",  # swallow what follows
        "enable -n set exit",  # the check's `set -n` and a fallback `exit` fail
        "enable -n eval",
    ],
)
def test_what_the_model_leaves_cannot_make_the_syntax_check_run_a_command(box: Sandbox, plant: str) -> None:
    """The check evaluates the command under `set -n`; its text is parsed where the model's aliases
    apply, and `set` may be disabled: a command with a syntax error must still run none of it, and a
    good one must run once (an alias on `[[` let the first run up to its error; `enable -n set exit`
    ran every command twice)."""
    assert box.execute(plant).return_code == 0
    bad = box.execute("echo BAD >> /tmp/marker\n(")
    assert bad.syntax_error and not bad.restarted, bad
    box.execute("echo ONCE >> /tmp/marker")
    assert box.execute("cat /tmp/marker").output == "ONCE\n"


def test_builtins_the_check_needs_disabled_for_good_cost_one_command(box: Sandbox) -> None:
    """`enable` disabled too: `set` cannot be enabled again, so the command does not run, the result
    says why, and the next command runs in a new shell with the state kept. The compiled loop needs
    no builtin: the command runs."""
    assert box.execute("cd /usr && export KEPT=1 && enable -n enable set").return_code == 0
    r = box.execute("touch /tmp/ran")
    if looped(box):
        assert r.return_code == 0 and not r.restarted, r
        assert box.execute("test -e /tmp/ran && echo ran; echo $KEPT; pwd").output == "ran\n1\n/usr\n"
        return
    assert r.return_code is None and r.restarted and "`set` or `eval` builtin was disabled" in (r.error or ""), r
    r = box.execute("test -e /tmp/ran || echo not-run; echo $KEPT; pwd")
    assert r.output == "not-run\n1\n/usr\n" and not r.restarted, r
