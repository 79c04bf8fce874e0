"""The Bot API's environment on a real Docker engine: execute, timeout, kill, read-only, tools and their cache."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from sandshell.bot import Environment, Permission, ToolDefinition, ToolError
from sandshell.bot.tools import tool_image_repo
from sandshell.errors import SandshellError
from sandshell.sandbox import engine
from sandshell.sandbox.image import LABEL, context_hash
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    folder = tmp_path_factory.mktemp("bot-env")
    (folder / "hello.txt").write_text("hello\n")
    with Environment(folder, Permission.READ_WRITE, settings=_base_settings(sandbox={"kill_grace": 0.5})) as e:
        yield e


def test_execute_gives_return_code_output_and_no_error(env: Environment) -> None:
    r = env.execute("cat /app/hello.txt")
    assert r == {"return_code": 0, "output": "hello\n", "error": None}


def test_a_failing_command_says_why_with_its_stderr(env: Environment) -> None:
    r = env.execute("echo out; echo 'it broke' >&2; exit 3")
    assert r["return_code"] == 3
    assert "out" in r["output"] and "it broke" in r["output"]
    assert r["error"] is not None and "exit 3" in r["error"] and "it broke" in r["error"]


def test_the_shell_persists_between_commands(env: Environment) -> None:
    env.execute("cd /tmp && export BOT_X=42")
    assert env.execute("echo $BOT_X $(pwd)")["output"] == "42 /tmp\n"
    env.execute("cd /app")


def test_a_timeout_kills_the_command_and_says_so(env: Environment) -> None:
    t = time.monotonic()
    r = env.execute("sleep 30; echo never", timeout=1)
    assert time.monotonic() - t < 10
    assert "never" not in r["output"]
    assert r["error"] is not None and "timed out" in r["error"]
    assert env.execute("echo still here")["output"] == "still here\n"  # the environment goes on


def test_kill_removes_the_container_and_later_commands_say_so(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    e = Environment(tmp_path, Permission.READ_WRITE, settings=_base_settings())
    assert e.execute("true")["return_code"] == 0  # started at first use
    assert e.sandbox is not None
    cid = e.sandbox.container.id
    e.kill()
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(cid)
    e.kill()  # twice is fine
    r = e.execute("echo again")
    assert r["return_code"] is None and "killed" in r["error"]


HOSTILE = [
    "echo x > /app/new.txt",
    "touch /app/hello.txt",
    "rm -f /app/hello.txt",
    "mv /app/hello.txt /app/moved.txt",
    "chmod 777 /app/hello.txt",
    "mkdir /app/dir",
    "ln -s /etc/passwd /app/link",
    "python3 -c \"open('/app/hello.txt','a').write('pwned')\"",
    "mount -o remount,rw /app && echo x > /app/remounted.txt",
    "umount -l /app; echo x > /app/under.txt",
    "cp /etc/hostname /app/ 2>&1; dd if=/dev/zero of=/app/hello.txt bs=1 count=1 conv=notrunc",
    "tar -C /app -xf /dev/null; truncate -s 0 /app/hello.txt",
]


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else f"{p.stat().st_mode:o}"
        for p in sorted(folder.rglob("*"))
    } | {".": f"{folder.stat().st_mode:o}"}


def test_read_only_cannot_write_the_folder_whatever_it_tries(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello\n")
    before = _snapshot(tmp_path)
    with Environment(tmp_path, Permission.READ_ONLY, settings=_base_settings()) as e:
        assert e.execute("cat /app/hello.txt")["output"] == "hello\n"  # reading works
        for command in HOSTILE:
            r = e.execute(command, timeout=5)
            assert r["return_code"] != 0, (command, r)
        assert e.execute("echo scratch > /tmp/ok && cat /tmp/ok")["output"] == "scratch\n"
        assert e.sandbox is not None
        with pytest.raises(SandshellError, match=r"[Rr]ead-only"):
            e.sandbox.write_file("/app/api.txt", "through the API")
    assert _snapshot(tmp_path) == before


def test_read_write_can_write_the_folder(tmp_path: Path) -> None:
    """The other side: the same commands do change a read-write folder (so the test above can fail)."""
    (tmp_path / "hello.txt").write_text("hello\n")
    with Environment(tmp_path, Permission.READ_WRITE, settings=_base_settings()) as e:
        assert e.execute(HOSTILE[0])["return_code"] == 0
    assert (tmp_path / "new.txt").read_text() == "x\n"


# -- tools --------------------------------------------------------------------------------------
@pytest.fixture
def nonce(docker_client: docker.DockerClient) -> Iterator[str]:
    """A tool set no one built before; the images made from tools with it are removed afterwards."""
    n = secrets.token_hex(4)
    yield n
    for image in docker_client.images.list(filters={"label": LABEL}):
        history = " ".join(str(step.get("CreatedBy", "")) for step in image.history())
        if n in history and any(tag.startswith(f"{_base_settings().sandbox.image}-tools-") for tag in image.tags):
            docker_client.images.remove(image.id, force=True)


def _tool(n: str) -> ToolDefinition:
    return ToolDefinition(
        installation_command=f"printf '#!/bin/sh\\necho mytool {n}\\n' > /usr/local/bin/mytool-{n}\n"
        f"chmod +x /usr/local/bin/mytool-{n}",
        verification_command=f"mytool-{n}",
        usage_instructions=f"mytool-{n} prints its name.",
        name=f"mytool-{n}",
    )


def test_a_tool_is_installed_verified_and_cached(
    tmp_path: Path, nonce: str, docker_client: docker.DockerClient
) -> None:
    s = _base_settings()
    tool = _tool(nonce)
    first = Environment(tmp_path, Permission.READ_ONLY, [tool], settings=s)
    with first:
        assert first.image_built is True
        assert first.execute(f"mytool-{nonce}")["output"] == f"mytool {nonce}\n"
    image = docker_client.images.get(f"{tool_image_repo(s.sandbox, [tool])}:{context_hash()}")
    labels = image.labels or {}
    assert LABEL in labels and engine.LABEL not in labels and engine.PID_LABEL not in labels
    second = Environment(tmp_path, Permission.READ_ONLY, [tool], settings=s)
    with second:
        assert second.image_built is False  # the cache: no installation this time
        assert second.execute(f"mytool-{nonce}")["return_code"] == 0
    assert second.start_seconds < first.start_seconds


def test_a_failing_installation_is_a_clear_error(tmp_path: Path, nonce: str) -> None:
    bad = ToolDefinition(
        f"echo installing {nonce}; echo 'no such package' >&2; exit 7", "true", "unused", name="broken"
    )
    e = Environment(tmp_path, Permission.READ_ONLY, [bad], settings=_base_settings())
    with pytest.raises(ToolError, match=r"installing the tool .broken. failed \(exit 7\); its output ends: ") as err:
        e.start()
    said = str(err.value)  # stdout and stderr reach the build log in either order
    assert f"installing {nonce}" in said and "no such package" in said and "full log: " in said
    assert e.sandbox is None


def test_a_failing_verification_is_a_clear_error_and_leaves_no_container(
    tmp_path: Path, nonce: str, docker_client: docker.DockerClient
) -> None:
    tool = ToolDefinition(f"echo {nonce} > /opt/marker", "test -x /usr/bin/no-such-tool", "unused", name="ghost")
    e = Environment(tmp_path, Permission.READ_ONLY, [tool], settings=_base_settings())
    with pytest.raises(ToolError, match=r"'ghost' was installed but its check .* failed .*exit 1"):
        e.start()
    assert e.sandbox is None
    mine = [
        c
        for c in docker_client.api.containers(all=True, filters={"label": engine.LABEL})
        if c["Image"].startswith(tool_image_repo(_base_settings().sandbox, [tool]))
    ]
    assert mine == []


@pytest.mark.parametrize("field", ["installation_command", "verification_command", "usage_instructions"])
def test_a_tool_definition_needs_every_part(field: str) -> None:
    parts = {"installation_command": "true", "verification_command": "true", "usage_instructions": "x"}
    with pytest.raises(ToolError, match=field):
        ToolDefinition(**(parts | {field: "  "}))
