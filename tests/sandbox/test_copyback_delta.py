"""Copying back only what changed (delta.py): the periodic copy and `w` no longer tar all of /app.

On the local engine with workspace_transfer="archive" (the code path of a remote engine). The
listing comes from the agent, never from a program in the image the model may have replaced; the
tests below replace them, and put links where the changes would go.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandshell.config import Settings
from sandshell.sandbox import transfer
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]
ONLY = "only what changed"


@pytest.fixture
def archive() -> Settings:
    return _base_settings(sandbox={"exit_timeout": 5.0, "workspace_transfer": "archive", "sync_seconds": 0.0})


def _no_full_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("the whole of /app was copied")

    monkeypatch.setattr(transfer, "pull", refuse)


def test_only_changes_come_back(archive: Settings, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("keep.txt", "edit.txt", "gone.txt"):
        (workspace / name).write_text(f"{name}\n")
    (workspace / "old" / "deep").mkdir(parents=True)
    (workspace / "old" / "deep" / "f").write_text("f\n")
    with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
        _no_full_copy(monkeypatch)  # the listing made at the start is the first one compared with
        sb.execute(
            "cd /app && echo edited > edit.txt && rm gone.txt && rm -r old && mkdir -p new/sub && chmod 750 new"
            " && echo n > new/sub/n.txt && chmod 700 new/sub/n.txt && touch -r keep.txt /tmp/ref"
            " && echo KEEP.TXT > keep.txt && touch -r /tmp/ref keep.txt"  # same size, same mtime: only ctime moves
        )
        said = sb.sync_workspace()
        assert ONLY in said and "3 changed files" in said and "4 removed" in said, said  # gone.txt, old and in it 2
        assert (workspace / "edit.txt").read_text() == "edited\n"
        assert (workspace / "keep.txt").read_text() == "KEEP.TXT\n"
        assert not (workspace / "gone.txt").exists() and not (workspace / "old").exists()
        assert (workspace / "new" / "sub" / "n.txt").read_text() == "n\n"
        assert (workspace / "new").stat().st_mode & 0o777 == 0o750
        assert (workspace / "new" / "sub" / "n.txt").stat().st_mode & 0o777 == 0o700
        assert sb.sync_workspace().endswith(f"0 changed files, 0 bytes, 0 removed ({ONLY} since the last copy)")
        assert sorted(p.name for p in workspace.parent.iterdir()) == ["workspace"]  # no staging folder left
        monkeypatch.undo()


def test_links_and_fifos_take_the_full_copy(archive: Settings, workspace: Path) -> None:
    (workspace.parent / "secret").write_text("outside\n")
    with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
        sb.sync_workspace()
        sb.execute("cd /app && echo a > a && ln -s a alias && ln -s ../secret out")
        said = sb.sync_workspace()
        assert ONLY not in said and "1 refused" in said, said
        assert os.readlink(workspace / "alias") == "a" and not (workspace / "out").is_symlink()
        sb.execute("rm /app/out")
        assert ONLY not in sb.sync_workspace()  # something was refused last time: whole again
        sb.execute("echo b > /app/b")
        assert ONLY in sb.sync_workspace()


# A program of the model's in place of the image's own: it says it ran (a marker in /app, which the
# copy back would bring home) and does what the attack did, outside the agent's filter and limits:
# a big `fallocate`, the environment (a socket transport's token) read out.
HOSTILE = r"""#!/bin/sh
env > /app/.ran-$(basename "$0")
fallocate -l 2G /app/.big-$(basename "$0") 2>/dev/null
exit 0
"""


@pytest.mark.docker
def test_the_host_never_runs_the_models_find_or_tar(archive: Settings, workspace: Path) -> None:
    """The standard profile's model is root over the image: it replaces `find` and `tar` where the
    engine's exec would find them. Neither runs, whatever copy back happens (quick, full, the last)."""
    with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
        r = sb.execute(
            "for b in /usr/bin/find /bin/tar /usr/bin/tar /usr/local/bin/find /usr/local/bin/tar; do"
            f" cat > $b <<'EOF'\n{HOSTILE}EOF\nchmod 755 $b; done; echo x > /app/x; echo ok"
        )
        assert r.output.endswith("ok\n"), r
        said = sb.sync_workspace()
        assert ONLY in said and (workspace / "x").read_text() == "x\n", said  # listed, by the agent
        sb.execute("echo y > /app/y && ln -s y /app/alias")  # a link: the full copy
        said = sb.sync_workspace()
        assert ONLY not in said and (workspace / "y").read_text() == "y\n", said
        assert not [p.name for p in workspace.iterdir() if p.name.startswith(".")]
    assert sorted(p.name for p in workspace.iterdir()) == ["alias", "x", "y"]  # the last copy: no marker either


@pytest.mark.docker
def test_sparse_files_past_the_limit_never_come_back_dense(workspace: Path) -> None:
    """`truncate -s 40M` (under the file limit) many times takes no blocks: the workspace limit counts
    what a copy will write, so it trips, the copy back is refused before it writes, and a sparse file
    under the limit comes back sparse (quick or full)."""
    limit = 50_000_000
    s = _base_settings(
        sandbox={"exit_timeout": 30.0, "workspace_transfer": "archive", "sync_seconds": 0.0, "workspace_limit": limit}
    )
    with Sandbox(workspace=workspace, settings=s.sandbox) as sb:
        r = sb.execute("cd /app && for i in $(seq 40); do truncate -s 40M s$i; sleep 0.05; done; echo after")
        assert r.notice and "SANDSHELL_WORKSPACE_LIMIT" in r.notice and "after" not in r.output, r
        said = sb.sync_workspace()
        assert "not copied back" in said and "SANDSHELL_WORKSPACE_LIMIT" in said, said
        sb.execute("cd /app && rm -f s* && truncate -s 20M sparse && echo data > small")
        said = sb.sync_workspace()  # the whole (the last copy was refused)
        assert ONLY not in said and "2 files" in said, said
        sb.execute("cd /app && truncate -s 20M sparse2")
        said = sb.sync_workspace()
        assert ONLY in said and "1 changed files" in said, said
    for sparse in (workspace / "sparse", workspace / "sparse2"):  # a hole here too, both ways
        assert sparse.stat().st_size == 20 << 20 and sparse.stat().st_blocks * 512 < 1 << 20
    assert sum(p.stat().st_size for p in workspace.iterdir()) <= limit


def test_a_link_in_the_workspace_is_never_written_through(archive: Settings, workspace: Path) -> None:
    """The host folder holds links (made by the user) where the container has folders with a
    changed file: nothing is written through them. A folder that changed itself (a file added)
    replaces its link; one that did not (a file edited in place) makes the full copy run."""
    outside = workspace.parent / "outside"
    outside.mkdir()
    (workspace / "added").mkdir()
    (workspace / "edited").mkdir()
    (workspace / "edited" / "f").write_text("before\n")
    with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
        sb.sync_workspace()
        for name in ("added", "edited"):
            os.rename(workspace / name, workspace / f"{name}.moved")
            (workspace / name).symlink_to(outside)
        sb.execute("echo new > /app/added/f")
        said = sb.sync_workspace()
        assert ONLY in said and not (workspace / "added").is_symlink(), said
        assert (workspace / "added" / "f").read_text() == "new\n"
        sb.execute("echo after >> /app/edited/f")
        said = sb.sync_workspace()
        assert ONLY not in said and not (workspace / "edited").is_symlink(), said
        assert (workspace / "edited" / "f").read_text() == "before\nafter\n"
    assert not list(outside.iterdir())


def test_the_full_copy_replaces_a_file_in_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mirror renames a file or link over a file or link (never a moment without it); only a
    folder swapped for a file, or the other way, and what is gone are removed first."""
    new, ws = tmp_path / "new", tmp_path / "ws"
    for folder in (new, ws):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "f").write_text(f"{folder.name}\n")
    (new / "link").symlink_to("sub/f")
    (ws / "link").write_text("a file where the link comes\n")
    (new / "was-a-folder").write_text("now a file\n")
    (ws / "was-a-folder").mkdir()
    (ws / "gone").write_text("removed inside\n")
    removed: list[str] = []
    remove = transfer._remove
    monkeypatch.setattr(transfer, "_remove", lambda p: (removed.append(p.name), remove(p)))
    transfer._mirror(new, ws)
    assert sorted(removed) == ["gone", "was-a-folder"]
    assert (ws / "sub" / "f").read_text() == "new\n" and os.readlink(ws / "link") == "sub/f"
    assert (ws / "was-a-folder").read_text() == "now a file\n" and not (ws / "gone").exists()
