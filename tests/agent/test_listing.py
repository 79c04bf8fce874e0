"""The agent's listing of /app for the host's quick copy back (listing.py), read by the host's parser
(delta.parse): find's records, walked by descriptor, bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandshell.sandbox import delta
from sandshell_agent import listing


def test_the_listing_is_bounded_and_walked_by_descriptor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's walk (listing.py) gives find's records, names with newlines and spaces whole, and
    refuses past its bounds (the host then copies everything)."""
    (tmp_path / "a b\nc").mkdir()
    (tmp_path / "a b\nc" / "f").write_text("12345")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to("/etc/passwd")
    entries = delta.parse(listing.walk(str(tmp_path)))
    assert entries is not None and sorted(entries) == ["a b\nc", "a b\nc/f", "fifo", "link"]
    assert [entries[p].split(" ")[0] for p in sorted(entries)] == ["d", "f", "p", "l"]
    assert entries["a b\nc/f"].split(" ")[3] == "5" and delta.size(entries) == 5
    deep = tmp_path / "deep"
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(listing.MAX_DEPTH + 1):  # deeper than PATH_MAX allows a path: made by descriptor
        os.mkdir("d" * 200, dir_fd=fd)
        fd, old = os.open("d" * 200, os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    with pytest.raises(listing.TooBig, match="deep"):
        listing.walk(str(tmp_path))
    assert deep.parent.exists()
    monkeypatch.setattr(listing, "MAX_ENTRIES", 3)
    with pytest.raises(listing.TooBig, match="entries"):
        listing.walk(str(tmp_path))
