"""What `Sandbox` asks of the thing its agent runs in, whichever engine made it: a Docker container
(`container.py`) or a Kubernetes pod (`kubernetes/pods.py`): starting it, whether it runs, why it died."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandshell.config import SandboxSettings
from sandshell.errors import SandboxError
from sandshell.resources import command
from sandshell.sandbox import engine
from sandshell.sandbox.connection import AttachConnection, Connection
from sandshell.sandbox.container import ContainerSpec, create_container, remove_container
from sandshell.sandbox.health import death, last_log_line, running
from sandshell.sandbox.image import ensure_image
from sandshell.sandbox.kubernetes import cluster as kube
from sandshell.sandbox.kubernetes.pods import Pod, needs_image

Log = Callable[[str], None]


def check_workspace(workspace: Path, settings: SandboxSettings) -> None:
    """One sentence when `workspace` cannot go to /app. Reset is advised only for the folder it lays
    out (the settings' own workspace), never for a folder named elsewhere."""
    if workspace.is_dir():
        return
    if workspace.exists():
        raise SandboxError(f"the workspace {workspace} is not a folder")
    home = workspace == settings.path(settings.workspace)
    fix = f"run {command('reset')} to create it" if home else "create it first"
    raise SandboxError(f"the workspace {workspace} does not exist; {fix}")


def start_container(
    client: Any, settings: SandboxSettings, workspace: Path, session_id: str, log: Log, quarantine_dir: Path
) -> tuple[Any, ContainerSpec, Any, Connection]:
    """(client, spec, container, connection) of a new session's container (the client made, and
    what crashed sessions left reaped, on first use)."""
    if client is None:
        client = engine.client(settings)
        for name in engine.reap(client):
            log(f"removed a leftover container {name}")
    check_workspace(workspace, settings)
    image = ensure_image(client, settings, log)
    spec = ContainerSpec.for_session(settings, workspace, session_id, image, log, quarantine_dir)
    container = create_container(client, spec)
    return client, spec, container, AttachConnection(client.api, container.id)


def start_pod(
    cluster: Any, settings: SandboxSettings, workspace: Path, session_id: str, log: Log
) -> tuple[Any, Pod, Connection]:
    """(cluster, pod, connection) of a new session's pod, placed by the cluster's scheduler and running."""
    needs_image(settings)  # before the cluster is asked anything
    if cluster is None:
        cluster = kube.Cluster(settings)
        for name in cluster.reap(engine._alive):
            log(f"removed a leftover pod {name}")
    check_workspace(workspace, settings)
    pod = Pod(cluster, settings, session_id)
    pod.create()
    return cluster, pod, pod.connection()


def alive(box: Any) -> bool:
    """Whether it still runs (an engine that does not answer is taken to mean yes)."""
    return box.running() if isinstance(box, Pod) else running(box)


def why_dead(box: Any, fallback: object) -> str:
    """Why it stopped, as its engine tells it, else `fallback`."""
    return box.death(fallback) if isinstance(box, Pod) else death(box, fallback)


def last_words(box: Any) -> str:
    """The last thing it said: usually why it died."""
    return box.last_words() if isinstance(box, Pod) else last_log_line(box)


def remove(client: Any, box: Any, spec: ContainerSpec | None) -> None:
    """Remove it (a container with its volumes, a pod with its network policy)."""
    if isinstance(box, Pod):
        box.remove()
    else:
        remove_container(client, box, spec)
