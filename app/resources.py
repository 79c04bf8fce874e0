"""Files that ship with sandshell: the fixed system prompt, `.env.example` and the sandbox's build context.

From a checkout they are read where the repository keeps them (`system.md` at its root,
`container/`); an installed wheel carries copies in `sandshell/_data/` (see `setup.py`).
"""

from __future__ import annotations

from pathlib import Path

from sandshell.errors import SandshellError

_PACKAGE = Path(__file__).resolve().parent
_PLACES = (_PACKAGE / "_data", _PACKAGE.parent)  # installed wheel, then the source checkout
SHIPPED = ("system.md", ".env.example", "container")


def resource(name: str) -> Path:
    """The path of a shipped file or folder, or SandshellError naming what is missing."""
    for base in _PLACES:
        path = base / name
        if path.exists():
            return path
    raise SandshellError(f"sandshell's own file {name} is missing from {_PACKAGE}; reinstall sandshell")


def fixed_system_prompt() -> str:
    """The fixed part of the system prompt (the model's own /app/system.md is appended to it)."""
    return resource("system.md").read_text(encoding="utf-8")


def container_dir() -> Path:
    """The sandbox image's build context: the Dockerfile, the base bootstrap and the agent."""
    return resource("container")
