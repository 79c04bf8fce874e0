"""File operations the host asks for: bounded reads and writes, the model's state, ownership."""

from __future__ import annotations

import os
import stat
from typing import Any

STATE_FILES = {"goal": "/app/goal", "system": "/app/system.md", "config": "/app/config.json"}


def read_text(path: str, limit: int) -> dict[str, Any]:
    """Read at most `limit` bytes of a regular file as text; never raises."""
    out: dict[str, Any] = {"path": path, "content": None, "error": None, "size": 0, "truncated": False}
    try:
        st = os.stat(path)
    except FileNotFoundError:
        out["error"] = "missing"
        return out
    except OSError as e:
        out["error"] = f"cannot stat: {e.strerror}"
        return out
    if stat.S_ISDIR(st.st_mode):
        out["error"] = "is a directory"
        return out
    if not stat.S_ISREG(st.st_mode):
        out["error"] = "not a regular file"
        return out
    out["size"] = st.st_size
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        out["error"] = f"cannot read: {e.strerror}"
        return out
    if len(data) > limit:
        data = data[:limit]
        out["truncated"] = True
    if b"\0" in data:
        out["error"] = "binary file"
        return out
    out["content"] = data.decode("utf-8", errors="replace")
    return out


def write_text(path: str, content: str, append: bool, owner: tuple[int, int] | None) -> dict[str, Any]:
    """Write a file, creating parent folders; returns the size or an error."""
    try:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        data = content.encode("utf-8", errors="surrogateescape")
        with open(path, "ab" if append else "wb") as f:
            f.write(data)
        if owner is not None:
            os.lchown(path, *owner)
        return {"path": path, "size": os.path.getsize(path), "error": None}
    except OSError as e:
        return {"path": path, "size": 0, "error": f"{e.strerror or e}"}


def model_state(limit: int) -> dict[str, Any]:
    return {key: read_text(path, limit) for key, path in STATE_FILES.items()}


def fix_ownership(root: str, uid: int, gid: int, limit: int = 20000) -> int:
    """Give entries under `root` not owned by uid back to uid:gid (bounded walk); returns fixes."""
    fixed = 0
    seen = 0
    stack = [root]
    while stack and seen < limit:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                st = entry.stat(follow_symlinks=False)
                if st.st_uid != uid:
                    os.lchown(entry.path, uid, gid)
                    fixed += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
            except OSError:
                continue
    return fixed
