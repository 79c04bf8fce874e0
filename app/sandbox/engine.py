"""The Docker engine: connecting with a clear error, and reaping what crashed sessions left behind."""

from __future__ import annotations

import os
import secrets
import socket
import time

import docker
import docker.errors

from sandshell.errors import DockerUnavailable

LABEL = "sandshell.session"
PID_LABEL = "sandshell.pid"
HOST_LABEL = "sandshell.host"


def client() -> docker.DockerClient:
    """A Docker client that has answered a ping, or DockerUnavailable with what to do."""
    try:
        c = docker.from_env(timeout=60)
        c.ping()
        return c
    except docker.errors.DockerException as e:
        reason = str(e).split("(")[0].strip()[:160]
        raise DockerUnavailable(
            f"no Docker engine answers ({reason}); start Docker (e.g. `sudo systemctl start docker`) "
            "and make sure your user may use it"
        ) from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def reap(c: docker.DockerClient) -> list[str]:
    """Remove sandshell containers whose host process is gone (or that have stopped); returns their names.

    One list call, no per-container inspect: another session's container may vanish meanwhile."""
    removed = []
    here = socket.gethostname()
    for listed in c.api.containers(all=True, filters={"label": [LABEL, PID_LABEL, HOST_LABEL]}):
        labels = listed.get("Labels") or {}  # all three: only a session's container carries them
        pid = labels.get(PID_LABEL, "")
        owner_gone = labels.get(HOST_LABEL) == here and pid.isdigit() and not _alive(int(pid))
        if owner_gone or listed.get("State") in ("exited", "dead"):
            try:
                c.api.remove_container(listed["Id"], force=True, v=True)
                removed.append((listed.get("Names") or [listed["Id"][:12]])[0].lstrip("/"))
            except docker.errors.APIError:
                pass  # gone already, or being removed by its owner
    return removed


def new_session_id() -> str:
    """A session's name: when it started, and a little randomness (`20261122-011200-ab12`)."""
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
