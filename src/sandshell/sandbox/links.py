"""Links that lead out of a finished tree, found by following the tree itself.

Each link is followed through the tree (lstat and readlink through descriptors, links in the
way included, at most MAX_HOPS), never with realpath, which gives up past PATH_MAX and so can be
made to see inside what leads out (CVE-2025-4517). Going above the top at any point, an absolute
target or too many links: out. All the checking together opens at most CHECK_BUDGET folders.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from sandshell.sandbox.dirfd import MAX_DEPTH, OUT, Refused, open_dir

MAX_HOPS = 40  # links followed while checking where one leads (the kernel's own limit)
CHECK_BUDGET = 2_000_000  # folders opened checking links, in all: past it, the links left count as out


class Links:
    """The links of the tree at the folder descriptor `root`."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.budget = CHECK_BUDGET  # many links in long chains could otherwise hold the copy for hours

    def leads_inside(self, folder: list[str], target: str) -> bool:
        """Whether the link in `folder` to `target` ends inside the tree, followed through the tree
        itself (links in the way included, at most MAX_HOPS). Going above the top at any point, an
        absolute target, or too many links: out."""
        where: list[str] = list(folder)
        todo = target.split("/")[::-1]
        hops = 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not where:
                    return False
                where.pop()
                continue
            link = self._read_link(where, part)
            if link is None:
                where.append(part)  # a folder, a file or nothing: further parts are taken as written
                if len(where) > 2 * MAX_DEPTH:
                    return False
                continue
            hops += 1
            if hops > MAX_HOPS or link.startswith("/") or not link:
                return False
            todo.extend(link.split("/")[::-1])
        return True

    def _stays_inside(self, folder: list[str], name: str) -> bool:
        try:
            return self.leads_inside(folder, self._read_link(folder, name) or "/")
        except Refused:  # the budget is spent: what is left is not kept
            return False

    def _read_link(self, folder: list[str], name: str) -> str | None:
        self.budget -= len(folder) + 1
        if self.budget < 0:
            raise Refused("too many links to check")
        try:
            fd = open_dir(self.root, folder)
        except (Refused, OSError):
            return None  # not a real folder: the kernel would not get further either
        try:
            if stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
                return os.readlink(name, dir_fd=fd)
            return None
        except OSError:
            return None
        finally:
            os.close(fd)

    def drop_out(self, refuse: Callable[[str, str], None]) -> None:
        """Remove the links that lead out of the finished tree, until none does (a link removed can
        change where another one leads). Links can lead out only together (`a -> b/..`, `b -> .`);
        the mirror makes the workspace hold exactly this tree, so inside here is inside there."""
        links: list[tuple[list[str], str]] = []
        folders: list[list[str]] = [[]]
        while folders:  # no recursion, never into a link
            folder = folders.pop()
            fd = open_dir(self.root, folder)
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_symlink():
                            links.append((folder, entry.name))
                        elif entry.is_dir(follow_symlinks=False):
                            folders.append([*folder, entry.name])
            finally:
                os.close(fd)
        while links:
            out = [(f, n) for f, n in links if not self._stays_inside(f, n)]
            if not out:
                return
            for folder, name in out:  # after checking all: one removed first changes where others lead
                fd = open_dir(self.root, folder)
                try:
                    os.unlink(name, dir_fd=fd)
                finally:
                    os.close(fd)
                refuse("/".join([*folder, name]), OUT if self.budget >= 0 else "too many links to check")
            links = [link for link in links if link not in out]
