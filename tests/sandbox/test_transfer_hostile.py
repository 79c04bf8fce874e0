"""Copying /app back (archive transfer, rw mode) while the model, inside, acts against the host.

Run on the local engine with workspace_transfer="archive": the same code path as a remote engine,
without a second dockerd. The locked profile (uid 0 without capabilities, no network) is enough for
every move here: FIFOs, hard links, links, deep folders and odd names need no capability.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import tempfile
import tracemalloc
from pathlib import Path

import docker
import pytest

from sandshell.config import Settings
from sandshell.errors import DockerUnavailable
from sandshell.sandbox import engine, transfer, untar
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


@pytest.fixture
def archive() -> Settings:
    return _base_settings(
        sandbox={
            "exit_timeout": 3.0,
            "kill_grace": 0.5,
            "workspace_transfer": "archive",
            "sync_seconds": 0.0,
            "profile": "locked",
        }
    )


def _rm(path: Path) -> None:
    subprocess.run(["rm", "-rf", str(path)], check=True)  # shutil.rmtree recurses: a deep tree breaks it


def test_a_hard_link_to_a_refused_entry_is_refused_too(archive: Settings, workspace: Path) -> None:
    """A FIFO or a link out, given a second name with `ln`: the tar holds the second name as a hard
    link to the first, which the filter refused; tarfile then looks for it by name and raises KeyError."""
    (workspace / "keep.txt").write_text("keep\n")
    with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
        sb.execute("cd /app && mkfifo f && ln f g && ln -s /etc/shadow s && ln s h && echo in > a && ln a b")
        said = sb.sync_workspace()
        assert "copied back" in said and "4 refused" in said, said
        assert (workspace / "b").read_text() == "in\n"
        assert (workspace / "b").stat().st_ino == (workspace / "a").stat().st_ino
        for name in "fgsh":
            assert not (workspace / name).exists() and not (workspace / name).is_symlink(), name
    assert (workspace / "keep.txt").read_text() == "keep\n"  # copied back at the end too, without a traceback


def test_links_that_lead_out_only_together_never_reach_the_workspace(archive: Settings, workspace: Path) -> None:
    """Each link is checked when unpacked, against the tree so far: `a -> b/..` is inside while b does
    not exist, `b -> .` is inside; together a leads to the workspace's parent."""
    (workspace.parent / "secret").write_text("outside\n")
    with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
        sb.execute("cd /app && ln -s b/.. a && ln -s . b && mkdir sub && ln -s b/../.. sub/a && ln -s . sub/b")
        said = sb.sync_workspace()
        assert "copied back" in said and "2 refused" in said, said
    root = os.path.realpath(workspace)
    for link in (workspace / "a", workspace / "sub" / "a"):
        assert not link.is_symlink() or os.path.commonpath([os.path.realpath(link), root]) == root, link
    assert not (workspace / "a" / "secret").exists()
    assert os.readlink(workspace / "b") == "."  # a link that stays inside is kept


def test_a_deep_tree_never_crashes_the_copy_back(archive: Settings, workspace: Path) -> None:
    """1100 nested folders: deeper than Python's recursion limit (the mirror and shutil.rmtree recurse)."""
    (workspace / "keep.txt").write_text("keep\n")
    make = "import os\nos.chdir('/app')\nfor _ in range(1100): os.mkdir('a'); os.chdir('a')\nopen('d', 'w')\n"
    try:
        with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
            sb.execute(f'python3 -c "{make}"')
            for _ in range(2):  # the second copy walks into the tree the first one brought
                said = sb.sync_workspace()
                assert "copied back" in said and "too deep" in said, said
            sb.execute("rm -rf /app/a")
        assert (workspace / "keep.txt").read_text() == "keep\n"
        assert not (workspace / "a").exists()
        assert sorted(p.name for p in workspace.parent.iterdir()) == ["workspace"]  # no staging folder left
    finally:
        _rm(workspace / "a")


def test_names_never_break_a_line_of_what_is_said(archive: Settings, workspace: Path) -> None:
    """Odd names come back as they are; a refused one is named on one line (no fake log line)."""
    names = ["new\nline", "bad\udcff", "L" * 255, ".workspace.sync-deadbeef", ".workspace", "-rf"]
    with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
        sb.execute(
            r"""cd /app && touch "$(printf 'new\nline')" "$(printf 'bad\xff')" "$(printf 'L%.0s' $(seq 255))" """
            r""".workspace.sync-deadbeef .workspace ./-rf && mkdir noperm && echo x > noperm/f && chmod 000 noperm """
            r"""&& ln -s /etc "$(printf 'out\nsandshell: all copied')" """
        )
        said = sb.sync_workspace()
        assert "\n" not in said and "1 refused" in said and r"out\nsandshell" in said, said
        sb.execute("chmod 755 /app/noperm")
    for name in names:
        assert (workspace / name).is_file(), name
    assert (workspace / "noperm" / "f").read_text() == "x\n"
    assert sorted(p.name for p in workspace.parent.iterdir()) == ["workspace"]


def test_too_many_entries_leave_the_workspace_as_it_was(
    archive: Settings, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty files cost no bytes on disk, so the byte limit lets millions through; the entry bound stops them."""
    monkeypatch.setattr(untar, "MAX_ENTRIES", 2000)
    (workspace / "keep.txt").write_text("keep\n")
    with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
        sb.execute("cd /app && rm keep.txt && touch $(seq -f 'f%g' 3000)")
        said = sb.sync_workspace()
        assert "more than 2000" in said and "as before" in said, said
        sb.execute("rm -f /app/f*")
    assert sorted(p.name for p in workspace.iterdir()) == []  # the end: what /app holds, now few entries


def test_unpacking_holds_one_entry_at_a_time(tmp_path: Path) -> None:
    """tarfile keeps every member it has read (about 600 bytes each): 8 million empty files, within
    the default 4 GiB, would take ~5 GB of the host's memory."""
    staging = tmp_path / "staging"
    staging.mkdir()
    with tempfile.TemporaryFile() as tar_file:
        with tarfile.open(fileobj=tar_file, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for i in range(20000):
                tar.addfile(tarfile.TarInfo(f"app/{'x' * 100}{i}"))
        tar_file.seek(0)
        tracemalloc.start()
        try:
            pulled = untar.unpack(tar_file, staging)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert pulled.files == 20000
    assert peak < 8 * 1024 * 1024, f"{peak} bytes for 20000 entries"


def test_an_unforeseen_failure_of_the_copy_back_is_one_sentence_and_the_container_goes(
    archive: Settings, workspace: Path, monkeypatch: pytest.MonkeyPatch, docker_client: docker.DockerClient
) -> None:
    """Before: a KeyError or RecursionError from unpacking went up through kill(), and the container
    was never removed (it ran on until the next session's reaper)."""

    def broken(*_a: object, **_k: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    said: list[str] = []
    with Sandbox(workspace=workspace, settings=archive.sandbox, log=said.append) as sb:
        monkeypatch.setattr(transfer, "pull", broken)
        name = sb.container.name
        assert sb.sync_workspace() == said[-1]
    assert said[-1].startswith("/app was not copied back (RecursionError: maximum recursion"), said
    assert not docker_client.containers.list(all=True, filters={"name": name})


def test_a_file_growing_while_tar_runs_leaves_the_workspace_whole(archive: Settings, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("keep\n")
    grow = "f = open('/app/grow', 'ab')\nwhile True:\n"
    grow += "    f.write(b'x' * 65536); f.flush()\n    f.tell() > 8 << 20 and f.truncate(0)"
    with Sandbox(workspace=workspace, settings=archive.sandbox) as sb:
        sb.execute(f'(python3 -c "{grow}" &); sleep 0.5')
        for _ in range(4):
            said = sb.sync_workspace()
            assert "copied back" in said or "as before" in said, said
            assert (workspace / "keep.txt").read_text() == "keep\n"
        sb.execute("pkill -f grow; rm -f /app/grow")


def test_a_certificate_folder_without_tls_verify_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docker-py turns DOCKER_CERT_PATH without DOCKER_TLS_VERIFY into TLS that checks no certificate."""
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(tmp_path))
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    with pytest.raises(DockerUnavailable, match="DOCKER_TLS_VERIFY"):
        engine.client(_base_settings().sandbox)
    assert os.environ["DOCKER_HOST"] == "tcp://127.0.0.1:9"
