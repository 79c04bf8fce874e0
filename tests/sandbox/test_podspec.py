"""A session's pod spec and the attach framing, without a cluster or an engine."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from sandshell import config
from sandshell.bot.tools import ToolDefinition, cluster_tool_image, tools_hash
from sandshell.errors import ClusterUnavailable, SandboxError, SettingsError
from sandshell.sandbox import engine
from sandshell.sandbox.container import STANDARD_CAPS
from sandshell.sandbox.kubernetes import podspec
from sandshell.sandbox.kubernetes.attach import STDIN_FRAME, AttachRefused, PodAttachConnection, _refusal
from sandshell.sandbox.kubernetes.pods import _verdict
from sandshell.sandbox.kubernetes.websocket import masked
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings


def test_a_standard_pod_is_hardened_as_the_container_is() -> None:
    s = _base_settings(
        sandbox={
            "memory": "512m",
            "cpus": 0.5,
            "kube_runtime_class": "gvisor",
            "kube_node_selector": "pool=sandbox, zone=a",
        }
    )
    pod = podspec.pod(s.sandbox, "20261128-000000-ab12", "registry.example/sandshell-sandbox:abc")
    spec = pod["spec"]
    [c] = spec["containers"]
    assert (c["stdin"], c["stdinOnce"], c["tty"]) == (True, False, False)
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert spec["runtimeClassName"] == "gvisor" and spec["nodeSelector"] == {"pool": "sandbox", "zone": "a"}
    assert spec["activeDeadlineSeconds"] == s.sandbox.kube_deadline
    sec = c["securityContext"]
    assert sec["capabilities"] == {"drop": ["ALL"], "add": STANDARD_CAPS}
    assert sec["allowPrivilegeEscalation"] is False and sec["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sec["readOnlyRootFilesystem"] is False and "runAsNonRoot" not in sec
    assert c["resources"]["limits"] == c["resources"]["requests"] == {"memory": "512Mi", "cpu": "500m"}
    assert c["command"] == ["python3", "-m", "sandshell_agent", "--stdio"]
    assert pod["metadata"]["labels"]["sandshell.session"] == "20261128-000000-ab12"
    assert pod["metadata"]["name"] == "sandshell-20261128-000000-ab12"
    assert not any(e["name"] == "SANDSHELL_TOKEN" for e in c["env"])  # attach: nothing inside to guess


def test_a_locked_pod_is_non_root_read_only_with_no_capability_and_a_deny_all_policy() -> None:
    pod = podspec.pod(_base_settings(sandbox={"profile": "locked"}).sandbox, "s1", "img")
    sec = pod["spec"]["containers"][0]["securityContext"]
    assert sec["capabilities"] == {"drop": ["ALL"], "add": []}
    assert sec["readOnlyRootFilesystem"] is True and sec["runAsNonRoot"] is True and sec["runAsUser"] == 1000
    policy = podspec.deny_egress("s1")
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"sandshell.session": "s1"}},
        "policyTypes": ["Ingress", "Egress"],
    }


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"memory": "lots"}, "SANDSHELL_MEMORY='lots' is not a size a pod takes"),
        ({"kube_node_selector": "pool"}, "SANDSHELL_KUBE_NODE_SELECTOR has 'pool'; write KEY=VALUE"),
    ],
)
def test_settings_a_pod_cannot_take_are_one_sentence(changes: dict[str, str], says: str) -> None:
    with pytest.raises(SandboxError, match=says):
        podspec.pod(_base_settings(sandbox=changes).sandbox, "s1", "img")


def test_an_unknown_engine_is_refused_with_the_choices() -> None:
    with pytest.raises(SettingsError, match="SANDSHELL_ENGINE='k8s' must be one of docker, kubernetes"):
        config.load(env_file=None, environ={"SANDSHELL_ENGINE": "k8s"})


def test_pod_states_become_a_verdict() -> None:
    waiting = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull", "message": "nope"}}}],
        }
    }
    assert "cannot pull the sandbox image img (ErrImagePull: nope)" in _verdict(waiting, "img")
    running = {"status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}}
    assert _verdict(running, "img") == "running"
    assert _verdict({"status": {"phase": "Pending"}}, "img") == ""
    assert "ended before the session began (Failed" in _verdict({"status": {"phase": "Failed"}}, "img")


def test_stdin_goes_in_masked_messages_of_at_most_one_mib() -> None:
    class Conf:
        host = "http://127.0.0.1:1"

    ours, theirs = socket.socketpair()
    conn = PodAttachConnection(Conf(), "ns", "pod", heartbeat=0)
    conn.sock = ours
    data = bytes(range(256)) * (3 * 4096 + 7)  # 3 MiB and a little
    received: list[bytes] = []

    def read() -> None:
        while chunk := theirs.recv(1 << 20):
            received.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    conn.send_raw(data)
    ours.close()
    reader.join(30)
    got, sizes, raw = b"", [], b"".join(received)
    pos = 0
    while pos < len(raw):
        assert raw[pos] == 0x82 and raw[pos + 1] & 0x80  # a final binary frame, masked
        size, at = raw[pos + 1] & 0x7F, pos + 2
        if size == 127:
            size, at = int.from_bytes(raw[at : at + 8], "big"), at + 8
        elif size == 126:
            size, at = int.from_bytes(raw[at : at + 2], "big"), at + 2
        payload = masked(raw[at + 4 : at + 4 + size], raw[at : at + 4])
        assert payload[0] == 0  # the stdin channel
        sizes.append(size)
        got += payload[1:]
        pos = at + 4 + size
    assert got == data and max(sizes) <= STDIN_FRAME and len(sizes) == 4


def test_a_refused_attach_names_the_verbs_it_needs() -> None:
    a, b = socket.socketpair()
    b.close()
    body = b'{"kind":"Status","message":"pods \\"p\\" is forbidden: cannot create resource \\"pods/attach\\""}'
    err = _refusal(403, body, a, "ns", "p")
    assert isinstance(err, AttachRefused) and err.status == 403
    assert 'refused to attach to pod p in ns (pods "p" is forbidden' in str(err)
    assert "needs get and create on pods/attach" in str(err)


def test_on_a_cluster_the_scheduler_places_and_tool_images_come_from_the_registry() -> None:
    s = _base_settings(sandbox={"engine": "kubernetes", "docker_hosts": "tcp://127.0.0.1:1,tcp://127.0.0.1:2"})
    assert engine.least_loaded(s.sandbox) is s.sandbox  # no engine of the list is asked: none answers here
    tools = [ToolDefinition("true", "true", "jq", name="jq")]
    image = cluster_tool_image(s.sandbox.replace(kube_image="reg.example:5000/sandshell-sandbox:abc"), tools)
    assert image == f"reg.example:5000/sandshell-sandbox-tools-{tools_hash(tools)}:abc"


def test_a_cluster_without_an_image_or_a_configuration_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="SANDSHELL_ENGINE=kubernetes needs SANDSHELL_KUBE_IMAGE"):
        Sandbox(workspace=tmp_path, settings=_base_settings(sandbox={"engine": "kubernetes"}).sandbox).start()
    pytest.importorskip("kubernetes")
    missing = _base_settings(
        sandbox={"engine": "kubernetes", "kube_image": "img", "kube_config": str(tmp_path / "nowhere")}
    )
    with pytest.raises(ClusterUnavailable, match=r"cannot read the Kubernetes configuration .*SANDSHELL_KUBECONFIG"):
        Sandbox(workspace=tmp_path, settings=missing.sandbox).start()
