"""Sessions as pods, against the fake API server backed by the local Docker engine (tests/kubefake.py).

The fake is checked first with the real kubectl and the official client, so what the product's
tests then show (the engine code, framing, binary safety, re-attach, back-pressure, cleanup,
failures as sentences) is shown against a server that speaks the protocol as a cluster does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandshell.bot import Environment, Permission
from sandshell.config import Settings
from sandshell.errors import SandboxError, SandshellError
from sandshell.eval.run import Variant, run_suite
from sandshell.eval.task import load_tasks
from sandshell.sandbox.image import ensure_image
from sandshell.sandbox.kubernetes import cluster as kube
from sandshell.sandbox.kubernetes import podspec
from sandshell.sandbox.protocol import Output, Result
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings
from tests.kubefake import FAKE_LABEL, FakeCluster
from tests.service_util import Server

pytestmark = [pytest.mark.docker, pytest.mark.network]
# The same tests against a real cluster (those that switch the fake's faults on are skipped):
# SANDSHELL_TEST_KUBECONFIG=~/.kube/config SANDSHELL_TEST_KUBE_IMAGE=REGISTRY/sandshell-sandbox:TAG pytest ...
REAL = os.environ.get("SANDSHELL_TEST_KUBECONFIG", "")
REAL_IMAGE = os.environ.get("SANDSHELL_TEST_KUBE_IMAGE", "")
TASKS = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module")
def image(docker_client: docker.DockerClient) -> str:
    return REAL_IMAGE if REAL else ensure_image(docker_client, _base_settings().sandbox)


@pytest.fixture(scope="module")
def fake(docker_client: docker.DockerClient) -> Iterator[FakeCluster]:
    """The fake API server; a test that needs it (its faults, what it saw) is skipped on a real cluster."""
    if REAL:
        pytest.skip("needs the fake API server's switches")
    cluster = FakeCluster(docker_client).start()
    yield cluster
    cluster.stop()
    left = docker_client.api.containers(all=True, filters={"label": f"{FAKE_LABEL}"})
    assert not [c for c in left if c["Labels"].get("sandshell.pid") == str(os.getpid())], "pods' containers left"


@pytest.fixture
def kconf(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return REAL or request.getfixturevalue("fake").kubeconfig(str(tmp_path / "kubeconfig"))


@pytest.fixture
def ks(kconf: str, image: str) -> Settings:
    """Settings for sessions on the fake cluster."""
    return _base_settings(
        sandbox={
            "engine": "kubernetes",
            "kube_config": kconf,
            "kube_image": image,
            "exit_timeout": 5.0,
            "kill_grace": 0.5,
            "kube_start_timeout": 20.0,
            "kube_heartbeat": 1.0,
        },
    )


def _kubectl(kconf: str, *args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["kubectl", "--kubeconfig", kconf, *args], input=stdin, capture_output=True, timeout=timeout)


def _containers(docker_client: docker.DockerClient, session: str) -> list[object]:
    return list(docker_client.api.containers(all=True, filters={"label": f"sandshell.session={session}"}))


def _left(ks: Settings) -> list[str]:
    """Sessions' pods and network policies still in the namespace, as the API server lists them."""
    cluster = kube.Cluster(ks.sandbox)
    try:
        pods = cluster.call(
            "list pods", cluster.core.list_namespaced_pod, cluster.namespace, label_selector="sandshell.session"
        )
        fn = cluster.net.list_namespaced_network_policy
        policies = cluster.call("list policies", fn, cluster.namespace, label_selector="sandshell.session")
        return [i["metadata"]["name"] for i in [*pods["items"], *policies["items"]]]
    finally:
        cluster.close()


# -- the fake, validated ----------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_applies_waits_attaches_and_deletes_against_the_fake(
    kconf: str, image: str, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    pod = podspec.pod(_base_settings(sandbox={"kube_image": image}).sandbox, "kubectl-check", image)
    name = pod["metadata"]["name"]
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(pod))
    applied = _kubectl(kconf, "apply", "--validate=false", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    waited = _kubectl(kconf, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s")
    assert waited.returncode == 0 and b"condition met" in waited.stdout, waited.stderr
    phase = _kubectl(kconf, "get", "pod", name, "-o", "jsonpath={.status.phase}")
    assert phase.stdout == b"Running", phase.stderr
    listed = _kubectl(kconf, "get", "pods", "-l", "sandshell.session=kubectl-check", "-o", "name")
    assert listed.stdout.strip() == f"pod/{name}".encode(), listed.stderr
    hello = b'\n{"type":"hello","version":2,"resume":null,"nonce":"kubectl-nonce"}\n{"type":"ping","id":"p1"}\n'
    attached = subprocess.Popen(
        ["kubectl", "--kubeconfig", kconf, "attach", "-i", name, "-c", "sandbox"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert attached.stdin is not None and attached.stdout is not None
    attached.stdin.write(hello)
    attached.stdin.flush()
    seen = b""
    deadline = time.monotonic() + 30
    while b'"type":"pong"' not in seen and time.monotonic() < deadline:
        seen += attached.stdout.read1(65536)
    attached.kill()
    attached.wait(10)
    assert b'"nonce":"kubectl-nonce"' in seen and b'"type":"pong","id":"p1"' in seen, seen[-500:]
    deleted = _kubectl(kconf, "delete", "pod", name, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    gone = _kubectl(kconf, "get", "pod", name)
    assert gone.returncode != 0 and b"NotFound" in gone.stderr
    assert not _containers(docker_client, "kubectl-check")


def test_the_official_client_creates_watches_reads_and_deletes(ks: Settings, image: str) -> None:
    cluster = kube.Cluster(ks.sandbox)
    try:
        assert cluster.namespace == "default" and cluster.host.startswith("http://127.0.0.1:")
        body = podspec.pod(ks.sandbox, "client-check", image)
        cluster.create("pod", body)
        states = []
        for pod in cluster.watch(body["metadata"]["name"], 20):
            states.append(pod["status"].get("phase"))
            if states[-1] == "Running":
                break
        assert states[0] == "Pending" and states[-1] == "Running", states
        assert "Scheduled" in " ".join(cluster.events(body["metadata"]["name"]))
        cluster.delete(body["metadata"]["name"])
        with pytest.raises(kube.NotFound):
            cluster.pod(body["metadata"]["name"], away=1)
    finally:
        cluster.close()


# -- a whole session on pods ------------------------------------------------------------------
def test_a_session_runs_in_a_pod_with_the_same_results_as_on_docker(
    ks: Settings, workspace: Path, docker_client: docker.DockerClient
) -> None:
    (workspace / "data.bin").write_bytes(bytes(range(256)) * 4096)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "note.txt").write_text("from the host\n")
    os.symlink("sub/note.txt", workspace / "link")
    with Sandbox(workspace=workspace, settings=ks.sandbox) as sb:
        assert sb.hello["pid"] == 1 and sb.hello["host"] == "sandbox"
        r = sb.execute("cd sub && cat note.txt && export K=v; md5sum /app/data.bin | cut -c1-32; readlink /app/link")
        digest = hashlib.md5((workspace / "data.bin").read_bytes()).hexdigest()
        assert (r.return_code, r.output) == (0, f"from the host\n{digest}\nsub/note.txt\n"), r
        r = sb.execute("pwd; echo $K; printf 'x%.0s' $(seq 5); exit 3")
        assert (r.return_code, r.output, r.cwd) == (3, "/app/sub\nv\nxxxxx", "/app/sub"), r
        assert sb.execute("sleep 10", timeout=1).timed_out
        sb.write_file("/app/made.txt", "written\n")
        assert sb.read_file("/app/made.txt").content == "written\n"
        assert sb.execute("rm /app/link; echo new > /app/sub/new.txt").return_code == 0
    assert (workspace / "made.txt").read_text() == "written\n"  # rw: back on the host at the end
    assert (workspace / "sub" / "new.txt").read_text() == "new\n" and not (workspace / "link").exists()
    assert (workspace / "data.bin").read_bytes() == bytes(range(256)) * 4096
    assert not _left(ks) and (REAL or not _containers(docker_client, sb.session_id))


def test_what_the_model_leaves_in_app_cannot_reach_outside_the_workspace(
    ks: Settings, tmp_path: Path, workspace: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host only\n")
    with Sandbox(workspace=workspace, settings=ks.sandbox) as sb:
        hostile = (
            f"ln -s {outside} /app/escape; ln -s ../../../../{outside}/secret /app/up; mkfifo /app/fifo; "
            "ln -s /proc/1/environ /app/env; touch /app/$'new\\nline'; mkdir -p /app/d; ln -s /etc /app/d/etc"
        )
        assert sb.execute(hostile).return_code == 0
        for path in ("env", "escape/secret", "d/etc/passwd", "fifo"):  # a read through a link or of a FIFO
            assert sb._ask({"type": "get", "path": path, "offset": 0, "size": 100})["error"], path
        for path in ("escape/planted", "d/etc/planted", "../planted", "/app/abs"):  # a write through one
            put = {"type": "put", "path": path, "kind": "file", "mode": 0o644, "data": "aGk="}
            assert sb._ask(put)["error"], path
        said = sb.sync_workspace()
        assert "refused" in said, said
    assert (outside / "secret").read_text() == "host only\n" and sorted(os.listdir(outside)) == ["secret"]
    assert not (workspace / "escape").exists() and not (workspace / "up").exists()
    assert not (workspace / "fifo").exists() and (workspace / "new\nline").is_file()
    assert not (tmp_path / "planted").exists()


def test_copy_mode_never_writes_the_host_folder(ks: Settings, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("as it was\n")
    with Sandbox(workspace=workspace, settings=ks.sandbox.replace(workspace_mode="copy")) as sb:
        assert sb.execute("cat keep.txt; echo changed > keep.txt; touch other").output == "as it was\n"
    assert sorted(os.listdir(workspace)) == ["keep.txt"] and (workspace / "keep.txt").read_text() == "as it was\n"


def test_a_locked_pod_has_no_network_no_root_and_its_policy_goes_with_it(
    ks: Settings, workspace: Path, docker_client: docker.DockerClient
) -> None:
    with Sandbox(workspace=workspace, settings=ks.sandbox.replace(profile="locked")) as sb:
        assert f"sandshell-{sb.session_id}" in _left(ks)  # the pod and its deny-all policy, under one name
        r = sb.execute("id -u; touch /etc/x 2>&1; cat /proc/net/dev | grep -c eth0 || true")
        assert r.output.splitlines()[0] == "1000" and "Read-only file system" in r.output, r
        assert r.output.splitlines()[-1] == "0", r  # no interface but lo
        if not REAL:  # the fake puts a pod a deny-all policy selects on no network, as a CNI would cut it off
            [box] = _containers(docker_client, sb.session_id)
            assert docker_client.api.inspect_container(box["Id"])["HostConfig"]["NetworkMode"] == "none"  # type: ignore[index]
    assert not _left(ks)


# -- the attach: re-attach, back-pressure, frame sizes ------------------------------------------
def test_a_dropped_attach_is_resumed_with_nothing_lost_or_repeated(
    ks: Settings, workspace: Path, fake: FakeCluster
) -> None:
    said: list[str] = []
    with Sandbox(workspace=workspace, settings=ks.sandbox, log=said.append) as sb:
        chunks: list[str] = []
        result: list[Result] = []

        def run() -> None:
            for event in sb.stream("for i in $(seq 1 60); do echo line$i; sleep 0.05; done", timeout=30):
                (chunks.append(event.data) if isinstance(event, Output) else result.append(event))

        t = threading.Thread(target=run)
        t.start()
        for _ in range(3):
            time.sleep(0.7)
            assert fake.drop_attaches() == 1
        t.join(60)
        assert result and result[0].return_code == 0, result
        assert "".join(chunks) == "".join(f"line{i}\n" for i in range(1, 61))
        assert said.count("reconnected to the agent") >= 3
        assert sb.execute("echo still here").output == "still here\n"


def test_an_attach_dropped_between_commands_is_noticed_before_the_next_one_is_sent(
    ks: Settings, workspace: Path, fake: FakeCluster
) -> None:
    with Sandbox(workspace=workspace, settings=ks.sandbox) as sb:
        assert sb.execute("cd /tmp; X=kept").return_code == 0
        for _ in range(3):
            assert fake.drop_attaches() == 1
            time.sleep(0.2)
            start = time.monotonic()
            r = sb.execute("echo $X $PWD")
            assert (r.output, r.lost) == ("kept /tmp\n", False), r
            assert time.monotonic() - start < 3.0  # not a wait for a command that never arrived


def test_idle_attaches_send_heartbeats_and_v5_half_closes_while_v4_still_works(
    ks: Settings, workspace: Path, fake: FakeCluster
) -> None:
    fake.pings, fake.half_closed, fake.chosen = 0, 0, []
    with Sandbox(workspace=workspace, settings=ks.sandbox.replace(kube_heartbeat=0.4)) as sb:
        time.sleep(2.0)
        assert fake.pings >= 2, "an idle attach sent no ping"
        assert sb.execute("echo v5").output == "v5\n"
    assert fake.chosen[0] == "v5.channel.k8s.io" and fake.half_closed >= 1
    fake.protocols, fake.chosen, fake.half_closed = ["v4.channel.k8s.io"], [], 0
    try:
        with Sandbox(workspace=workspace, settings=ks.sandbox) as sb:
            assert sb.execute("echo v4").output == "v4\n"
            fake.drop_attaches()
            assert sb.execute("echo again").output == "again\n"
    finally:
        fake.protocols = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
    assert set(fake.chosen) == {"v4.channel.k8s.io"} and fake.half_closed == 0


def test_large_output_is_read_with_back_pressure_and_stdin_messages_stay_small(
    ks: Settings, workspace: Path, fake: FakeCluster
) -> None:
    with Sandbox(workspace=workspace, settings=ks.sandbox.replace(output_limit=0)) as sb:
        assert sb.conn is not None
        total, peak = 0, 0
        for i, event in enumerate(sb.stream("head -c 20000000 /dev/zero | tr '\\0' a", timeout=60)):
            if isinstance(event, Result):
                assert event.return_code == 0 and not event.lost, event
            if isinstance(event, Output):
                total += len(event.data)
                if i == 1:
                    time.sleep(1.0)  # a slow reader: the agent and the fake must wait, not pile up here
                queued = len(sb.conn._buf) + sum(len(str(f)) for f in sb.conn._frames)  # type: ignore[attr-defined]
                peak = max(peak, queued)
        assert total == 20_000_000
        assert peak < 4 * 2**20, f"{peak} bytes waited in the host's buffers"
        big = "\n" * (1024 * 1024 - 100)  # escaped in JSON: a frame of about 2 MiB
        fake.stdin_messages.clear()
        sb.write_file("/app/big.txt", big)
        assert sb.execute("wc -c < /app/big.txt").output.strip() == str(len(big))
        assert fake.stdin_messages and max(fake.stdin_messages) <= 1024 * 1024


# -- failures, each one sentence, nothing left ---------------------------------------------------
def test_a_pod_that_never_schedules_says_why_and_leaves_nothing(ks: Settings, workspace: Path) -> None:
    with pytest.raises(SandboxError, match=r"did not schedule .* Insufficient memory.*SANDSHELL_MEMORY"):
        Sandbox(workspace=workspace, settings=ks.sandbox.replace(memory="100g", kube_start_timeout=3.0)).__enter__()
    assert not _left(ks)


def test_an_image_that_cannot_be_pulled_says_so(ks: Settings, workspace: Path) -> None:
    with pytest.raises(SandboxError, match=r"cannot pull the sandbox image registry.invalid/none:1 \(ErrImagePull"):
        Sandbox(workspace=workspace, settings=ks.sandbox.replace(kube_image="registry.invalid/none:1")).__enter__()
    assert not _left(ks)


@pytest.mark.parametrize(
    ("verb", "resource", "says"),
    [
        ("create", "pods", r"refused to create pod .*Role in docs/scaling.md"),
        ("create", "pods/attach", r"refused to attach .* needs get and create on pods/attach"),
    ],
)
def test_rbac_refusals_are_one_sentence(
    ks: Settings, workspace: Path, fake: FakeCluster, verb: str, resource: str, says: str
) -> None:
    fake.forbidden.add((verb, resource))
    try:
        with pytest.raises(SandshellError, match=says):
            Sandbox(workspace=workspace, settings=ks.sandbox).__enter__()
    finally:
        fake.forbidden.clear()
    assert not _left(ks)


def test_a_node_lost_mid_command_is_named_and_the_next_command_gets_a_fresh_pod(
    ks: Settings, workspace: Path, fake: FakeCluster
) -> None:
    with Sandbox(workspace=workspace, settings=ks.sandbox) as sb:
        first = sb.container.name
        timer = threading.Timer(1.0, fake.lose_node, ("default", first))
        timer.start()
        r = sb.execute("sleep 20", timeout=30)
        timer.join()
        assert r.lost and "NodeLost" in (r.error or ""), r
        again = sb.execute("echo fresh")
        assert again.output == "fresh\n" and sb.container.name == first  # the same session's name, a new pod
    assert not _left(ks)


def test_an_api_server_away_for_a_while_is_waited_out(ks: Settings, workspace: Path, fake: FakeCluster) -> None:
    with Sandbox(workspace=workspace, settings=ks.sandbox) as sb:
        chunks: list[str] = []

        def run() -> None:
            chunks.extend(
                e.data for e in sb.stream("for i in 1 2 3 4 5 6; do echo $i; sleep 0.5; done") if isinstance(e, Output)
            )

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.6)
        fake.away(2.0)
        fake.drop_attaches()
        t.join(60)
        assert "".join(chunks) == "1\n2\n3\n4\n5\n6\n"


def test_the_reaper_removes_pods_a_dead_process_left(ks: Settings, workspace: Path, image: str) -> None:
    cluster = kube.Cluster(ks.sandbox)
    try:
        orphan = podspec.pod(ks.sandbox, "orphan-1", image)
        orphan["metadata"]["labels"][podspec.SERVER_LABEL] = podspec.server_id().rsplit(".", 1)[0] + ".999999999"
        cluster.create("pod", orphan)
        said: list[str] = []
        with Sandbox(workspace=workspace, settings=ks.sandbox, log=said.append):
            assert "removed a leftover pod sandshell-orphan-1" in said
    finally:
        cluster.close()
    assert not _left(ks)


# -- every front end ---------------------------------------------------------------------------
def test_a_task_through_the_service_runs_in_a_pod_with_its_events(
    kconf: str, image: str, ks: Settings, tmp_path: Path
) -> None:
    server = Server(
        tmp_path / "svc", SANDSHELL_ENGINE="kubernetes", SANDSHELL_KUBECONFIG=kconf, SANDSHELL_KUBE_IMAGE=image
    )
    try:
        task = server.task("say hello", [{"bash": "echo hello from $(hostname)"}, {"done": "said hello"}])
        events = server.events(task)
        kinds = [kind for _, kind, _ in events]
        assert kinds[0] == "SessionStarted" and kinds[-1] == "SessionEnded", kinds
        assert "hello from sandbox" in "".join(d["data"] for _, k, d in events if k == "OutputChunk")
        assert server.get(task)["status"] == "done"
    finally:
        server.stop()
    assert not _left(ks)


def test_eval_runs_tasks_in_pods(ks: Settings, tmp_path: Path) -> None:
    tasks = load_tasks([TASKS / f"{n}.toml" for n in ("write-hello", "rename-file", "fix-script")])
    results = run_suite(
        tasks,
        [
            Variant(
                "pods",
                ks.replace(model=ks.model.replace(intro=False), sandbox=ks.sandbox.replace(profile="locked")),
                solutions=True,
            )
        ],
        tmp_path / "out",
    )
    assert [r.passed for r in results] == [True, True, True], [(r.task, r.error, r.check_output) for r in results]
    assert not _left(ks)


def test_a_bot_environment_runs_in_a_pod(ks: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "bot"
    folder.mkdir()
    (folder / "in.txt").write_text("42\n")
    with Environment(folder, Permission.READ_WRITE, settings=ks) as env:
        out = env.execute("cat in.txt; echo 43 > out.txt")
        assert out["return_code"] == 0 and out["output"] == "42\n", out
    assert (folder / "out.txt").read_text() == "43\n"
    assert not _left(ks)
