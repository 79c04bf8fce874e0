"""Unpacking /app's archive without trusting tarfile's filters (the host's Python, 3.11.7, predates
the 2025 fixes). Archives built by hand as an attacker would, each the shape of a published bypass;
every one wrote outside the destination with the code before untar.py (tarfile's `data` filter)."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sandshell.sandbox import links, untar

COMPONENT = "d" * 247
STEPS = "abcdefghijklmnop"  # 16 links to folders of 247 characters: realpath passes PATH_MAX


def _add(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"") -> None:
    info = tarfile.TarInfo(f"app/{name}")
    info.type, info.linkname, info.size, info.mode = kind, link, len(data), 0o755 if kind == tarfile.DIRTYPE else 0o644
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _archive(build: Callable[[tarfile.TarFile], None]) -> tempfile._TemporaryFileWrapper[bytes]:
    f = tempfile.NamedTemporaryFile()  # noqa: SIM115
    with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
        build(tar)
    f.seek(0)
    return f


def realpath_overflow(tar: tarfile.TarFile, through_links: bool = True) -> str:
    """CVE-2025-4517's shape: a chain of links whose resolved path is longer than PATH_MAX, so
    realpath stops following links and a check built on it sees the last link as inside. The
    published exploit names the long link through the chain (a/b/.../p/lll: a short name); a real
    folder's archive names it by its folders (ddd/.../ddd/lll: past PATH_MAX once joined to the
    destination). Returns the name of the link that leads one level above the top."""
    path = ""
    for step in STEPS:
        _add(tar, os.path.join(path, COMPONENT), tarfile.DIRTYPE)
        _add(tar, os.path.join(path, step), tarfile.SYMTYPE, COMPONENT)
        path = os.path.join(path, COMPONENT)
    long_link = os.path.join(*STEPS, "l" * 254)
    _add(tar, long_link if through_links else os.path.join(path, "l" * 254), tarfile.SYMTYPE, "../" * len(STEPS))
    _add(tar, "escape", tarfile.SYMTYPE, os.path.join(long_link, ".."))
    return "escape"


def write_through_the_chain(tar: tarfile.TarFile) -> None:
    """A file, a folder's times and a hard link through `escape` (CVE-2025-4517, 2024-12718, 2025-4330)."""
    escape = realpath_overflow(tar)
    _add(tar, f"{escape}/planted", data=b"written outside\n")
    _add(tar, escape, tarfile.DIRTYPE)  # tarfile sets a folder's mode and times through the link
    _add(tar, "flaglink", tarfile.LNKTYPE, f"app/{escape}/victim")  # a second name for a file outside
    _add(tar, "flaglink", data=b"overwritten\n")  # then written through it


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    (tmp_path / "victim").write_text("outside\n")
    os.utime(tmp_path, (1_000_000, 1_000_000))
    (tmp_path / "staging").mkdir()
    os.utime(tmp_path, (1_000_000, 1_000_000))
    return tmp_path / "staging"


def _outside_untouched(dest: Path) -> None:
    outside = dest.parent
    assert sorted(p.name for p in outside.iterdir()) == ["staging", "victim"], "something was written outside"
    assert (outside / "victim").read_text() == "outside\n"
    assert outside.stat().st_mtime == 1_000_000


def test_a_chain_of_links_past_path_max_writes_nothing_outside(dest: Path) -> None:
    with _archive(write_through_the_chain) as f:
        pulled = untar.unpack(f, dest)
    _outside_untouched(dest)
    assert not (dest / "escape").is_symlink(), "the link that leads out was kept"
    assert pulled.refused[1:] == ["escape/planted", "flaglink"], pulled.refused  # [0]: the long link, made through `a`
    assert (dest / "flaglink").read_text() == "overwritten\n" and (dest / "flaglink").stat().st_nlink == 1
    assert os.readlink(dest / "a") == COMPONENT  # links that stay inside are kept


def test_a_link_out_hidden_past_path_max_is_dropped_and_the_rest_still_comes(dest: Path) -> None:
    """As a real folder's archive holds the chain: realpath gives up past PATH_MAX, so a check built
    on it sees `escape` inside; followed through the tree itself it leads above the top. (Before,
    tarfile could not make the long link, looked for its target among the members, which read the
    rest of the archive away: the copy stopped there silently, and the mirror then deleted from the
    workspace everything after it.)"""

    def build(tar: tarfile.TarFile) -> None:
        realpath_overflow(tar, through_links=False)
        _add(tar, "after.txt", data=b"still here\n")

    with _archive(build) as f:
        pulled = untar.unpack(f, dest)
    assert (dest / "after.txt").read_text() == "still here\n"
    assert not (dest / "escape").is_symlink() and pulled.refused == ["escape"], pulled.refused
    assert os.readlink(dest / "a") == COMPONENT
    _outside_untouched(dest)


def test_a_link_then_a_file_through_it_is_refused_even_inside(dest: Path) -> None:
    """Nothing is ever written through a link, even one that stays inside: a component must be a folder."""

    def build(tar: tarfile.TarFile) -> None:
        _add(tar, "sub", tarfile.DIRTYPE)
        _add(tar, "alias", tarfile.SYMTYPE, "sub")
        _add(tar, "alias/through", data=b"x")
        _add(tar, "up", tarfile.SYMTYPE, "..")
        _add(tar, "up/staging-sibling", data=b"x")
        _add(tar, "sub/ok", data=b"ok\n")

    with _archive(build) as f:
        pulled = untar.unpack(f, dest)
    _outside_untouched(dest)
    assert not (dest / "sub" / "through").exists() and (dest / "sub" / "ok").read_text() == "ok\n"
    assert pulled.refused == ["alias/through", "up/staging-sibling", "up"], pulled.refused
    assert os.readlink(dest / "alias") == "sub"


def test_names_and_types_tarfile_would_take(dest: Path) -> None:
    """Absolute names, `..`, empty symlink names or targets, devices, a file over a folder."""

    def build(tar: tarfile.TarFile) -> None:
        _add(tar, "../victim", data=b"x")
        _add(tar, "a/../../victim", data=b"x")
        _add(tar, "abs", tarfile.SYMTYPE, "/etc")
        _add(tar, "empty", tarfile.SYMTYPE, "")
        _add(tar, "dev", tarfile.CHRTYPE)
        _add(tar, "fifo", tarfile.FIFOTYPE)
        _add(tar, "folder", tarfile.DIRTYPE)
        _add(tar, "folder/kept", data=b"kept\n")
        _add(tar, "folder", data=b"a file where a folder is")
        _add(tar, "loop1", tarfile.SYMTYPE, "loop2/x")
        _add(tar, "loop2", tarfile.SYMTYPE, "loop1/x")

    with _archive(build) as f:
        pulled = untar.unpack(f, dest)
    _outside_untouched(dest)
    assert sorted(p.name for p in dest.iterdir()) == ["folder"]
    assert (dest / "folder" / "kept").read_text() == "kept\n"
    assert pulled.refused_count == 9, pulled.refused


def test_modes_owner_and_times_are_set_on_what_is_written(dest: Path) -> None:
    def build(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("app/tool")
        info.mode, info.mtime, info.size = 0o6777, 1_234_567, 2
        tar.addfile(info, io.BytesIO(b"#!"))
        _add(tar, "d", tarfile.DIRTYPE)

    with _archive(build) as f:
        pulled = untar.unpack(f, dest, (os.getuid(), os.getgid()))
    st = (dest / "tool").stat()
    assert (st.st_mode & 0o7777, st.st_mtime) == (0o755, 1_234_567)
    assert pulled.files == 1 and pulled.size == 2


def test_checking_links_is_bounded(dest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Links in long chains (each check follows up to 40): past a budget of folders opened, the
    links not yet found inside are dropped, and the copy ends (before: no bound but realpath's)."""
    monkeypatch.setattr(links, "CHECK_BUDGET", 2000)

    def build(tar: tarfile.TarFile) -> None:
        _add(tar, "l0", tarfile.SYMTYPE, ".")
        for i in range(1, 200):
            _add(tar, f"l{i}", tarfile.SYMTYPE, f"l{i - 1}/" * 2)
        _add(tar, "file", data=b"kept\n")

    with _archive(build) as f:
        pulled = untar.unpack(f, dest)
    assert "too many links to check" in pulled.why and (dest / "file").read_text() == "kept\n"
    assert {p.name for p in dest.iterdir() if p.is_symlink()} <= {f"l{i}" for i in range(5)}  # l5 on: > 40 links
    _outside_untouched(dest)
