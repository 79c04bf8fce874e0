"""The session's seam to a sandbox, and where sessions are recorded."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from sandshell.config import SessionSettings, Settings
from sandshell.sandbox.protocol import FileContent, ModelState, Output, Result


class SandboxLike(Protocol):
    def execute(
        self, command: str, timeout: float | None = None, on_output: Callable[[Output], None] | None = None
    ) -> Result: ...
    def read_file(self, path: str, limit: int | None = None) -> FileContent: ...
    def write_file(self, path: str, content: str, append: bool = False) -> int: ...
    def state(self) -> ModelState: ...


def public_settings(settings: Settings) -> dict[str, Any]:
    """Settings worth recording, section by section (`{"model": {...}, "sandbox": {...}, ...}`), without
    secrets (API keys, the service's token)."""
    out: dict[str, Any] = {"home": dataclasses.asdict(settings.home)}
    for name, section in settings.sections():
        fields = dataclasses.asdict(section)
        del fields["home"]  # (said once, above)
        out[name] = fields
    out["model"].pop("openai_api_key")
    out["service"].pop("api_token")
    return out


def session_dir(settings: SessionSettings, session_id: str) -> Path:
    return settings.path(settings.sessions_dir) / session_id
