"""An environment: a folder mounted into a sandbox, with `execute` and `kill`, and tools installed."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from sandshell import config
from sandshell.bot.kinds import Permission
from sandshell.bot.tools import ToolDefinition, ToolError, cluster_tool_image, ensure_tool_image
from sandshell.config import Settings
from sandshell.errors import SandboxError, SandshellError
from sandshell.sandbox import engine
from sandshell.sandbox.protocol import Result
from sandshell.sandbox.sandbox import Sandbox

log = logging.getLogger(__name__)

VERIFY_SECONDS = 60.0


class Environment:
    """A sandbox on `folder_to_mount` (at /app), read-only or read-write; started at first use.

    `execute(command, timeout)` returns `{return_code, output, error}`: the exit code (None when the
    command did not end by itself), stdout and stderr interleaved (bounded, head and tail), and
    None or one sentence saying why it failed. `kill()` removes the container; so does leaving a
    `with` block. Tools are installed into a cached image before the sandbox starts and verified
    after (`ToolError` when either fails)."""

    def __init__(
        self,
        folder_to_mount: str | Path | None = None,
        permission: Permission = Permission.READ_WRITE,
        tools: Sequence[ToolDefinition] = (),
        settings: Settings | None = None,
        profile: Literal["standard", "locked"] | None = None,
    ) -> None:
        base = settings or config.load()
        if not isinstance(permission, Permission):
            raise SandshellError(
                f"permission must be Permission.READ_ONLY or Permission.READ_WRITE, not {permission!r}"
            )
        self.permission = permission
        self.settings = base.replace(
            sandbox=base.sandbox.replace(workspace_mode=permission.mode, profile=profile or base.sandbox.profile)
        )
        self.folder = (
            Path(folder_to_mount) if folder_to_mount is not None else base.sandbox.path(base.sandbox.workspace)
        )
        self.tools = tuple(tools)
        self.sandbox: Sandbox | None = None
        self.image_built: bool | None = None  # with tools: whether this start built their image
        self.start_seconds = 0.0
        self._killed = False

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Environment:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.kill()

    @property
    def started(self) -> bool:
        return self.sandbox is not None

    def start(self) -> None:
        """Install the tools (or find their image), start the sandbox, verify the tools."""
        if self._killed:
            raise SandboxError("this environment was killed; make a new Environment")
        if self.sandbox is not None:
            return
        if not self.folder.is_dir():
            raise SandboxError(f"the folder to mount {self.folder} does not exist; create it or pass another")
        started = time.monotonic()
        settings = self.settings.sandbox
        if self.tools and settings.engine == "kubernetes":  # built and pushed beforehand (docs/scaling.md)
            settings = settings.replace(kube_image=cluster_tool_image(settings, self.tools))
        elif self.tools:
            repo, self.image_built = ensure_tool_image(engine.client(), settings, self.tools)
            settings = settings.replace(image=repo)
        sandbox = Sandbox(workspace=self.folder, settings=settings, log=log.info, recording=self.settings.session)
        try:
            sandbox.start()
            self.sandbox = sandbox
            self._verify()
        except BaseException:
            sandbox.kill()
            self.sandbox = None
            raise
        self.start_seconds = time.monotonic() - started
        how = ("tools " + ("built" if self.image_built else "cached")) if self.tools else "no tools"
        log.info(
            "environment %s started in %.2fs (%s, %s)",
            sandbox.session_id,
            self.start_seconds,
            self.permission.name,
            how,
        )

    def _verify(self) -> None:
        assert self.sandbox is not None
        for tool in self.tools:
            r = self.sandbox.execute(tool.verification_command, timeout=VERIFY_SECONDS)
            if not r.ok:
                said = " ".join(r.output.split())[-300:] or "no output"
                raise ToolError(
                    f"{tool.label} was installed but its check `{tool.verification_command[:200]}` failed "
                    f"({r.status_line()}: {said}); fix its installation_command or verification_command"
                )

    def kill(self) -> None:
        """Stop and remove the container now; safe to call twice. The environment cannot start again."""
        self._killed = True
        if self.sandbox is not None:
            log.info("environment %s killed", self.sandbox.session_id)
            self.sandbox.kill()
            self.sandbox = None

    # -- commands ----------------------------------------------------------------------------
    def execute(self, command: str, timeout: float | None = None) -> dict[str, Any]:
        """Run `command` in the environment's persistent bash; never raises for the command's sake."""
        if self._killed:
            return {"return_code": None, "output": "", "error": "this environment was killed; make a new one"}
        self.start()
        assert self.sandbox is not None
        log.debug("execute %.200s", command)
        result = self.sandbox.execute(command, timeout)
        return {"return_code": result.return_code, "output": result.output, "error": _why(result)}


def _why(r: Result) -> str | None:
    """None when the command ran and exited 0; else one sentence: how it ended, and its stderr's end."""
    if r.ok:
        return None
    if r.return_code is None and r.error and not r.timed_out:
        return r.error
    said = " ".join(r.stderr_tail.split())[-500:]
    return r.status_line() + (f": {said}" if said else "")


__all__ = ["Environment"]
