"""Attacks on the agent from inside, written as a careless model or a hostile process would make
them: each leaves something in the shell or the filesystem, and the agent must still report the
truth, keep the state a replacement shell starts from, and stay alive.

Each test gets a sandbox of its own: what they plant outlives a replaced shell (functions do)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandshell.sandbox.sandbox import Sandbox

from .conftest import _base_settings


@pytest.fixture
def box(workspace: Path) -> Iterator[Sandbox]:
    with Sandbox(workspace=workspace, settings=_base_settings(exit_timeout=3.0, kill_grace=0.5)) as sb:
        yield sb


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
