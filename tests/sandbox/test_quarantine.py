"""After a hostile session, git and editors on the host run nothing the model wrote in the workspace."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sandshell.config import Settings
from sandshell.sandbox.quarantine import SLACK, Snapshot, scan, settle
from sandshell.sandbox.sandbox import Sandbox

REMOTE = "https://example.com/team/project.git"


def git(cwd: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """git as the host user runs it: a clean global config, every repository trusted (safe.directory)."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
        "GIT_EDITOR": "true",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)


def a_repository(ws: Path, home: Path) -> None:
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "u@example.com"],
        ["config", "user.name", "U"],
        ["remote", "add", "origin", REMOTE],
    ):
        git(ws, *args, home=home)
    (ws / "a.txt").write_text("one\n")
    git(ws, "add", "a.txt", home=home)
    assert git(ws, "commit", "-qm", "first", home=home).returncode == 0


def attack(ws: Path, ran: Path) -> str:
    """What a model that knows the workspace's host path (it is in /proc/self/mountinfo) leaves behind:
    every file names a payload that notes on the host that it ran."""
    h = str(ws)
    config = (
        f"[core]\\n\\tfsmonitor = {h}/p fsmonitor\\n\\tpager = {h}/p pager\\n"
        f'[diff]\\n\\texternal = {h}/p external\\n[diff "x"]\\n\\ttextconv = {h}/p textconv\\n'
        f'[filter "x"]\\n\\tclean = {h}/p clean\\n\\tsmudge = {h}/p smudge\\n[include]\\n\\tpath = {h}/evil.cfg\\n'
    )
    repo = "mkdir -p {d}/hooks {d}/objects {d}/refs; [ -f {d}/HEAD ] || echo 'ref: refs/heads/main' > {d}/HEAD; "
    hooks = "for k in pre-commit commit-msg post-commit post-index-change reference-transaction; do cp /app/p {d}/hooks/$k; done; "  # noqa: E501
    return " ".join(
        [
            f"printf '#!/bin/sh\\necho \"$1\" >> {ran}\\n' > /app/p; chmod +x /app/p;",
            f"printf '[core]\\n\\tfsmonitor = {h}/p included\\n' > /app/evil.cfg;",
            "echo two >> /app/a.txt; printf '* diff=x filter=x\\n' > /app/.gitattributes;",
            repo.format(d="/app/.git") + f"printf '{config}' >> /app/.git/config; " + hooks.format(d="/app/.git"),
            f"printf '[core]\\n\\thooksPath = {h}/myhooks\\n' >> /app/.git/config; mkdir -p /app/myhooks;",
            "cp /app/p /app/myhooks/pre-commit;",
            repo.format(d="/app/sub/.git") + f"printf '{config}' > /app/sub/.git/config;",
            repo.format(d="/app/bare"),
            f"printf '[core]\\n\\tbare = false\\n\\tworktree = {h}\\n{config[8:]}' > /app/bare/config;",
            f"mkdir -p /app/sub2 && echo 'gitdir: {h}/bare' > /app/sub2/.git;",
            "echo 'touch /tmp/x' > /app/.envrc; mkdir -p /app/.vscode; echo '{}' > /app/.vscode/tasks.json;",
            "true",
        ]
    )


def host_tools(ws: Path, home: Path) -> None:
    """What the host user does next: git in the workspace and in what the model made there."""
    for args in (["status"], ["diff"], ["log", "-p"], ["add", "-A"], ["commit", "-qm", "after"]):
        git(ws, *args, home=home)
    for where in ("sub", "bare", "sub2"):
        git(ws / where, "status", home=home)
        git(ws / where, "log", "-p", home=home)


@pytest.mark.docker
@pytest.mark.parametrize(
    ("profile", "repository", "git_write", "transfer"),
    [
        ("standard", True, False, "mount"),
        ("locked", True, False, "mount"),
        ("standard", True, True, "mount"),
        ("locked", False, False, "mount"),
        ("standard", True, False, "archive"),
    ],
    ids=["standard", "locked", "standard-git-write", "locked-no-repository", "standard-copied-back"],
)
def test_git_and_editors_run_nothing_the_model_wrote(
    tmp_path: Path, settings: Settings, profile: str, repository: bool, git_write: bool, transfer: str
) -> None:
    ws, home, ran = tmp_path / "ws", tmp_path / "home", tmp_path / "ran"
    ws.mkdir()
    home.mkdir()
    if repository:
        a_repository(ws, home)
    if profile == "locked":
        subprocess.run(["chown", "-R", "1000:1000", str(ws)], check=True)
    said: list[str] = []
    s = settings.replace(
        sandbox=settings.sandbox.replace(
            profile=profile, git_write=git_write, workspace_transfer=transfer, sync_seconds=0.0
        )
    )
    with Sandbox(workspace=ws, settings=s.sandbox, log=said.append) as sb:
        sb.execute(attack(ws, ran), timeout=20)
        folder = s.path(s.session.sessions_dir) / sb.session_id / "quarantine"
    host_tools(ws, home)
    assert not ran.exists(), f"host git ran the model's programs: {ran.read_text()!r}"
    notice = " ".join(said)
    for name in ("sub/.git/config", "bare/config", "sub2/.git", ".envrc", ".vscode/tasks.json"):
        assert name in notice, notice
    assert (folder / "README.txt").is_file() and (folder / "_.vscode" / "tasks.json").is_file()
    if repository:
        assert git(ws, "remote", "get-url", "origin", home=home).stdout.strip() == REMOTE
        writable = git_write or transfer == "archive"  # (a copied-back .git is no mount)
        assert ".git/hooks/pre-commit" in notice if writable else ".git/" not in notice.replace("sub/.git", "")
    assert (ws / "sub" / ".git" / "HEAD").is_file() and (ws / "a.txt").read_text().endswith("two\n")


def test_a_config_naming_no_program_stays(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    snap = Snapshot(tmp_path, started=0.0)
    git(tmp_path, "init", "-q", "new", home=home)
    git(tmp_path / "new", "remote", "add", "origin", REMOTE, home=home)
    found = scan(snap, tmp_path / "q")
    assert found.moved == [] and found.unread == []
    assert git(tmp_path / "new", "remote", "get-url", "origin", home=home).stdout.strip() == REMOTE


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("core.sshCommand", "x"),
        ("alias.st", "!x"),
        ("remote.origin.url", "ext::sh -c x"),
        ("gpg.program", "x"),
        ("credential.helper", "!x"),
        ("includeIf.gitdir:/.path", "x"),
        ("sequence.editor", "x"),
    ],
)
def test_a_config_naming_a_program_is_moved(tmp_path: Path, key: str, value: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    git(tmp_path, "init", "-q", "--bare", "r.git", home=home)
    git(tmp_path / "r.git", "config", key, value, home=home)
    found = scan(Snapshot(tmp_path, started=0.0), tmp_path / "q")
    assert [m.split(" ")[0] for m in found.moved] == ["r.git/config"] and key.lower() in found.moved[0].lower()
    assert not (tmp_path / "r.git" / "config").exists() and (tmp_path / "q" / "r.git" / "config").is_file()


def test_what_changed_before_the_session_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / ".envrc").write_text("layout python\n")
    found = scan(Snapshot(tmp_path, started=(tmp_path / ".envrc").stat().st_ctime + 10), tmp_path / "q")
    assert found.moved == [] and (tmp_path / ".envrc").is_file()


def test_hooks_where_the_repositorys_own_config_points_are_moved(tmp_path: Path) -> None:
    """A repository set up for husky runs `.husky/pre-commit` from the worktree: the model may write it."""
    home = tmp_path / "home"
    home.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    a_repository(ws, home)
    (ws / "hooks-here").mkdir()
    git(ws, "config", "core.hooksPath", "hooks-here", home=home)
    time.sleep(SLACK + 0.1)  # the session begins a while after the user set the repository up
    snap = Snapshot.take(ws, time.time())
    (ws / "hooks-here" / "pre-commit").write_text("#!/bin/sh\ntouch ran\n")
    (ws / "hooks-here" / "pre-commit").chmod(0o755)
    (ws / ".pre-commit-config.yaml").write_text("repos: [{repo: local, hooks: [{id: x, entry: ./x}]}]\n")
    found = scan(snap, tmp_path / "q")
    assert sorted(m.split(" ")[0] for m in found.moved) == [".pre-commit-config.yaml", "hooks-here/pre-commit"]
    git(ws, "commit", "-q", "--allow-empty", "-m", "x", home=home)
    assert not (ws / "ran").exists()


def test_a_hostile_file_name_reaches_no_terminal_and_nothing_quarantined_is_lost(tmp_path: Path) -> None:
    ws, q = tmp_path / "ws", tmp_path / "q"
    (ws / ".vscode").mkdir(parents=True)
    (ws / ".vscode" / "\x1b]0;owned\x07\nfake line.json").write_text("{}")
    (ws / ".vscode" / "tasks.json").write_text("first")
    said: list[str] = []
    snap = settle(Snapshot(ws, started=0.0), q, said.append)
    (ws / ".vscode" / "tasks.json").write_text("second")  # a restarted container writes it again
    settle(snap.__class__(ws, started=0.0), q, said.append)
    readme = (q / "README.txt").read_text()
    for text in (*said, readme):
        assert "\x1b" not in text and "\x07" not in text and "\nfake line" not in text
    assert sorted(p.read_text() for p in (q / "_.vscode").glob("tasks.json*")) == ["first", "second"]


@pytest.mark.docker
def test_a_copy_back_that_rewrites_every_file_moves_only_what_changed(tmp_path: Path, settings: Settings) -> None:
    """The copy back writes every file anew (a new ctime): what is as it was stays where it is."""
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    a_repository(ws, home)
    for hook in ("pre-commit", "pre-push"):
        (ws / ".git" / "hooks" / hook).write_text("#!/bin/sh\ntrue\n")
        (ws / ".git" / "hooks" / hook).chmod(0o755)
    (ws / ".vscode").mkdir()
    (ws / ".vscode" / "settings.json").write_text("{}\n")
    said: list[str] = []
    s = settings.replace(sandbox=settings.sandbox.replace(workspace_transfer="archive", sync_seconds=0.0))
    with Sandbox(workspace=ws, settings=s.sandbox, log=said.append) as sb:
        sb.execute("echo 'echo changed' >> /app/.git/hooks/pre-push")
    assert (ws / ".git" / "hooks" / "pre-commit").is_file() and (ws / ".vscode" / "settings.json").is_file()
    assert not (ws / ".git" / "hooks" / "pre-push").exists()
    assert ".git/hooks/pre-push" in " ".join(said) and "pre-commit" not in " ".join(said)
    assert git(ws, "remote", "get-url", "origin", home=home).stdout.strip() == REMOTE


def test_with_contents_known_only_a_file_as_it_was_stays(tmp_path: Path) -> None:
    """Where a copy back rewrote every file: a file too large to keep a digest of counts as changed."""
    hooks = tmp_path / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\ntrue\n")
    (hooks / "pre-push").write_bytes(b"#!/bin/sh\n" + b"#" * 2**21)
    snap = Snapshot.take(tmp_path, time.time(), contents=True)
    (hooks / "pre-push").write_bytes(b"#!/bin/sh\ntouch ran\n" + b"#" * 2**21)
    found = scan(snap, tmp_path.parent / "q")
    assert [m.split(" ")[0] for m in found.moved] == [".git/hooks/pre-push"] and (hooks / "pre-commit").is_file()
