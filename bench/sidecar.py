"""Containers a bench starts beside a sandbox, from its image (`cat`, a relay): labelled as a
session's, with this process as owner, so a run cut short leaves nothing the reaper would not take."""

from __future__ import annotations

import os
import socket
from typing import Any

from sandshell.sandbox.engine import HOST_LABEL, LABEL, PID_LABEL


def sidecar(client: Any, tag: str, cmd: list[str], what: str) -> Any:
    """A created (not started) container running `cmd` with stdin open, no network and no log."""
    labels = {LABEL: f"bench-{what}", PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()}
    return client.containers.create(
        tag, cmd, stdin_open=True, network_mode="none", labels=labels, log_config={"type": "none"}
    )
