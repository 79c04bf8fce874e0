"""Resetting the workspace: archived when it holds work, left alone when it is still fresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandshell import config
from sandshell.workspace import reset


def test_a_fresh_workspace_is_not_archived_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = config.load(env_file=None, environ={"SANDSHELL_HOME": str(tmp_path)})
    archive = tmp_path / "workspace-archive"
    assert reset(assume_yes=True, settings=s) == 0  # none yet: laid out, nothing to archive
    assert reset(assume_yes=True, settings=s) == 0  # as laid out: still nothing to archive
    assert not archive.exists() or not any(archive.iterdir())
    assert "already fresh" in capsys.readouterr().err
    (tmp_path / "workspace" / "goal").write_text("a goal of my own\n")
    assert reset(assume_yes=True, settings=s) == 0  # changed: kept in the archive
    assert len(list(archive.glob("workspace-*.tar.gz"))) == 1
    (tmp_path / "workspace" / "notes.md").write_text("")  # a new file, even empty, is work
    assert reset(assume_yes=True, settings=s) == 0
    assert len(list(archive.glob("workspace-*.tar.gz"))) == 2
