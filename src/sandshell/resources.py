"""Files that ship with sandshell: the fixed system prompt, `.env.example` and the sandbox's build context.

From a checkout they are read where the repository keeps them (`system.md` and `container/` at
its root); an installed wheel carries copies in `sandshell/_data/` (see `setup.py`). The agent
that runs inside the sandbox is the `sandshell_agent` package, wherever Python finds it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sandshell.errors import SandshellError

_PACKAGE = Path(__file__).resolve().parent
_PLACES = (_PACKAGE / "_data", _PACKAGE.parents[1])  # installed wheel, then the checkout (src/sandshell)
SHIPPED = ("system.md", ".env.example", "container")


def resource(name: str) -> Path:
    """The path of a shipped file or folder, or SandshellError naming what is missing."""
    for base in _PLACES:
        path = base / name
        if path.exists():
            return path
    raise SandshellError(f"sandshell's own file {name} is missing from {_PACKAGE}; reinstall sandshell")


def from_checkout() -> bool:
    """Whether this is the repository's own tree (with `start.sh`), not an installed package."""
    return not (_PACKAGE / "_data").exists() and (_PACKAGE.parents[1] / "start.sh").is_file()


def command(args: str) -> str:
    """How the user runs `sandshell ARGS` here: `./start.sh ARGS` in a checkout (it sets up first)."""
    if args == "reset" or args.startswith("reset "):
        return ("./reset.sh" + args[5:]) if from_checkout() else f"sandshell {args}"
    return f"./start.sh {args}" if from_checkout() else f"sandshell {args}"


def fixed_system_prompt() -> str:
    """The fixed part of the system prompt (the model's own /app/system.md is appended to it)."""
    return resource("system.md").read_text(encoding="utf-8")


def container_dir() -> Path:
    """What builds the sandbox image besides the agent: the Dockerfile and the base bootstrap."""
    return resource("container")


def agent_dir() -> Path:
    """The in-container agent's package folder (found, never imported: the host does not run it)."""
    spec = importlib.util.find_spec("sandshell_agent")
    if spec is None or spec.origin is None:
        raise SandshellError("sandshell's sandbox agent (the sandshell_agent package) is missing; reinstall sandshell")
    return Path(spec.origin).parent
