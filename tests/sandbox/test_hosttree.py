"""The host's own walks of a workspace the model has written (hosttree.py): reset's archive, the copy
of a workspace into a container, the removal after an archive. Made as the model would leave them:
folders nested past Python's recursion limit, sparse files of a terabyte, FIFOs, hard links."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandshell.errors import SandboxError, SandshellError
from sandshell.sandbox import hosttree, transfer
from sandshell.sandbox.sandbox import Sandbox
from sandshell.workspace import archive, reset
from tests.conftest import _base_settings

DEEP = 1200  # past Python's recursion limit (1,000): tarfile.add and shutil.rmtree raised RecursionError


@pytest.fixture
def tmp_path(tmp_path: Path) -> Iterator[Path]:
    """pytest's own folder, emptied after the test by descriptor: its recursive clean-up of old
    folders hit the recursion limit on what these tests leave."""
    yield tmp_path
    for name in os.listdir(tmp_path):
        hosttree.remove(tmp_path, name)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


def _nest(root: Path, depth: int) -> None:
    """`depth` folders one in another, a file at the bottom (made by descriptor: the path is past PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("dd", dir_fd=fd)
        fd, old = os.open("dd", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
        f.write("found\n")
    os.close(fd)


BOTTOM = "/".join(["dd"] * DEEP + ["bottom"])


def test_a_folder_nested_past_the_recursion_limit_is_archived_packed_and_removed(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    _nest(ws, DEEP)
    saved = archive(ws, tmp_path / "archive")
    with tarfile.open(saved) as tar:
        assert "workspace/" + BOTTOM in tar.getnames()
    with transfer.pack(ws) as data, tarfile.open(fileobj=data) as tar:
        member = tar.getmember(BOTTOM)
        assert tar.extractfile(member).read() == b"found\n"  # type: ignore[union-attr]
    hosttree.remove(ws, "dd")
    assert list(ws.iterdir()) == []


def test_a_bound_reached_is_one_sentence_and_leaves_nothing(tmp_path: Path) -> None:
    """Past a bound of its depth or entries the walk stops with one sentence; an archive that stops
    leaves no file behind."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    _nest(ws, 50)
    with pytest.raises(hosttree.TooBig, match="more than 10 deep"):
        list(hosttree.walk(ws, hosttree.Bounds(depth=10)))
    with pytest.raises(hosttree.TooBig, match="more than 20 entries"):
        list(hosttree.walk(ws, hosttree.Bounds(entries=20)))
    with pytest.raises(hosttree.TooBig):
        archive(ws, tmp_path / "archive", limit=1)
    assert sorted(os.listdir(tmp_path)) == ["archive", "workspace"] and not os.listdir(tmp_path / "archive")


def test_sparse_files_past_the_limit_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """A terabyte of apparent size in 4 KiB of blocks: reset's archive and the copy into a container
    each refuse it in one sentence at once, and no archive, partial or whole, is left."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    for i in range(1000):
        os.truncate(os.open(ws / f"s{i}", os.O_WRONLY | os.O_CREAT, 0o644), 1 << 30)
    with pytest.raises(hosttree.TooBig, match=r"more than 100000000 bytes \(sparse files counted at their full size"):
        archive(ws, tmp_path / "archive", limit=100_000_000)
    assert list((tmp_path / "archive").iterdir()) == []
    with pytest.raises(SandboxError, match="cannot be copied in: its files hold more than 100000000 bytes"):
        transfer.pack(ws, limit=100_000_000)
    settings = _base_settings(sandbox={"workspace": str(ws), "workspace_limit": 100_000_000})
    with pytest.raises(SandshellError, match=r"the workspace was not archived: .* nothing was changed"):
        reset(assume_yes=True, settings=settings)
    assert len(os.listdir(ws)) == 1000


def test_a_sparse_file_under_the_limit_is_packed_with_its_holes(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    for i in range(3):
        os.truncate(os.open(ws / f"s{i}", os.O_WRONLY | os.O_CREAT, 0o644), 100 << 20)
    (ws / "data").write_bytes(b"x" * 10_000)
    with transfer.pack(ws, limit=400 << 20) as data:
        assert os.fstat(data.fileno()).st_blocks * 512 < 1 << 20  # 300 MiB had been written out
        with tarfile.open(fileobj=data) as tar:
            assert [m.size for m in tar.getmembers()] == [10_000, 100 << 20, 100 << 20, 100 << 20]
            assert tar.extractfile("data").read() == b"x" * 10_000  # type: ignore[union-attr]


def test_fifos_links_and_hard_links_are_archived_as_themselves(tmp_path: Path) -> None:
    """Nothing the walk meets is opened but a regular file (a FIFO would block a reader forever), and
    nothing is followed (a link out of the workspace is stored as a link)."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    (tmp_path / "secret").write_text("outside\n")
    os.mkfifo(ws / "fifo")
    (ws / "out").symlink_to(tmp_path / "secret")
    (ws / "a\nb").write_text("newline\n")
    os.link(ws / "a\nb", ws / "second")
    saved = archive(ws, tmp_path / "archive")
    with tarfile.open(saved) as tar:
        kinds = {m.name: m for m in tar.getmembers()}
    assert kinds["workspace/fifo"].isfifo() and kinds["workspace/out"].issym()
    assert kinds["workspace/a\nb"].isreg() and kinds["workspace/second"].islnk()
    assert kinds["workspace/second"].linkname == "workspace/a\nb"


@pytest.mark.docker
def test_a_copy_mode_start_takes_a_folder_nested_past_the_recursion_limit(workspace: Path) -> None:
    _nest(workspace, DEEP)
    with Sandbox(workspace=workspace, settings=_base_settings(sandbox={"workspace_mode": "copy"}).sandbox) as sb:
        r = sb.execute(f"cat /app/{BOTTOM}")
        assert r.output == "found\n", r


@pytest.mark.docker
def test_the_copy_back_replaces_a_folder_nested_past_the_recursion_limit(workspace: Path) -> None:
    """Archive transfer: the model turns one deep folder into a file and another into a link; the
    copy back takes both out of the host folder (shutil.rmtree raised RecursionError: not copied)."""
    for name in ("x", "y"):
        (workspace / name).mkdir()
        _nest(workspace / name, DEEP)
    settings = _base_settings(sandbox={"workspace_transfer": "archive", "sync_seconds": 0.0, "exit_timeout": 30.0})
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        sb.execute("rm -rf /app/x /app/y && echo file > /app/x && ln -s x /app/y")
        said = sb.sync_workspace()
        assert "not copied back" not in said and "refused" not in said, said
        assert (workspace / "x").read_text() == "file\n" and (workspace / "y").is_symlink()
        sb.execute("echo more >> /app/x")
        said = sb.sync_workspace()  # nothing deep left: the agent lists /app, the quick copy runs
        assert "only what changed" in said and (workspace / "x").read_text() == "file\nmore\n", said
    assert sorted(os.listdir(workspace)) == ["x", "y"]
