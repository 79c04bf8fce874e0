"""What a git config file holds, read by git itself, and which of its keys may name a program."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

MAX_CONFIG = 1024 * 1024
# Keys `git init`, `clone`, `remote add`, `branch -u` and `config user.*` write, none naming a program
SAFE_KEYS = re.compile(
    r"(core\.(repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|precomposeunicode|symlinks"
    r"|autocrlf|safecrlf|eol|quotepath|abbrev|checkstat|trustctime)"
    r"|user\.(name|email)|init\.defaultbranch|extensions\.(objectformat|worktreeconfig)"
    r"|remote\.[^\n]*\.(url|pushurl|fetch|push|tagopt)|branch\.[^\n]*\.(remote|merge|rebase)"
    r"|submodule\.[^\n]*\.(url|active))"
)


def unsafe_keys(path: Path) -> list[str]:
    """The config's keys that may name a program (all of it, said as 'unreadable', when git cannot list it)."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode) or path.lstat().st_size > MAX_CONFIG:
            return ["not a plain config file"]
        pairs = listed(path)
    except (OSError, subprocess.SubprocessError):
        return ["unreadable"]
    bad = [k for k, _ in pairs if not SAFE_KEYS.fullmatch(k)]
    # a URL through a remote helper (`ext::sh -c ...`) or one read as an option runs a program
    bad += [k for k, v in pairs if k.endswith("url") and (b"::" in v or v.startswith(b"-"))]
    return sorted(set(bad))


def listed(path: Path) -> list[tuple[str, bytes]]:
    """A config file's keys (as git spells them: section and name in lower case) and values, read by git
    itself (a parser of our own would read some file otherwise than git does), which runs nothing here."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}
    listed = subprocess.run(
        ["git", "config", "--file", str(path), "--no-includes", "--null", "--list"],
        capture_output=True,
        env=env,
        timeout=10,
        check=True,
    )
    items = [item.partition(b"\n") for item in listed.stdout.split(b"\0") if item]
    return [(key.decode(errors="replace"), value) for key, _, value in items]
