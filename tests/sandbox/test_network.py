"""Each session's network: the outside in standard, nothing in locked, never another session."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import docker
import pytest

from sandshell.config import Settings
from sandshell.sandbox import engine
from sandshell.sandbox.sandbox import Sandbox

pytestmark = [pytest.mark.docker, pytest.mark.network]

LISTEN = (
    'nohup python3 -c \'import socket,time; s=socket.socket(); s.bind(("0.0.0.0", 8765)); s.listen(); '
    "time.sleep(600)' >/dev/null 2>&1 & sleep 0.5"
)


def connect(sb: Sandbox, host: str, port: int) -> bool:
    probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=3); print('connected')"
    return "connected" in sb.execute(f'python3 -c "{probe}"', timeout=10).output


def address(sb: Sandbox) -> tuple[str, str]:
    """The container's address and its gateway (the host, as the container sees it)."""
    sb.container.reload()
    (net,) = sb.container.attrs["NetworkSettings"]["Networks"].values()
    return net["IPAddress"], net["Gateway"]


def ours(client: docker.DockerClient) -> list[str]:
    found = client.api.networks(filters={"label": f"{engine.PID_LABEL}={os.getpid()}"}) or []
    return [n["Name"] for n in found]


def test_a_session_cannot_reach_another_sessions_listener(
    tmp_path: Path, settings: Settings, docker_client: docker.DockerClient
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    host = socket.socket()
    host.bind(("0.0.0.0", 0))
    host.listen()
    accepted = threading.Thread(target=lambda: host.accept()[0].close(), daemon=True)
    accepted.start()
    try:
        with (
            Sandbox(workspace=tmp_path / "a", settings=settings.sandbox) as a,
            Sandbox(workspace=tmp_path / "b", settings=settings.sandbox) as b,
        ):
            a.execute(LISTEN)
            a_ip, _ = address(a)
            b_ip, gateway = address(b)
            assert a_ip and b_ip and a_ip != b_ip
            assert connect(a, "127.0.0.1", 8765)  # the listener listens
            assert not connect(b, a_ip, 8765)  # ...but not for another session
            assert connect(b, gateway, host.getsockname()[1])  # standard still reaches the host
            assert len(ours(docker_client)) == 2
    finally:
        host.close()
    assert ours(docker_client) == []  # each session's network goes with it


def test_a_locked_session_reaches_neither_another_session_nor_the_host(
    tmp_path: Path, settings: Settings, docker_client: docker.DockerClient
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    os.chown(tmp_path / "b", 1000, 1000)
    with (
        Sandbox(workspace=tmp_path / "a", settings=settings.sandbox) as a,
        Sandbox(workspace=tmp_path / "b", settings=settings.sandbox.replace(profile="locked")) as b,
    ):
        a.execute(LISTEN)
        a_ip, gateway = address(a)
        assert not connect(b, a_ip, 8765)
        assert not connect(b, gateway, 22)
        assert "lo" in b.execute("ls /sys/class/net").output.split()
        assert len(ours(docker_client)) == 1  # locked has none of its own
    assert ours(docker_client) == []


def test_the_reaper_removes_a_dead_sessions_network(docker_client: docker.DockerClient) -> None:
    labels = {engine.LABEL: "gone", engine.PID_LABEL: "999999999", engine.HOST_LABEL: socket.gethostname()}
    net = docker_client.api.create_network("sandshell-gone-net", driver="bridge", labels=labels)
    try:
        assert "sandshell-gone-net" in engine.reap(docker_client)
        assert not docker_client.api.networks(names=["sandshell-gone-net"])
    finally:
        if docker_client.api.networks(names=["sandshell-gone-net"]):
            docker_client.api.remove_network(net["Id"])
