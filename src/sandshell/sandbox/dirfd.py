"""Folders reached only through descriptors: every component opened with O_NOFOLLOW|O_DIRECTORY
relative to the one before, so a link (or a file) anywhere on the way is refused, never followed,
and no path is ever longer than one name (PATH_MAX does not apply)."""

from __future__ import annotations

import os

MAX_DEPTH = 200  # folders in folders: deeper ones are refused
OUT = "links out of it, devices"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """One entry is not written; the reason is said in the summary."""


def parts(name: str) -> list[str]:
    """The components of a relative name; Refused for an absolute one, `.`/`..`, or one too deep."""
    split = name.split("/")
    if any(p in ("", ".", "..") for p in split):
        raise Refused(OUT)
    if len(split) > MAX_DEPTH:
        raise Refused("too deep")
    return split


def open_dir(
    root: int, names: list[str] | tuple[str, ...], create: bool = False, owner: tuple[int, int] | None = None
) -> int:
    """A new descriptor of the folder at `names` under the folder `root`, never through a link
    (Refused if a link or a file is in the way); missing folders are made (0700, `owner`'s) if `create`."""
    fd = os.dup(root)
    try:
        for name in names:
            try:
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o700, dir_fd=fd)
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
                if owner is not None:
                    os.fchown(nxt, *owner)
            except OSError:
                raise Refused(OUT) from None  # ELOOP (a link) or ENOTDIR (a file) in the way
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise
