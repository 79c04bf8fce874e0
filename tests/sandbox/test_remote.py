"""Sessions on another Docker engine: TCP with mutual TLS, no shared filesystem, no shared images.

The engine is a second `dockerd` started by the test (tests/engines.py). The workspace goes in and
comes back through the engine's API; the image is sent there; the machine's own engine is left
as it was (a container with a network still starts on it afterwards).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandshell.config import Settings
from sandshell.errors import DockerUnavailable
from sandshell.runner import run_task
from sandshell.sandbox import engine
from sandshell.sandbox.image import ensure_image
from sandshell.sandbox.sandbox import Sandbox
from tests import engines
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient) -> Iterator[engines.Engine]:
    image = ensure_image(docker_client, _base_settings().sandbox)
    interfaces = {name for _, name in socket.if_nameindex() if not name.startswith("veth")}
    with engines.tls_engine(tmp_path_factory.mktemp("remote")) as e:
        assert "docker0" not in interfaces or "docker0" in {n for _, n in socket.if_nameindex()}
        yield e
        leftover = engines.client(e).api.containers(all=True)
        assert not leftover, f"containers left on the remote engine: {leftover}"
    after = {name for _, name in socket.if_nameindex() if not name.startswith("veth")}
    assert after == interfaces, f"the host's network interfaces changed: {sorted(after ^ interfaces)}"
    assert engines.main_engine_still_works(docker_client, image), "the machine's engine lost its network"


@pytest.fixture
def on_remote(remote: engines.Engine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    # requests would take this CA over the engine's own for every TLS connection: it must not
    (tmp_path / "wrong-ca.pem").write_text("not a certificate\n")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "wrong-ca.pem"))
    return _base_settings(sandbox={"exit_timeout": 5.0, "docker_host": remote.url, "docker_tls": str(remote.certs)})


def test_a_session_runs_on_the_tls_engine_and_its_workspace_comes_back(on_remote: Settings, workspace: Path) -> None:
    (workspace / "goal").write_text("count to three\n")
    (workspace / "old.txt").write_text("the model deletes this\n")
    (workspace / "sub").mkdir()
    with Sandbox(workspace=workspace, settings=on_remote.sandbox) as sb:
        assert not engine.is_local(on_remote.sandbox) and sb._spec is not None and sb._spec.archive
        # nothing of the host's folder is mounted: /app is a volume holding a copy
        r = sb.execute("cat /app/goal; grep -c ' /app ' /proc/mounts; echo made > /app/sub/new.txt; rm /app/old.txt")
        assert r.output.startswith("count to three\n1\n"), r
        assert not (workspace / "sub" / "new.txt").exists()  # not yet: it comes back when asked or at the end
        said = sb.sync_workspace()
        assert "copied back" in said, said
        assert (workspace / "sub" / "new.txt").read_text() == "made\n"
        assert not (workspace / "old.txt").exists()  # the container's copy is the truth
        sb.write_file("/app/last.txt", "written at the end\n")
        sb.execute("ln -s /etc/shadow /app/shadow; mkfifo /app/fifo; dd if=/dev/zero of=/app/big bs=1M count=3")
    assert (workspace / "last.txt").read_text() == "written at the end\n"  # copied back at the end
    assert (workspace / "big").stat().st_size == 3 * 1024 * 1024
    assert not (workspace / "shadow").is_symlink() and not (workspace / "fifo").exists()  # refused by the filter
    assert (workspace / "goal").read_text() == "count to three\n"


def test_set_id_bits_and_links_never_reach_the_host(on_remote: Settings, workspace: Path) -> None:
    """As an attacker inside would try: a set-uid root shell, a link out, a link through a folder."""
    (workspace / "inside").mkdir()
    with Sandbox(workspace=workspace, settings=on_remote.sandbox) as sb:
        sb.execute(
            "cp /bin/bash /app/rootshell && chmod 4755 /app/rootshell; chmod 2755 /app/inside;"
            "ln -s ../../../../etc /app/up; ln -s inside /app/alias"
        )
        sb.sync_workspace()
        sb.execute("rm -rf /app/inside && ln -s /etc /app/inside")  # a folder swapped for a link out
    st = (workspace / "rootshell").stat()
    assert st.st_size > 0 and not st.st_mode & 0o6000
    assert not (workspace / "up").exists() and not (workspace / "up").is_symlink()
    assert os.readlink(workspace / "alias") == "inside"  # a link that stays inside is kept as a link
    assert not (workspace / "inside").exists() and not (workspace / "inside").is_symlink()
    assert not (workspace.parent / "etc").exists()


def test_read_only_and_copy_modes_never_touch_the_host_folder(on_remote: Settings, workspace: Path) -> None:
    (workspace / "goal").write_text("keep me\n")
    before = sorted(p.name for p in workspace.iterdir())
    for mode in ("ro", "copy"):
        with Sandbox(workspace=workspace, settings=on_remote.sandbox.replace(workspace_mode=mode)) as sb:
            r = sb.execute("cat /app/goal; echo x > /app/new && echo wrote; rm -f /app/goal")
            assert r.output.startswith("keep me\n"), r
            assert ("wrote" in r.output) == (mode == "copy"), r
            assert "Read-only file system" in r.output or mode == "copy", r
        assert sorted(p.name for p in workspace.iterdir()) == before
        assert (workspace / "goal").read_text() == "keep me\n"
    c = engines.client(engines.Engine(on_remote.sandbox.docker_host, Path(on_remote.sandbox.docker_tls), Path()))
    assert not c.api.volumes(filters={"label": engine.LABEL}).get("Volumes"), "the ro copy's volume was left"


def test_locked_profile_on_the_remote_engine(on_remote: Settings, workspace: Path) -> None:
    (workspace / "goal").write_text("g")
    with Sandbox(workspace=workspace, settings=on_remote.sandbox.replace(profile="locked")) as sb:
        r = sb.execute("id -u; echo hi > /app/made; touch /usr/x 2>/dev/null || echo read-only-root")
        assert r.output.endswith("read-only-root\n") and r.return_code == 0, r
    assert (workspace / "made").read_text() == "hi\n"


def test_a_headless_task_on_the_remote_engine(on_remote: Settings, workspace: Path, tmp_path: Path) -> None:
    script = tmp_path / "actions.jsonl"
    script.write_text(
        "\n".join(
            json.dumps(a)
            for a in (
                {"bash": "echo remote > /app/answer.txt"},
                {"done": "wrote it"},
            )
        )
        + "\n"
    )
    s = on_remote.replace(
        model=on_remote.model.replace(backend="script", script_path=str(script), intro=False),
        sandbox=on_remote.sandbox.replace(workspace=str(workspace)),
    )
    start = time.monotonic()
    result = run_task("write remote into answer.txt", timeout=120, max_iterations=5, settings=s)
    assert result["status"] == "done", result
    assert (workspace / "answer.txt").read_text() == "remote\n"
    assert time.monotonic() - start < 120


def test_a_wrong_engine_address_or_certificate_folder_is_one_clear_sentence(tmp_path: Path) -> None:
    with pytest.raises(DockerUnavailable, match=r"SANDSHELL_DOCKER_TLS=.* lacks ca\.pem"):
        engine.client(_base_settings(sandbox={"docker_host": "tcp://127.0.0.1:9", "docker_tls": str(tmp_path)}).sandbox)
    with pytest.raises(DockerUnavailable, match=r"the Docker engine at tcp://127.0.0.1:9 does not answer"):
        engine.client(_base_settings(sandbox={"docker_host": "tcp://127.0.0.1:9"}).sandbox)
    with pytest.raises(DockerUnavailable, match=r"over TCP without TLS, so anyone on the way could drive it"):
        engine.client(
            _base_settings(sandbox={"docker_host": "tcp://192.0.2.1:2375"}).sandbox
        )  # refused before any packet leaves


def test_copying_back_never_writes_through_a_link_already_in_the_workspace(tmp_path: Path) -> None:
    """The host folder holds a link (left by an earlier copy, or made by the user) where the copy
    now has a folder or a file: the link is replaced, what it points at is never touched."""
    from sandshell.sandbox.transfer import _mirror

    outside, new, ws = tmp_path / "outside", tmp_path / "new", tmp_path / "ws"
    for d in (outside, new / "sub", ws):
        d.mkdir(parents=True)
    (outside / "keep").write_text("outside\n")
    (new / "sub" / "keep").write_text("from the container\n")
    (new / "file").write_text("new\n")
    (ws / "sub").symlink_to(outside)
    (ws / "file").symlink_to(outside / "keep")
    (ws / "gone").write_text("removed in the container\n")
    _mirror(new, ws)
    assert (outside / "keep").read_text() == "outside\n"
    assert not (ws / "sub").is_symlink() and (ws / "sub" / "keep").read_text() == "from the container\n"
    assert not (ws / "file").is_symlink() and (ws / "file").read_text() == "new\n"
    assert not (ws / "gone").exists()


def test_sessions_go_to_the_engine_running_fewest(
    on_remote: Settings, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """SANDSHELL_DOCKER_HOSTS: the local engine and the TLS one; the one running fewer sessions is
    chosen, an engine that does not answer is passed over, and when none answers it is one sentence."""
    local_url = "unix:///var/run/docker.sock"
    s = on_remote.replace(
        sandbox=on_remote.sandbox.replace(
            docker_hosts=f"{local_url}, {on_remote.sandbox.docker_host}, tcp://127.0.0.1:9"
        )
    )
    remote = engines.client(engines.Engine(on_remote.sandbox.docker_host, Path(on_remote.sandbox.docker_tls), Path()))

    def load(c: docker.DockerClient) -> int:
        return len(c.api.containers(filters={"label": engine.LABEL}))

    (tmp_path / "a").mkdir()
    with Sandbox(workspace=tmp_path / "a", settings=on_remote.sandbox.replace(docker_host="")):
        assert load(remote) == 0 < load(docker_client)
        assert engine.least_loaded(s.sandbox).docker_host == on_remote.sandbox.docker_host
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    with (
        Sandbox(workspace=tmp_path / "b", settings=on_remote.sandbox),
        Sandbox(workspace=tmp_path / "c", settings=on_remote.sandbox),
    ):
        before = (load(docker_client), load(remote))
        chosen = engine.least_loaded(s.sandbox).docker_host
        if before == (load(docker_client), load(remote)):  # other sessions on this machine may come and go
            assert chosen == (local_url if before[0] <= before[1] else on_remote.sandbox.docker_host), before
    assert engine.least_loaded(on_remote.sandbox).docker_host == on_remote.sandbox.docker_host  # no list: as configured
    with pytest.raises(DockerUnavailable, match="no engine of SANDSHELL_DOCKER_HOSTS answers"):
        engine.least_loaded(on_remote.sandbox.replace(docker_hosts="tcp://127.0.0.1:9"))


def test_the_service_places_a_task_on_the_least_loaded_engine(on_remote: Settings, tmp_path: Path) -> None:
    """The HTTP service's one placement seam: with the TLS engine idle and the other listed engine
    down, a task goes there with its own workspace (copied, as that engine shares no filesystem)."""
    from sandshell.service.store import TaskRecord
    from sandshell.service.taskqueue import place

    s = on_remote.replace(
        sandbox=on_remote.sandbox.replace(
            docker_host="", docker_hosts=f"tcp://127.0.0.1:9,{on_remote.sandbox.docker_host}"
        ),
        session=on_remote.session.replace(sessions_dir=str(tmp_path / "sessions")),
    )
    placed = place(s, TaskRecord("t1", "a goal", {"workspace_mode": "rw"}))
    assert placed.sandbox.docker_host == on_remote.sandbox.docker_host and engine.archive_transfer(placed.sandbox)
    assert placed.sandbox.workspace == str(tmp_path / "sessions" / "t1" / "workspace")


def test_a_whole_task_runs_on_the_tls_engine_through_the_api(
    remote: engines.Engine, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """`sandshell serve` with SANDSHELL_DOCKER_HOSTS naming an engine that is down, the TLS one and the
    machine's: a task in rw mode runs on the TLS engine (it runs no session, and wins a tie with the machine's
    by coming first) to its end through the API, and what the model wrote comes back."""
    from tests.service_util import Server

    hosts = f"tcp://127.0.0.1:9,{remote.url},unix:///var/run/docker.sock"
    server = Server(tmp_path / "home", SANDSHELL_DOCKER_HOSTS=hosts, SANDSHELL_DOCKER_TLS=str(remote.certs))
    there = engines.client(remote)
    try:
        script = [{"bash": "echo from the other engine > /app/made.txt; rm /app/system.md; sleep 4"}, {"done": "ok"}]
        task = server.task("write made.txt", script, workspace_mode="rw", timeout=120)
        seen_there = seen_here = 0
        deadline = time.monotonic() + 600  # the first task there waits for the image to be sent
        while server.get(task)["status"] in ("queued", "running") and time.monotonic() < deadline:
            label = {"label": f"{engine.LABEL}={task}"}
            seen_there = max(seen_there, len(there.api.containers(all=True, filters=label)))
            seen_here = max(seen_here, len(docker_client.api.containers(all=True, filters=label)))
            time.sleep(0.2)
        result = server.get(task)
        assert (result["status"], result["result"]) == ("done", "ok"), result
        assert seen_there == 1 and seen_here == 0, "the task's container was on the TLS engine, never here"
        assert not there.api.containers(all=True, filters={"label": f"{engine.LABEL}={task}"}), "removed at its end"
        workspace = tmp_path / "home" / "sessions" / task / "workspace"
        assert (workspace / "made.txt").read_text() == "from the other engine\n"  # copied back (rw)
        assert not (workspace / "system.md").exists() and (workspace / "goal").is_file()
        started = server.events(task)[0][2]
        assert started["settings"]["sandbox"]["docker_host"] == remote.url  # the recording says where it ran
    finally:
        server.stop()
