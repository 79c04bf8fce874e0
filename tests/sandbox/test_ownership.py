"""Files the model makes in a workspace owned by a host user come back to that user after each
command, without the agent walking the whole workspace every time (files.Owner)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sandshell.config import Settings
from sandshell.sandbox.sandbox import Sandbox
from sandshell_agent.files import Owner

pytestmark = [pytest.mark.docker]

UID, GID = 1234, 2345


def owned(path: Path) -> bool:
    st = path.lstat()
    return (st.st_uid, st.st_gid) == (UID, GID)


def test_a_file_made_deep_in_a_tree_already_looked_at_comes_back_at_once(workspace: Path, settings: Settings) -> None:
    """Only folders whose times moved are listed again: a new file deep down moves its own folder's."""
    os.chown(workspace, UID, GID)
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        # 200 processes: 2-3 s on a slow day (the fixture's timeout is 3 s: a loop cut short failed here)
        r = sb.execute("mkdir -p /app/a/b/c /app/d && for i in $(seq 1 200); do touch /app/d/f$i; done", timeout=60)
        assert r.ok, r
        assert owned(workspace / "a" / "b" / "c") and owned(workspace / "d" / "f200")
        for i in range(3):  # each right after its own command, folders above it unchanged
            sb.execute(f"echo {i} > /app/a/b/c/new{i} && ln -s new{i} /app/a/b/c/link{i}")
            assert owned(workspace / "a" / "b" / "c" / f"new{i}") and owned(workspace / "a" / "b" / "c" / f"link{i}")


def test_a_file_given_to_root_in_place_comes_back_within_the_full_walks_period(
    workspace: Path, settings: Settings
) -> None:
    """`chown` moves no folder's time: the full walk finds it, every Owner.FULL_SECONDS."""
    os.chown(workspace, UID, GID)
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        assert sb.execute("mkdir -p /app/x && echo hi > /app/x/f").ok
        assert owned(workspace / "x" / "f")
        sb.execute("chown 0:0 /app/x/f")
        deadline = time.monotonic() + Owner.FULL_SECONDS + 3
        while not owned(workspace / "x" / "f") and time.monotonic() < deadline:
            time.sleep(0.5)
            sb.execute("true")
        assert owned(workspace / "x" / "f")


def test_the_walk_is_bounded_and_a_folder_cut_short_is_listed_again(tmp_path: Path) -> None:
    """The bound counts entries, not folders; what a walk cut short did not list, the next one does."""
    if os.geteuid() != 0:
        return  # lchown to another uid needs root, as the agent has it
    big = tmp_path / "big"
    big.mkdir()
    for i in range(50):
        (big / f"f{i:02}").write_text("x")
    owner = Owner(str(tmp_path), UID, GID, limit=30)
    owner.full_at = time.monotonic()  # not a full walk: the bound alone decides
    owner.fix()
    first = sum(owned(p) for p in big.iterdir())
    assert 0 < first < 50, first
    for _ in range(5):
        owner.fix()
    assert all(owned(p) for p in big.iterdir())
