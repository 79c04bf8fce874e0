"""How a session's container is made: the hardening profile, mounts, limits and the agent's address."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandshell.config import SandboxSettings
from sandshell.errors import SandboxError
from sandshell.resources import command
from sandshell.sandbox import network, quarantine
from sandshell.sandbox.engine import HOST_LABEL, LABEL, PID_LABEL, archive_transfer
from sandshell.sandbox.transfer import fill_volume, pack

# What `standard` keeps of Docker's default capabilities: enough for apt-get and chown, no raw
# sockets, no mknod, no audit, no chroot.
STANDARD_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE"]


@dataclass
class ContainerSpec:
    """Everything needed to create one session's container."""

    session_id: str
    image: str
    workspace: Path
    settings: SandboxSettings
    quarantine_dir: Path  # where what the model left for host tools is moved, at the end
    log: Callable[[str], None] = lambda _m: None
    snapshot: quarantine.Snapshot | None = None  # what host tools may run from an rw workspace, as it was before

    @classmethod
    def for_session(
        cls,
        settings: SandboxSettings,
        workspace: Path,
        session_id: str,
        image: str,
        log: Callable[[str], None],
        quarantine_dir: Path,
    ) -> ContainerSpec:
        spec = cls(
            session_id=session_id,
            image=image,
            workspace=workspace.resolve(),
            settings=settings,
            quarantine_dir=quarantine_dir,
            log=log,
        )
        if settings.workspace_mode == "rw":
            spec.snapshot = quarantine.Snapshot.take(spec.workspace, time.time(), contents=spec.archive)
        return spec

    @property
    def name(self) -> str:
        return f"sandshell-{self.session_id}"

    def owner(self) -> tuple[int, int]:
        st = self.workspace.stat()
        return st.st_uid, st.st_gid

    def sandbox_user(self) -> tuple[int, int] | None:
        """The user the agent runs as: root with a few capabilities in standard; in locked the workspace
        owner with none (when that owner is root, uid 0 without capabilities can only own files)."""
        if self.settings.profile == "standard":
            return None
        return self.owner()  # root included: with every capability dropped it can only own files

    def environment(self) -> dict[str, str]:
        uid, gid = self.owner()
        return agent_environment(self.settings, uid, gid, app_read_only=self.settings.workspace_mode == "ro")

    def run_kwargs(self) -> dict[str, Any]:
        s = self.settings
        locked = s.profile == "locked"
        # The agent's stdin and stdout, attached through the engine's API, are its only channel: no
        # socket file or port, so no host folder the container may write and nothing inside to reach.
        command = ["python3", "-m", "sandshell_agent", "--stdio"]
        user = self.sandbox_user()
        kwargs: dict[str, Any] = {
            "image": self.image,
            "command": command,
            "name": self.name,
            "hostname": "sandbox",
            "labels": self.labels(),
            "environment": self.environment(),
            "working_dir": "/app",
            # the agent is PID 1: no init beside it holding the channel's pipes, or outside the
            # agent's set-id filter where a traced process could act for the model
            "init": False,
            "stdin_open": True,
            "detach": True,
            "cap_drop": ["ALL"],
            "cap_add": [] if locked else STANDARD_CAPS,
            "security_opt": ["no-new-privileges"],
            "pids_limit": s.pids_limit,
            "mem_limit": s.memory,
            "memswap_limit": s.memory,
            "nano_cpus": int(s.cpus * 1e9),
            "ulimits": [docker.types.Ulimit(name="nofile", soft=4096, hard=4096)],
        }
        # nothing the model prints is kept by the engine (a flood fills no disk)
        kwargs["log_config"] = docker.types.LogConfig(type="none")
        if user is not None:
            kwargs["user"] = f"{user[0]}:{user[1]}"
        # /tmp is a sized tmpfs in both profiles: this engine's storage driver (fuse-overlayfs) has no
        # size option for a container's own layer; that layer is watched by the agent instead.
        tmpfs = {"/tmp": "rw,exec,nosuid,nodev,mode=1777" + _size(s.scratch_limit)}
        # The shell's saved state (cwd, exports, functions), written after every command: in memory,
        # as three small files on the container's own layer (fuse-overlayfs here) cost ~5 ms a command.
        tmpfs["/run/sandshell-agent"] = "rw,noexec,nosuid,nodev,size=64m"
        kwargs["tmpfs"] = tmpfs
        kwargs["mounts"] = [self.app_mount(), *quarantine.git_mounts(self.workspace, s, self.archive)]
        if locked:
            kwargs["network_mode"] = "none"
            kwargs["read_only"] = True
        else:
            kwargs["network"] = self.network
        return kwargs

    @property
    def archive(self) -> bool:
        """Whether /app is filled through the engine's API (copy mode, or an engine on another machine)."""
        return self.settings.workspace_mode == "copy" or archive_transfer(self.settings)

    @property
    def network(self) -> str | None:
        """The session's own bridge (standard): it reaches the outside, never another session's container."""
        return None if self.settings.profile == "locked" else f"{self.name}-net"

    @property
    def volume(self) -> str:
        """The named volume that carries a read-only workspace to a remote engine."""
        return f"{self.name}-app"

    def labels(self) -> dict[str, str]:
        return {LABEL: self.session_id, PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()}

    def app_mount(self) -> docker.types.Mount:
        """/app: the host folder bound in, or a volume the workspace is copied into (see transfer)."""
        mode = self.settings.workspace_mode
        # A new volume takes the image's /app (mode 1777): a non-root sandbox user may write the copy
        if self.archive and mode == "ro":
            return docker.types.Mount("/app", self.volume, type="volume", read_only=True)
        if self.archive:  # anonymous: removed with the container
            return docker.types.Mount("/app", None, type="volume")
        return docker.types.Mount("/app", str(self.workspace), type="bind", read_only=mode == "ro")


def create_container(client: docker.DockerClient, spec: ContainerSpec) -> Any:
    """Create and start the container, the workspace copied in when it is not mounted; on any failure
    nothing is left behind."""
    container = None
    try:
        if spec.archive and spec.settings.workspace_mode == "ro":
            client.volumes.create(spec.volume, labels=spec.labels())
        if spec.network is not None:
            network.create(client, spec.network, spec.labels())
        # detach=True also keeps StdinOnce off: a dropped attach must not close the agent's stdin
        container = client.containers.create(**spec.run_kwargs())
        if spec.archive:
            with pack(spec.workspace, spec.sandbox_user(), spec.settings.workspace_limit) as data:
                if spec.settings.workspace_mode == "ro":
                    fill_volume(client, spec.image, spec.volume, data, spec.labels())
                else:
                    container.put_archive("/app", data)
        container.start()
        return container
    except docker.errors.ImageNotFound:
        _remove(client, container, spec)
        raise SandboxError(f"the sandbox image {spec.image} is missing; run {command('prepare')} to build it") from None
    except docker.errors.APIError as e:
        _remove(client, container, spec)
        raise SandboxError(f"cannot start the sandbox container: {e.explanation or e}") from None
    except BaseException:
        _remove(client, container, spec)
        raise


def _size(limit: int) -> str:
    return f",size={int(limit)}" if limit else ""


def _remove(client: docker.DockerClient, container: Any, spec: ContainerSpec) -> None:
    remove_container(client, container, spec)


def remove_container(client: docker.DockerClient, container: Any, spec: ContainerSpec | None) -> None:
    """Remove the container with its anonymous /app volume, and the named one of a remote ro workspace."""
    if container is not None:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True, v=True)
    if spec is not None and spec.archive and spec.settings.workspace_mode == "ro":
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_volume(spec.volume, force=True)
    if spec is not None and spec.network is not None:
        network.remove(client, spec.network)
    if spec is not None and spec.snapshot is not None:
        spec.snapshot = quarantine.settle(spec.snapshot, spec.quarantine_dir, spec.log, contents=spec.archive)


def agent_environment(s: SandboxSettings, uid: int, gid: int, app_read_only: bool) -> dict[str, str]:
    """What the agent is told as it starts, on any engine: its limits and who owns the workspace
    (`app_read_only`: /app cannot be written, so the spill goes to /tmp and /app has no limit)."""
    limits = (s.file_limit, s.workspace_limit, s.scratch_limit)  # no one file may be larger than any of them
    env = {
        "SANDSHELL_MAX_TIMEOUT": str(s.max_exit_timeout),
        "SANDSHELL_KILL_GRACE": str(s.kill_grace),
        "SANDSHELL_SHELL_LOOP": s.shell_loop,
        "SANDSHELL_SHELL_CPU": s.shell_cpu,
        "SANDSHELL_AGENT_CODE": s.agent_code,
        "SANDSHELL_OUTPUT_LIMIT": str(s.output_limit),
        "SANDSHELL_SPILL_LIMIT": str(s.spill_limit),
        "SANDSHELL_STATE_LIMIT": str(s.state_limit),
        "SANDSHELL_PIDS_LIMIT": str(s.pids_limit),
        "SANDSHELL_HOST_UID": str(uid),
        "SANDSHELL_HOST_GID": str(gid),
        "SANDSHELL_WORKSPACE_LIMIT": str(0 if app_read_only else s.workspace_limit),
        "SANDSHELL_SCRATCH_LIMIT": str(s.scratch_limit),
        "SANDSHELL_FILE_LIMIT": str(min((n for n in limits if n), default=0)),
    }
    if app_read_only:
        env["SANDSHELL_SPILL_DIR"] = "/tmp/sandshell-output"
    if s.profile == "locked":
        env["HOME"] = "/tmp"
    return env
