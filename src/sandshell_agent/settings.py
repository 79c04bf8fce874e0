"""The agent's settings, passed by the host as environment variables."""

from __future__ import annotations

from .command import Limits


class Config:
    """The agent's settings, passed by the host as environment variables."""

    def __init__(self, env: dict[str, str]) -> None:
        self.max_frame = int(env.get("SANDSHELL_MAX_FRAME", str(8 * 1024 * 1024)))
        self.max_timeout = float(env.get("SANDSHELL_MAX_TIMEOUT", "600"))
        self.kill_grace = float(env.get("SANDSHELL_KILL_GRACE", "1.0"))
        self.read_limit = int(env.get("SANDSHELL_READ_LIMIT", str(1024 * 1024)))
        self.state_limit = int(env.get("SANDSHELL_STATE_LIMIT", str(64 * 1024)))
        self.limits = Limits(
            stream=int(env.get("SANDSHELL_OUTPUT_LIMIT", str(1024 * 1024))),
            spill=int(env.get("SANDSHELL_SPILL_LIMIT", str(32 * 1024 * 1024))),
            spill_dir=env.get("SANDSHELL_SPILL_DIR", "/app/.sandshell/output"),
        )
        uid, gid = env.get("SANDSHELL_HOST_UID", ""), env.get("SANDSHELL_HOST_GID", "")
        self.owner = (int(uid), int(gid)) if uid.isdigit() and gid.isdigit() else None
        self.pids_limit = int(env.get("SANDSHELL_PIDS_LIMIT", "0"))
        self.workdir = env.get("SANDSHELL_WORKDIR", "/app")
        self.state_dir = env.get("SANDSHELL_STATE_DIR", "/run/sandshell-agent")
        self.workspace_limit = int(env.get("SANDSHELL_WORKSPACE_LIMIT", "0"))
        self.scratch_limit = int(env.get("SANDSHELL_SCRATCH_LIMIT", "0"))
        self.file_limit = int(env.get("SANDSHELL_FILE_LIMIT", "0"))
        self.shell_loop = env.get("SANDSHELL_SHELL_LOOP", "auto") != "off"
        self.shared_cpu = env.get("SANDSHELL_SHELL_CPU", "any") == "shared"
