"""A session's pod and its NetworkPolicy, written from the settings: the profiles' hardening as a pod spec.

The same agent and hardening as on Docker (`container.py`), in the shape a cluster takes: the agent
is the only container and PID 1, on its own stdin/stdout (`stdin`, not `stdinOnce`, no TTY); every
capability dropped and the standard ones added back (none in locked), no privilege escalation,
seccomp RuntimeDefault, a read-only root and a non-root user in locked; no service account token
(nothing inside may reach the API server); requests and limits from the settings; an
`activeDeadlineSeconds` backstop; `/app` and `/tmp` as sized emptyDirs (the workspace is streamed
in and back through the agent, never mounted from a host). Pids limits are a node setting
(`podPidsLimit`): the agent's own watchdog keeps SANDSHELL_PIDS_LIMIT either way.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from sandshell.config import SandboxSettings
from sandshell.errors import SandboxError
from sandshell.sandbox.container import STANDARD_CAPS, agent_environment
from sandshell.sandbox.engine import LABEL

SERVER_LABEL = "sandshell.server"  # who made the pod: a restarted server reaps what it left
PROFILE_LABEL = "sandshell.profile"
LOCKED_UID = 1000  # the user of a locked pod: no workspace owner to borrow on a cluster


def server_id() -> str:
    """This process, as a label value: host name and pid (at most 63 characters, as labels allow)."""
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:50].strip("-_.")
    return f"{name or 'host'}.{os.getpid()}"


def pod_name(session_id: str) -> str:
    return f"sandshell-{session_id}".lower()[:63]


def node_selector(raw: str) -> dict[str, str]:
    """KEY=VALUE,KEY=VALUE as a dict; SandboxError naming the part that is not."""
    out = {}
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise SandboxError(f"SANDSHELL_KUBE_NODE_SELECTOR has {part!r}; write KEY=VALUE, comma-separated")
        out[key.strip()] = value.strip()
    return out


def _quantity(memory: str) -> str:
    """Docker's units (2g, 512m, 1024k, bytes) as a Kubernetes quantity (2Gi, 512Mi, ...)."""
    raw = memory.strip().lower().removesuffix("b")
    units = {"k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}
    if raw and raw[-1] in units and raw[:-1].isdigit():
        return raw[:-1] + units[raw[-1]]
    if raw.isdigit():
        return raw
    raise SandboxError(f"SANDSHELL_MEMORY={memory!r} is not a size a pod takes; write it as 2g, 512m or bytes")


def environment(settings: SandboxSettings, uid: int) -> list[dict[str, str]]:
    """The agent's environment as a pod's `env` (on a cluster /app is writable inside, whatever the mode)."""
    return [{"name": k, "value": v} for k, v in agent_environment(settings, uid, uid, app_read_only=False).items()]


def pod(settings: SandboxSettings, session_id: str, image: str) -> dict[str, Any]:
    """The pod of one session."""
    s = settings
    locked = s.profile == "locked"
    uid = LOCKED_UID if locked else 0
    memory, cpu = _quantity(s.memory), f"{int(s.cpus * 1000)}m"
    security: dict[str, Any] = {
        "capabilities": {"drop": ["ALL"], "add": [] if locked else STANDARD_CAPS},
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": locked,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if locked:
        security |= {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid}
    tmp = {"name": "tmp", "emptyDir": {"medium": "Memory", **_size(s.scratch_limit)}}
    app = {"name": "app", "emptyDir": _size(s.workspace_limit)}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostname": "sandbox",
        "activeDeadlineSeconds": int(s.kube_deadline),
        "terminationGracePeriodSeconds": 1,
        "securityContext": {"fsGroup": uid} if locked else {},
        "containers": [
            {
                "name": "sandbox",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-m", "sandshell_agent", "--stdio"],
                "workingDir": "/app",
                "stdin": True,
                "stdinOnce": False,
                "tty": False,
                "env": environment(s, uid),
                "resources": {"requests": {"memory": memory, "cpu": cpu}, "limits": {"memory": memory, "cpu": cpu}},
                "securityContext": security,
                "volumeMounts": [
                    {"name": "app", "mountPath": "/app"},
                    {"name": "tmp", "mountPath": "/tmp"},
                    {"name": "agent", "mountPath": "/run/sandshell-agent"},
                ],
            }
        ],
        "volumes": [app, tmp, {"name": "agent", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}],
    }
    if s.kube_runtime_class:
        spec["runtimeClassName"] = s.kube_runtime_class
    if s.kube_priority_class:
        spec["priorityClassName"] = s.kube_priority_class
    if selector := node_selector(s.kube_node_selector):
        spec["nodeSelector"] = selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(session_id), "labels": labels(session_id, s.profile)},
        "spec": spec,
    }


def labels(session_id: str, profile: str) -> dict[str, str]:
    return {LABEL: session_id, SERVER_LABEL: server_id(), PROFILE_LABEL: profile}


def deny_egress(session_id: str) -> dict[str, Any]:
    """The NetworkPolicy that keeps a locked session's pod off the network (Docker's `none`)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": pod_name(session_id), "labels": labels(session_id, "locked")},
        "spec": {"podSelector": {"matchLabels": {LABEL: session_id}}, "policyTypes": ["Ingress", "Egress"]},
    }


def _size(limit: int) -> dict[str, str]:
    return {"sizeLimit": str(int(limit))} if limit else {}
