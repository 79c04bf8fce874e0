"""A task's verdict cannot be forged from the model's shell: the check runs in a fresh sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandshell.eval.run import Variant, run_suite
from sandshell.eval.task import Task
from tests.conftest import _base_settings

pytestmark = pytest.mark.docker

FAKE_CAT = "printf '#!/bin/sh\\nprintf \"one\\\\ntwo\"\\n' > /tmp/cat && chmod +x /tmp/cat"
CHEATS = {
    "a shell function": "cat() { printf 'one\\ntwo'; }",
    "an alias": "shopt -s expand_aliases; alias cat=\"printf 'one\\ntwo'; true\"",
    "a PATH of its own": f"mkdir -p /tmp/b && {FAKE_CAT} && mv /tmp/cat /tmp/b/cat && export PATH=/tmp/b:$PATH",
    "a replaced /usr/bin/cat": f"{FAKE_CAT} && cp /tmp/cat /usr/bin/cat",
}
HONEST = {
    "an append": "echo two >> /app/list.txt",
    "a rewrite in a function": "f() { printf 'one\\ntwo\\n'; }; f > /app/list.txt",
}


def append_line(how: str) -> Task:
    """The shipped task `append-line`, solved by `how`."""
    return Task(
        name="append-line",
        goal="Add a line with the word two at the end of /app/list.txt",
        level="trivial",
        setup=('printf "one\\n" > /app/list.txt',),
        check='[ "$(cat /app/list.txt)" = "$(printf "one\\ntwo")" ]',
        step_limit=4,
        solution=({"bash": how}, {"done": "done"}),
    )


def verdicts(tmp_path: Path, ways: dict[str, str]) -> dict[str, bool]:
    settings = _base_settings(
        model={"intro": False}, sandbox={"exit_timeout": 10.0}
    )  # standard: the model may replace /usr/bin/cat
    variant = Variant("v", settings, solutions=True)
    results = [run_suite([append_line(how)], [variant], tmp_path / name)[0] for name, how in ways.items()]
    for result in results:
        assert result.status == "done", result.error
    return {name: r.passed for name, r in zip(ways, results, strict=True)}


def test_a_check_sees_no_function_alias_path_or_binary_the_model_left(tmp_path: Path) -> None:
    assert verdicts(tmp_path, CHEATS) == dict.fromkeys(CHEATS, False)


def test_honest_solutions_still_pass(tmp_path: Path) -> None:
    assert verdicts(tmp_path, HONEST) == dict.fromkeys(HONEST, True)
