"""Resetting the workspace: archive the old one (nothing is lost), then lay out the starter files."""

from __future__ import annotations

import json
import os
import sys
import tarfile
import time
from pathlib import Path

from sandshell import config
from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.model.genconfig import STARTER
from sandshell.safe_text import say
from sandshell.sandbox import hosttree

STARTER_SYSTEM = """# My own instructions
I may rewrite this file to remember what I learn about this machine and how to reach my goal.
"""
KEEP = {".gitkeep"}


def starters(settings: Settings) -> dict[str, str]:
    """The starter files of a fresh workspace, by name."""
    return {
        "goal": settings.session.default_goal.rstrip() + "\n",
        "system.md": STARTER_SYSTEM,
        "config.json": json.dumps(STARTER, indent=2) + "\n",
    }


def is_fresh(ws: Path, settings: Settings) -> bool:
    """Whether `ws` holds its starter files as laid out, and nothing else (a link is never fresh)."""
    expected = starters(settings)
    try:
        entries = [p for p in ws.iterdir() if p.name not in KEEP]
        if sorted(p.name for p in entries) != sorted(expected):
            return False
        return all(p.is_file() and not p.is_symlink() and p.read_bytes() == expected[p.name].encode() for p in entries)
    except OSError:
        return False


def init_workspace(settings: Settings) -> Path:
    """Create the workspace with its starter files where they are missing."""
    ws = settings.path(settings.sandbox.workspace)
    ws.mkdir(parents=True, exist_ok=True)
    for name, text in starters(settings).items():
        if not (ws / name).exists() and not (ws / name).is_symlink():
            (ws / name).write_text(text, encoding="utf-8")
    return ws


def archive(ws: Path, dest: Path, limit: int = 0) -> Path:
    """Write `ws` into a timestamped .tar.gz under `dest` (links kept as links, never followed; at most
    `limit` bytes of files, apparent size); on any failure no archive is left."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"workspace-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz"
    n = 1
    while path.exists():
        path = dest / f"workspace-{time.strftime('%Y%m%d-%H%M%S')}-{n}.tar.gz"
        n += 1
    partial = path.with_name(f".{path.name}.partial")
    try:
        with tarfile.open(partial, "w:gz", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_folder_info(ws, "workspace"))
            hosttree.pack(tar, ws, hosttree.Bounds(bytes=limit), prefix="workspace/")
        partial.rename(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path


def _folder_info(folder: Path, name: str) -> tarfile.TarInfo:
    st = folder.lstat()
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, st.st_mode & 0o7777, int(st.st_mtime)
    info.uid, info.gid = st.st_uid, st.st_gid
    return info


def reset(assume_yes: bool = False, settings: Settings | None = None) -> int:
    settings = settings or config.load()
    ws = settings.path(settings.sandbox.workspace)
    if not assume_yes:
        if not sys.stdin.isatty():
            raise SandshellError("reset asks before it archives the workspace; pass --yes when not in a terminal")
        answer = input(f"Reset {ws}? The current workspace is archived first. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            say("nothing changed")
            return 1
    fresh = ws.is_dir() and not ws.is_symlink() and is_fresh(ws, settings)
    if fresh:  # archiving it again would only pile up copies of the starter files
        say(f"workspace {ws} is already fresh: nothing to archive")
    elif ws.exists() and any(p.name not in KEEP for p in ws.iterdir()):
        try:
            saved = archive(ws, ws.parent / f"{ws.name}-archive", settings.sandbox.workspace_limit)
        except hosttree.TooBig as e:
            raise SandshellError(
                f"the workspace was not archived: {e}; nothing was changed (move it aside yourself, or raise the limit)"
            ) from None
        except OSError as e:
            raise SandshellError(f"cannot archive the workspace ({e.strerror or e}); nothing was changed") from None
        say(f"the old workspace is kept in {saved}")
        for name in sorted(os.listdir(ws)):
            if name not in KEEP:
                hosttree.remove(ws, name)
    init_workspace(settings)
    if not fresh:
        say(f"workspace {ws} is fresh: goal, system.md and config.json written")
    try:
        from sandshell.sandbox import engine

        for name in engine.reap(engine.client(settings.sandbox)):
            say(f"removed leftover container {name}")
    except SandshellError as e:
        say(f"leftover containers were not checked: {e}")
    return 0
