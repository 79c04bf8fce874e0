"""A result says what happened to the command it is for: a shell that dies because the command
took its input away is not an exit 0, and a fork bomb an earlier command left running is not
blamed on the innocent command it interrupts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    ("loop", "command"),
    [
        ("auto", "exec 202<&-"),  # the compiled loop's input (`ls -l /proc/$$/fd` shows it)
        ("auto", "true; exec 202<&- 2>/dev/null; echo still"),
        ("off", "exec 10<&-"),  # the bash functions' saved input
    ],
)
def test_a_command_that_takes_the_shells_input_away_is_not_a_success(workspace: Path, loop: str, command: str) -> None:
    settings = _base_settings(sandbox={"exit_timeout": 5.0, "kill_grace": 0.5, "shell_loop": loop})
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        sb.execute("export KEPT=yes; cd /tmp")
        r = sb.execute(command)
        assert not r.ok and r.return_code is None, r
        assert r.error and "could read no further command" in r.error and "a new shell started" in r.error, r
        after = sb.execute("echo $KEPT $PWD")
        assert after.ok and after.notice is None and after.output == "yes /tmp\n", after  # nothing blamed here


def test_closing_its_standard_input_is_the_commands_own_business(workspace: Path) -> None:
    """`exec 0<&-` takes nothing from the shell (it reads its commands elsewhere): an exit 0 as it was;
    `exit 2` is the command's own end, said as such."""
    with Sandbox(workspace=workspace, settings=_base_settings(sandbox={"exit_timeout": 5.0}).sandbox) as sb:
        for command in ("exec 0<&-", "exec <&-", "exec 0</dev/null"):
            r = sb.execute(command)
            assert r.ok and r.error is None, r
        assert sb.execute("echo next").output == "next\n"
        r = sb.execute("exit 2")  # the shell's end, with its own status: not taken for a lost input
        assert r.return_code == 2 and "input" not in (r.error or ""), r


def test_a_fork_bomb_left_in_the_background_is_not_blamed_on_the_next_command(workspace: Path) -> None:
    settings = _base_settings(sandbox={"exit_timeout": 20.0, "kill_grace": 0.5, "pids_limit": 128})
    bomb = "bomb() { bomb | bomb & }; bomb"
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        left = sb.execute(f"(sleep 1; {bomb}) &")
        assert left.ok and left.notice is None, left
        innocent = sb.execute("sleep 8; echo innocent")  # the bomb goes off while this one runs
        said = innocent.notice or ""
        assert "processes reached the limit" in said, innocent
        assert "not started by this command" in said and "stopped with them" in said, innocent
        time.sleep(0.5)
        r = sb.execute("echo next")
        assert r.ok and r.notice is None and r.output == "next\n", r
