"""What the host's channel (stdio.py: the agent's stdin and stdout, attached through the engine's
API) shares: its buffer sizes and the error frame."""

from __future__ import annotations

from typing import Any

READ_BYTES = 64 * 1024
# Output kept for a host that reconnects mid-command: more than can be in flight when the link
# drops (the 1 MiB outbox, the sockets' buffers); while no host is there, no more is read.
REPLAY_BYTES = 8 * 1024 * 1024


def error(rid: Any, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": rid, "code": code, "message": message}
