"""A session on an engine reached over ssh (`SANDSHELL_DOCKER_HOST=ssh://USER@HOST:PORT`).

The test starts its own sshd on 127.0.0.1 on a free port, as the current user, with its own host
key, authorized key and config, all under tmp_path; the engine behind it is the machine's own,
reached over ssh with `docker system dial-stdio`. The client side never reads or writes ~/.ssh:
an `ssh` first on PATH adds `-F` with a config in tmp_path (docker-py and sandshell both run `ssh`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import psutil
import pytest

from sandshell.config import Settings
from sandshell.errors import DockerUnavailable
from sandshell.sandbox import engine, sshengine
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings
from tests.net import free_port

pytestmark = pytest.mark.timeout(600)
SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    url: str
    folder: Path
    port: int


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    assert os.path.exists(SSHD), "sshd is missing: ./test.sh installs openssh-server"
    home_ssh = Path.home() / ".ssh"
    had_home_ssh = home_ssh.exists()
    d = tmp_path_factory.mktemp("sshd")
    os.chmod(d, 0o700)
    port = free_port()
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    _keygen(d / "host_key")
    _keygen(d / "client_key")
    _keygen(d / "stranger_key")  # a key the server does not know
    shutil.copy(d / "client_key.pub", d / "authorized_keys")
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n"
        f"PidFile {d}/sshd.pid\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"PermitRootLogin prohibit-password\nAllowUsers {user}\nStrictModes no\nSubsystem sftp none\n"
    )
    host_pub = (d / "host_key.pub").read_text().split()[:2]
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_pub)}\n")
    for key in ("client_key", "stranger_key"):
        (d / f"config-{key}").write_text(
            f"Host 127.0.0.1\n  IdentityFile {d}/{key}\n  IdentitiesOnly yes\n  IdentityAgent none\n"
            f"  UserKnownHostsFile {d}/known_hosts\n  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n"
        )
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation folder, as its service makes
    log = d / "sshd.log"
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stderr=open(log, "wb"))  # noqa: SIM115
    try:
        deadline = time.monotonic() + 20
        while "Server listening" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, f"sshd did not start: {log.read_text()}"
            time.sleep(0.1)
        yield Sshd(f"ssh://{user}@127.0.0.1:{port}", d, port)
    finally:
        proc.terminate()
        proc.wait(10)
    assert not subprocess.run(["pgrep", "-f", f"sshd_config.*{d}"], capture_output=True).stdout
    assert home_ssh.exists() == had_home_ssh, "~/.ssh was written"


def _use_key(sshd: Sshd, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ssh` on PATH becomes the real one reading our config only (not ~/.ssh/config)."""
    shim = sshd.folder / f"bin-{key}"
    shim.mkdir(exist_ok=True)
    (shim / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {sshd.folder}/config-{key} "$@"\n')
    (shim / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")


@pytest.fixture
def over_ssh(sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> Settings:
    _use_key(sshd, "client_key", monkeypatch)
    return _base_settings(exit_timeout=5.0, docker_host=sshd.url)


def test_a_whole_session_runs_over_ssh_and_its_workspace_comes_back(
    over_ssh: Settings, workspace: Path, docker_client: docker.DockerClient
) -> None:
    (workspace / "goal").write_text("over ssh\n")
    (workspace / "old.txt").write_text("removed inside\n")
    with Sandbox(workspace=workspace, settings=over_ssh) as sb:
        assert sb._spec is not None and sb._spec.archive and not engine.is_local(over_ssh)
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
    sshengine.close_all()
    assert not _our_ssh(), "an ssh of ours is still running"


def _our_ssh() -> list[psutil.Process]:
    found = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # one may end (a zombie until reaped) while we look
            if p.status() != psutil.STATUS_ZOMBIE and "dial-stdio" in " ".join(p.cmdline()):
                found.append(p)
    return found
    time.sleep(0.5)


def test_a_refused_key_is_one_sentence(sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_key(sshd, "stranger_key", monkeypatch)
    with pytest.raises(DockerUnavailable, match=r"cannot log in to ssh://.* over ssh \(.*Permission denied") as e:
        engine.client(_base_settings(docker_host=sshd.url))
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)


def test_a_wrong_ssh_address_is_one_sentence(sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_key(sshd, "client_key", monkeypatch)
    for url, said in (
        ("ssh://", "not a valid ssh URL"),
        ("ssh://root@127.0.0.1:notaport", "not a valid ssh URL"),
        ("ssh://root@127.0.0.1/some/path", "not a valid ssh URL"),
        ("ssh://-oProxyCommand=touch", "names no usable host"),
        (f"ssh://root@127.0.0.1:{free_port()}", r"cannot log in to .* \(.*Connection refused"),
    ):
        with pytest.raises(DockerUnavailable, match=said):
            engine.client(_base_settings(docker_host=url))


def test_the_image_for_a_remote_engine_is_built_on_the_users_own_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DOCKER_HOST first (here a dead socket: passed over), then the docker context, the default
    socket; never the remote engine itself; when none answers, one sentence naming what was tried."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))  # no context of the user's: the default one
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    local = engine.local_client(_base_settings(docker_host="ssh://nobody@192.0.2.1"))
    assert local.api.base_url == "http+docker://localhost" and local.ping()
    local.close()
    with pytest.raises(DockerUnavailable, match=rf"no other Docker engine answers here \(tried unix://{tmp_path}/dead"):
        engine.local_client(_base_settings(docker_host="unix:///var/run/docker.sock"))
