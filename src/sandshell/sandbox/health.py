"""A session's container as the engine sees it: whether it runs, and why it stopped."""

from __future__ import annotations

from typing import Any

import docker.errors


def running(container: Any) -> bool:
    """Whether the container runs (an engine that does not answer is taken to mean yes)."""
    try:
        container.reload()
        return bool(container.status == "running")
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError:
        return True


def death(container: Any, fallback: object) -> str:
    """Why a container stopped, as the engine tells it: out of memory (the kernel's OOM killer ends
    the agent as readily as any process), else `fallback` (what the link to the agent said)."""
    try:
        container.reload()
        state = container.attrs.get("State") or {}
    except Exception:  # (no container, or an engine that does not answer: what the link said)
        return str(fallback)
    if state.get("OOMKilled") and state.get("Status") != "running":
        memory = (container.attrs.get("HostConfig") or {}).get("Memory") or 0
        limit = f" of {memory / 2**20:.0f} MiB" if memory else ""
        return f"it ran out of memory: the limit{limit} (SANDSHELL_MEMORY) was reached and the kernel ended the agent"
    return str(fallback)


def last_log_line(container: Any) -> str:
    """The last thing a dead container said: usually why it died."""
    try:
        lines = container.logs(tail=3).decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"status {container.status}"
    except docker.errors.APIError:
        return "it is gone"
