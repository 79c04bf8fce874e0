"""A session on an engine reached over ssh (`SANDSHELL_DOCKER_HOST=ssh://USER@HOST:PORT`).

The test starts its own sshd on 127.0.0.1 on a free port, as the current user, with its own host
key, authorized key and config, all under tmp_path; the engine behind it is the machine's own,
reached over ssh with `docker system dial-stdio`. The client side never reads or writes ~/.ssh:
an `ssh` first on PATH adds `-F` with a config in tmp_path (docker-py and sandshell both run `ssh`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import psutil
import pytest

from sandshell.config import Settings
from sandshell.errors import DockerUnavailable
from sandshell.sandbox import engine, sshengine
from sandshell.sandbox.sandbox import Sandbox
from tests import engines
from tests.conftest import _base_settings
from tests.net import free_port

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[engines.Sshd]:
    home_ssh = Path.home() / ".ssh"
    had_home_ssh = home_ssh.exists()
    with engines.ssh_engine(tmp_path_factory.mktemp("sshd")) as e:
        yield e
    assert not subprocess.run(["pgrep", "-f", f"{e.folder}/sshd_config"], capture_output=True).stdout, "sshd runs on"
    assert home_ssh.exists() == had_home_ssh, "~/.ssh was written"


def _use_key(sshd: engines.Sshd, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ssh` on PATH becomes the real one reading our config only (not ~/.ssh/config)."""
    monkeypatch.setenv("PATH", f"{sshd.shim(key)}:{os.environ['PATH']}")


@pytest.fixture
def over_ssh(sshd: engines.Sshd, monkeypatch: pytest.MonkeyPatch) -> Settings:
    _use_key(sshd, "client_key", monkeypatch)
    return _base_settings(sandbox={"exit_timeout": 5.0, "docker_host": sshd.url})


def test_a_whole_session_runs_over_ssh_and_its_workspace_comes_back(
    over_ssh: Settings, workspace: Path, docker_client: docker.DockerClient
) -> None:
    (workspace / "goal").write_text("over ssh\n")
    (workspace / "old.txt").write_text("removed inside\n")
    with Sandbox(workspace=workspace, settings=over_ssh.sandbox) as sb:
        assert sb._spec is not None and sb._spec.archive and not engine.is_local(over_ssh.sandbox)
        assert _our_ssh(), "no ssh carries the session"
        name = sb.container.name
        r = sb.execute("cat /app/goal; grep -c ' /app ' /proc/mounts; echo made > /app/new.txt; rm /app/old.txt")
        assert r.output == "over ssh\n1\n" and r.return_code == 0, r
        for i in range(20):  # many round trips on the attach: nothing waits for a full buffer
            assert sb.execute(f"echo {i}").output == f"{i}\n"
        assert sb.execute("seq 1 200000 | tail -1").output == "200000\n"
        sb.write_file("/app/written.txt", "by write_file\n")
        said = sb.sync_workspace()
        assert "copied back" in said, said
        assert (workspace / "new.txt").read_text() == "made\n" and not (workspace / "old.txt").exists()
        sb.execute("echo at the end > /app/last.txt")
    assert (workspace / "written.txt").read_text() == "by write_file\n"
    assert (workspace / "last.txt").read_text() == "at the end\n"  # copied back at the end
    assert not docker_client.containers.list(all=True, filters={"name": name})
    deadline = time.monotonic() + 10
    while _our_ssh() and time.monotonic() < deadline:  # each ends once its connection is closed
        time.sleep(0.1)
    assert not _our_ssh(), "the session's ssh processes outlive it"
    sshengine.close_all()


def _our_ssh() -> list[psutil.Process]:
    found = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # one may end (a zombie until reaped) while we look
            if p.status() != psutil.STATUS_ZOMBIE and "dial-stdio" in " ".join(p.cmdline()):
                found.append(p)
    return found
    time.sleep(0.5)


def test_a_refused_key_is_one_sentence(sshd: engines.Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_key(sshd, "stranger_key", monkeypatch)
    with pytest.raises(DockerUnavailable, match=r"cannot log in to ssh://.* over ssh \(.*Permission denied") as e:
        engine.client(_base_settings(sandbox={"docker_host": sshd.url}).sandbox)
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)


def test_a_wrong_ssh_address_is_one_sentence(sshd: engines.Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_key(sshd, "client_key", monkeypatch)
    for url, said in (
        ("ssh://", "not a valid ssh URL"),
        ("ssh://root@127.0.0.1:notaport", "not a valid ssh URL"),
        ("ssh://root@127.0.0.1/some/path", "not a valid ssh URL"),
        ("ssh://-oProxyCommand=touch", "names no usable host"),
        (f"ssh://root@127.0.0.1:{free_port()}", r"cannot log in to .* \(.*Connection refused"),
    ):
        with pytest.raises(DockerUnavailable, match=said):
            engine.client(_base_settings(sandbox={"docker_host": url}).sandbox)


def test_the_image_for_a_remote_engine_is_built_on_the_users_own_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DOCKER_HOST first (here a dead socket: passed over), then the docker context, the default
    socket; never the remote engine itself; when none answers, one sentence naming what was tried."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))  # no context of the user's: the default one
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    local = engine.local_client(_base_settings(sandbox={"docker_host": "ssh://nobody@192.0.2.1"}).sandbox)
    assert local.api.base_url == "http+docker://localhost" and local.ping()
    local.close()
    with pytest.raises(DockerUnavailable, match=rf"no other Docker engine answers here \(tried unix://{tmp_path}/dead"):
        engine.local_client(_base_settings(sandbox={"docker_host": "unix:///var/run/docker.sock"}).sandbox)
