"""Copying back only what changed (delta.py): the periodic copy and `w` no longer tar all of /app.

On the local engine with workspace_transfer="archive" (the code path of a remote engine). The
listing comes from inside, so the model can lie in it: tests below lie, and put links where the
changes would go; the worst a lie may do is make the full copy run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sandshell.config import Settings
from sandshell.sandbox import delta, transfer
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]
ONLY = "only what changed"


@pytest.fixture
def archive() -> Settings:
    return _base_settings(exit_timeout=5.0, workspace_transfer="archive", sync_seconds=0.0)


def _no_full_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("the whole of /app was copied")

    monkeypatch.setattr(transfer, "pull", refuse)


def test_only_changes_come_back(archive: Settings, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("keep.txt", "edit.txt", "gone.txt"):
        (workspace / name).write_text(f"{name}\n")
    (workspace / "old" / "deep").mkdir(parents=True)
    (workspace / "old" / "deep" / "f").write_text("f\n")
    with Sandbox(workspace=workspace, settings=archive) as sb:
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
    with Sandbox(workspace=workspace, settings=archive) as sb:
        sb.sync_workspace()
        sb.execute("cd /app && echo a > a && ln -s a alias && ln -s ../secret out")
        said = sb.sync_workspace()
        assert ONLY not in said and "1 refused" in said, said
        assert os.readlink(workspace / "alias") == "a" and not (workspace / "out").is_symlink()
        sb.execute("rm /app/out")
        assert ONLY not in sb.sync_workspace()  # something was refused last time: whole again
        sb.execute("echo b > /app/b")
        assert ONLY in sb.sync_workspace()


def _fake_find(sb: Sandbox, prints: str) -> None:
    script = f'#!/bin/sh\nprintf "{prints}"\n'
    r = sb.execute(f"cat > /usr/local/bin/find <<'EOF'\n{script}EOF\nchmod 755 /usr/local/bin/find; echo ok")
    assert r.output.endswith("ok\n"), r


def test_a_lying_listing_only_makes_the_full_copy_run(archive: Settings, workspace: Path) -> None:
    """The model puts its own `find` first on PATH: first it names a path out of /app, then it
    calls a link out a plain file that changed. Nothing outside is touched, no link out comes
    back; the full copy runs instead and brings the truth."""
    (workspace.parent / "secret").write_text("outside\n")
    with Sandbox(workspace=workspace, settings=archive) as sb:
        sb.sync_workspace()
        _fake_find(sb, r"f 644 1 5 1.0 1 ../secret\0")
        sb.execute("ln -s /etc/passwd /app/x")
        said = sb.sync_workspace()
        assert ONLY not in said and "1 refused" in said, said
        sb.execute("rm /app/x && echo real > /app/x")
        said = sb.sync_workspace()
        assert ONLY not in said and (workspace / "x").read_text() == "real\n", said
        _fake_find(sb, r"f 644 1 5 $(date +%s.%N) 2 x\0")  # x always looks changed
        assert ONLY not in sb.sync_workspace()  # the last one made no listing: whole
        assert ONLY in sb.sync_workspace()
        sb.execute("rm /app/x && ln -s /etc/passwd /app/x")
        said = sb.sync_workspace()
        assert ONLY not in said and "1 refused" in said, said
        assert not (workspace / "x").is_symlink() and not (workspace / "x").exists()
    assert (workspace.parent / "secret").read_text() == "outside\n"


def test_a_listing_with_a_malformed_field_only_makes_the_full_copy_run(archive: Settings, workspace: Path) -> None:
    """A `find` of the model's that prints a folder whose mode is not a number: the quick copy
    parsed it and its ValueError went past the copy back's fallback."""
    with Sandbox(workspace=workspace, settings=archive) as sb:
        sb.sync_workspace()
        sb.execute("echo real > /app/y")
        _fake_find(sb, r"d zz 1 5 1.0 3 sub\0")
        said = sb.sync_workspace()
        assert ONLY not in said and (workspace / "y").read_text() == "real\n", said


def test_a_find_that_never_ends_holds_the_copy_only_briefly(
    archive: Settings, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delta, "LIST_SECONDS", 2)
    with Sandbox(workspace=workspace, settings=archive) as sb:
        sb.sync_workspace()
        r = sb.execute("printf '#!/bin/sh\\nexec sleep 600\\n' > /usr/local/bin/find; chmod 755 /usr/local/bin/find")
        assert r.return_code == 0, r
        sb.execute("echo x > /app/x")
        start = time.monotonic()
        said = sb.sync_workspace()  # the listing gives up at 2 s, the whole copy follows
        assert ONLY not in said and (workspace / "x").read_text() == "x\n", said
        assert time.monotonic() - start < 2 + 10


def test_a_link_in_the_workspace_is_never_written_through(archive: Settings, workspace: Path) -> None:
    """The host folder holds links (made by the user) where the container has folders with a
    changed file: nothing is written through them. A folder that changed itself (a file added)
    replaces its link; one that did not (a file edited in place) makes the full copy run."""
    outside = workspace.parent / "outside"
    outside.mkdir()
    (workspace / "added").mkdir()
    (workspace / "edited").mkdir()
    (workspace / "edited" / "f").write_text("before\n")
    with Sandbox(workspace=workspace, settings=archive) as sb:
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
