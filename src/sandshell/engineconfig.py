"""Which engine sessions run on, and the cluster's settings when it is Kubernetes: the first part of
`config.Settings` (documented and loaded with the rest)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


def _f(env: str, default: Any, doc: str) -> Any:
    return field(default=default, metadata={"env": env, "doc": doc})


@dataclass(frozen=True)
class EngineSettings:
    """Which engine runs sessions' sandboxes; the SANDSHELL_KUBE_* settings apply to kubernetes only."""

    engine: Literal["docker", "kubernetes"] = _f(
        "SANDSHELL_ENGINE",
        "docker",
        "docker (a container on a Docker engine) or kubernetes (a pod on a cluster, placed by its scheduler, "
        "reached through pods/attach; the workspace is streamed in and back through the agent)",
    )
    kube_config: str = _f(
        "SANDSHELL_KUBECONFIG",
        "",
        "kubeconfig file for the kubernetes engine; empty: in-cluster config inside a pod, else KUBECONFIG or "
        "~/.kube/config",
    )
    kube_context: str = _f("SANDSHELL_KUBE_CONTEXT", "", "kubeconfig context to use (empty: its current context)")
    kube_namespace: str = _f(
        "SANDSHELL_KUBE_NAMESPACE", "", "namespace sessions' pods run in (empty: the context's, else default)"
    )
    kube_image: str = _f(
        "SANDSHELL_KUBE_IMAGE",
        "",
        "the sandbox image as the cluster pulls it (REGISTRY/sandshell-sandbox:TAG, pushed as docs/scaling.md "
        "says); required with the kubernetes engine",
    )
    kube_runtime_class: str = _f(
        "SANDSHELL_KUBE_RUNTIME_CLASS", "", "runtimeClassName of sessions' pods, e.g. gvisor or kata (empty: none)"
    )
    kube_node_selector: str = _f(
        "SANDSHELL_KUBE_NODE_SELECTOR", "", "node labels sessions' pods must land on: KEY=VALUE, comma-separated"
    )
    kube_priority_class: str = _f(
        "SANDSHELL_KUBE_PRIORITY_CLASS", "", "priorityClassName of sessions' pods (empty: the cluster's default)"
    )
    kube_start_timeout: float = _f(
        "SANDSHELL_KUBE_START_TIMEOUT",
        120.0,
        "seconds a pod may take to be scheduled, pull its image and start before the session gives up",
    )
    kube_deadline: int = _f(
        "SANDSHELL_KUBE_DEADLINE", 86400, "activeDeadlineSeconds of a session's pod: a backstop if the host vanishes"
    )
    kube_heartbeat: float = _f(
        "SANDSHELL_KUBE_HEARTBEAT",
        20.0,
        "seconds between WebSocket pings on an idle attach (kubelets drop idle streams)",
    )
