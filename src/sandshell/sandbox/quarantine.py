"""What host tools would run from the workspace after a session, found and moved out of their way.

The model writes the workspace; the host user's git, shell prompt and editor then read it. Git runs
programs its repository names (`core.fsmonitor` on every `git status`, hooks, pagers, diff and
filter drivers, `include.path` pulling in more), and finds repositories by their shape anywhere
(a `.git` folder, a `.git` file pointing elsewhere, a bare repository's HEAD, objects and refs);
editors and shell hooks run task and environment files they find (`.envrc`, `.vscode/`...).

Once the container is gone (nothing inside can write any more), `scan` walks the workspace without
following links and looks at every such file the session changed: the kernel's change time (ctime),
which a process cannot set, is after the session began. A repository's config keeps only keys that
name no program (`git config --list` reads them; git runs nothing for that); hooks, worktree
links, the other config files and the editors' files are moved to the session's `quarantine/`
folder, each named in the notice, and the workspace's own `.git/config` is put back as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker.types

from sandshell.config import SandboxSettings
from sandshell.safe_text import visible
from sandshell.sandbox import gitconfig

# Files that editors and shell hooks run, or that tell them what to run, found by name anywhere
TOOL_FILES = frozenset(
    [
        ".envrc",
        ".exrc",
        ".nvimrc",
        ".nvim.lua",
        ".lvimrc",
        ".dir-locals.el",
        ".dir-locals-2.el",
        ".mise.toml",
        "mise.toml",
        ".tool-versions",
        ".nvmrc",
        ".node-version",
        ".python-version",
    ]
)
# Everything in these: editors' tasks, and hooks folders a repository's config may point into (husky's)
TOOL_FOLDERS = frozenset({".vscode", ".idea", ".devcontainer", ".mise", ".husky", ".githooks"})
# Frameworks git's own hooks hand over to, and other version control's hooks, by name anywhere
HOOK_FILES = frozenset({".pre-commit-config.yaml", ".pre-commit-hooks.yaml", "lefthook.yml", ".lefthook.yml", "hgrc"})
# In a git directory: files that name programs or other git directories, and the hooks
GIT_FILES = ("config", "config.worktree", "commondir", "gitdir")
SLACK = 2.0  # seconds: the filesystem's clock may lag time.time() by a tick
MAX_ENTRIES = 2_000_000  # a workspace at the default limit holds at most about a million


@dataclass
class Snapshot:
    """The workspace's own `.git/config` as the session found it, to put back if the session changed it
    (and, where a copy back rewrites every file, what each watched file was)."""

    root: Path
    started: float
    config: bytes | None = None
    hooks: Path | None = None  # core.hooksPath of that config, when it points into the workspace
    known: dict[Path, str | None] = field(default_factory=dict)  # what each watched file was, when asked

    @classmethod
    def take(cls, root: Path, started: float, contents: bool = False) -> Snapshot:
        """`contents`: also what every watched file is now, for a copy back that rewrites each file."""
        snap = cls(root, started)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            path = root / ".git" / "config"
            if stat.S_ISREG(path.lstat().st_mode) and path.lstat().st_size <= gitconfig.MAX_CONFIG:
                snap.config = path.read_bytes()
                hooks = dict(gitconfig.listed(path)).get("core.hookspath", b"").decode(errors="replace")
                inside = (root / Path(hooks).expanduser()).resolve() if hooks else None
                if inside is not None and inside.is_relative_to(root.resolve()) and inside != root.resolve():
                    snap.hooks = inside
        if contents:
            snap.known = {path: _digest(path) for path, _ in _watched(root, snap.hooks, -math.inf, [])}
        return snap


@dataclass
class Found:
    """What one scan moved (relative paths, each with why) and what it could not look at."""

    moved: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    restored: bool = False

    def notice(self, where: Path) -> str | None:
        if not self.moved and not self.unread:
            return None
        parts = []
        if self.moved:
            parts.append(
                f"moved {len(self.moved)} file(s) the session left in the workspace that git or an editor on "
                f"this machine would run, to {where}: "
                + "; ".join(self.moved[:20])
                + (f"; and {len(self.moved) - 20} more" if len(self.moved) > 20 else "")
            )
            if self.restored:
                parts.append("the workspace's .git/config is back as it was before the session")
        if self.unread:
            parts.append(
                "could not look into " + ", ".join(self.unread[:5]) + "; run no git or editor there before you have"
            )
        return "; ".join(parts)


def scan(snap: Snapshot, quarantine: Path) -> Found:
    """Move what the session left for host tools to run into `quarantine`; never raises for the workspace's faults."""
    found = Found()
    for path, why in _watched(snap.root, snap.hooks, snap.started - SLACK, found.unread):
        if (was := snap.known.get(path)) is not None and was == _digest(path):
            continue  # as the session found it (a copy back rewrote it, changing its ctime only)
        if why == CONFIG:
            _git_file(snap, path, quarantine, found)
        else:
            _move(snap.root, path, quarantine, found, why)
    return found


CONFIG = "git config"


def _watched(root: Path, hooks: Path | None, cutoff: float, unread: list[str]) -> Iterator[tuple[Path, str]]:
    """Every file a host tool would run or follow, changed since `cutoff` (by ctime), with why it matters;
    a walk that follows no link and never recurses (a folder 100,000 deep is only a long list)."""
    stack, seen = [(root, "")], 0
    while stack:
        folder, inside = stack.pop()  # inside: why every file here matters (a hooks or a tool's folder)
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            unread.append(_rel(root, folder))
            continue
        names = {e.name for e in entries}
        gitdir = folder.name == ".git" or ("HEAD" in names and ({"objects", "refs"} <= names or "commondir" in names))
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                unread.append(f"{_rel(root, folder)} (past {MAX_ENTRIES:,} entries)")
                return
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            path = Path(entry.path)
            if stat.S_ISDIR(st.st_mode):
                if entry.name in TOOL_FOLDERS or path == hooks:
                    stack.append((path, inside or "an editor's or tool's task, settings or hook file"))
                elif gitdir and entry.name == "hooks":
                    stack.append((path, "a git hook"))
                else:
                    stack.append((path, inside))
            elif st.st_ctime < cutoff or entry.name.endswith(".sample"):  # samples are never run
                continue
            elif inside:
                yield path, inside
            elif entry.name == ".git":  # a file or link: git follows it to a repository anywhere
                yield path, "a .git link to a repository elsewhere"
            elif gitdir and entry.name in ("config", "config.worktree"):
                yield path, CONFIG
            elif gitdir and entry.name in GIT_FILES:
                yield path, "a link to another git directory"
            elif gitdir and entry.name == "hooks":  # a link or file where the hooks folder belongs
                yield path, "a hooks link"
            elif entry.name in TOOL_FILES:
                yield path, "a file a shell hook or editor runs"
            elif entry.name in HOOK_FILES:
                yield path, "hooks a commit or another tool runs"


def _digest(path: Path) -> str | None:
    """What a file is (a link's target, a small file's mode and contents), or None for anything else."""
    try:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            return "link:" + os.readlink(path)
        if stat.S_ISREG(st.st_mode) and st.st_size <= gitconfig.MAX_CONFIG:
            return f"{st.st_mode:o}:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        pass
    return None


def _git_file(snap: Snapshot, path: Path, quarantine: Path, found: Found) -> None:
    bad = gitconfig.unsafe_keys(path)
    if not bad:
        return
    _move(snap.root, path, quarantine, found, "git config naming programs (" + ", ".join(bad[:6]) + ")")
    if path == snap.root / ".git" / "config" and snap.config is not None:
        with contextlib.suppress(OSError):
            path.write_bytes(snap.config)
            found.restored = True


def _move(root: Path, path: Path, quarantine: Path, found: Found, why: str) -> None:
    """Move one file or link into `quarantine` under an inert name (no part of it starts with a dot)."""
    rel = path.relative_to(root)
    target = quarantine.joinpath(*(("_" + p) if p.startswith(".") else p for p in rel.parts))
    taken = 0
    while os.path.lexists(target):  # `_.x` beside `.x`, or an earlier container's of the same name
        taken += 1
        target = target.with_name(f"{target.name.split('~', 1)[0]}~{taken}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(path, target)
        except OSError:  # another filesystem: copy what it is (a link stays a link), then remove it
            if path.is_symlink():
                os.symlink(os.readlink(path), target)
            elif stat.S_ISREG(path.lstat().st_mode):
                shutil.copyfile(path, target, follow_symlinks=False)
            os.unlink(path)
    except OSError as e:
        found.unread.append(f"{_named(rel)} ({why}; could not be moved: {e.strerror or e})")
        return
    found.moved.append(f"{_named(rel)} ({why})")


def _rel(root: Path, path: Path) -> str:
    return _named(path.relative_to(root)) if path != root else "the workspace"


def _named(rel: Path) -> str:
    """A name the model chose, fit for a terminal and for one line of README.txt."""
    return visible(str(rel)).replace("\n", "\\n").replace("\t", "\\t")


def git_mounts(workspace: Path, settings: SandboxSettings, archive: bool) -> list[docker.types.Mount]:
    """The workspace's own .git, read-only unless SANDSHELL_GIT_WRITE: git on the host runs what its
    config and hooks name, so the model may not write them (what it makes elsewhere is `scan`ned)."""
    git = workspace / ".git"
    if archive or settings.workspace_mode != "rw" or settings.git_write:
        return []
    try:
        mode = git.lstat().st_mode
    except OSError:
        return []
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):  # a link would be followed on the host
        return []
    return [docker.types.Mount("/app/.git", str(git), type="bind", read_only=True)]


def settle(snap: Snapshot, folder: Path, log: Callable[[str], None], contents: bool = False) -> Snapshot:
    """Once nothing inside can write: `scan`, say what moved (in the log and `folder`/README.txt), and
    return the snapshot a restarted container starts from."""
    found = scan(snap, folder)
    if (notice := found.notice(folder)) is not None:
        log(notice)
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "README.txt").write_text(notice + "\n", encoding="utf-8")
    return Snapshot.take(snap.root, time.time(), contents)
