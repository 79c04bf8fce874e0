"""A task's check, run where the model never was: a fresh sandbox of the clean image with the final /app.

The model's own shell is no place for a verdict: a function named `cat`, an alias, a PATH of its
own or (in standard) a replaced `/usr/bin/cat` there would answer the check for it. So the check
gets a new container of the same image and profile, whose /app is the session's, carried over by
the engine's archive API (no program of the session's container runs for it), and nothing else
of the session: no shell state, no process, no change outside /app. On a cluster the copy comes
through the session's agent (PID 1, not the model's shell) and goes into a fresh pod.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors

from sandshell.config import SandboxSettings
from sandshell.errors import SandshellError
from sandshell.sandbox.protocol import Result
from sandshell.sandbox.sandbox import Sandbox


def run_check(session: Sandbox, command: str, settings: SandboxSettings, timeout: float) -> Result:
    """`command` run in /app of a fresh sandbox holding a copy of `session`'s /app."""
    if session.container is None:
        return Result(command, None, error="the session's sandbox was lost, so there is no /app to check")
    if settings.engine == "kubernetes":
        return _check_in_a_pod(session, command, settings, timeout)
    try:
        # "/app/." gives the folder's entries, not the folder: they go into the fresh /app as they are
        archive, _ = session.container.get_archive("/app/.")
    except docker.errors.APIError as e:
        return Result(command, None, error=f"cannot copy the session's /app for the check: {e.explanation or e}")
    with tempfile.TemporaryDirectory(prefix="sandshell-check-") as empty:
        fresh_settings = settings.replace(workspace_mode="copy", workspace=empty)
        try:
            with Sandbox(workspace=empty, settings=fresh_settings, session_id=f"{session.session_id}-check") as fresh:
                fresh.container.put_archive("/app", _chunks(archive))
                return fresh.execute(f"cd /app && {command}", timeout)
        except docker.errors.APIError as e:
            return Result(command, None, error=f"cannot fill the check's sandbox: {e.explanation or e}")
        except SandshellError as e:
            return Result(command, None, error=f"cannot start the check's sandbox: {e}")


def _check_in_a_pod(session: Sandbox, command: str, settings: SandboxSettings, timeout: float) -> Result:
    """The same on a cluster, where no archive API exists: the session's /app comes back through its
    agent (hardened as any copy back) into a folder here, and goes into a fresh pod as a copy."""
    with tempfile.TemporaryDirectory(prefix="sandshell-check-") as tmp:
        app = Path(tmp) / "app"
        app.mkdir()
        try:
            session.copy_app(app)
        except SandshellError as e:
            return Result(command, None, error=f"cannot copy the session's /app for the check: {e}")
        fresh_settings = settings.replace(workspace_mode="copy", workspace=str(app))
        try:
            with Sandbox(workspace=app, settings=fresh_settings, session_id=f"{session.session_id}-check") as fresh:
                return fresh.execute(f"cd /app && {command}", timeout)
        except SandshellError as e:
            return Result(command, None, error=f"cannot start the check's sandbox: {e}")


def _chunks(stream: Any) -> Iterator[bytes]:
    """The archive as it comes, a chunk at a time: a workspace of gigabytes is never held in memory."""
    yield from stream
