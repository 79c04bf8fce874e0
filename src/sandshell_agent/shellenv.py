"""What a new bash starts with: an environment for a shell with no terminal and nobody to answer a
prompt, and stubs for the editors that would wait on one."""

from __future__ import annotations

NONINTERACTIVE_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "cat",
    "LESS": "-R",
    "EDITOR": "true",
    "VISUAL": "true",
    "GIT_EDITOR": "true",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
    "SSH_ASKPASS": "true",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_PROGRESS_BAR": "off",
    "PIP_NO_INPUT": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_ROOT_USER_ACTION": "ignore",
    "TQDM_DISABLE": "1",
    "PYTHONUNBUFFERED": "1",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}


def base_env(home: str) -> dict[str, str]:
    env = dict(NONINTERACTIVE_ENV)
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env["HOME"] = home
    return env


# Full-screen editors would wait on a terminal that is not there until the timeout: say so at once.
EDITOR_STUBS = "\n".join(
    f'{name}() {{ echo "sandshell: {name} needs a terminal; write files with a write action or a heredoc" >&2;'
    " return 1; }"
    for name in ("vi", "vim", "nano", "emacs", "pico")
)
