"""How a session's container is made: the hardening profile, mounts, limits and the agent's address."""

from __future__ import annotations

import io
import os
import secrets
import shutil
import socket
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandshell.config import Settings
from sandshell.errors import SandboxError
from sandshell.sandbox.engine import HOST_LABEL, LABEL, PID_LABEL

AGENT_PORT = 7000
SOCKET_IN_CONTAINER = "/run/sandshell"

# What `standard` keeps of Docker's default capabilities: enough for apt-get and chown, no raw
# sockets, no mknod, no audit, no chroot.
STANDARD_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE"]


def runtime_dir(settings: Settings) -> Path:
    """Where session sockets live: private to this user."""
    if settings.runtime_dir:
        return Path(settings.runtime_dir)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    return Path(xdg) / "sandshell" if xdg else Path(f"/tmp/sandshell-{os.getuid()}")


@dataclass
class ContainerSpec:
    """Everything needed to create one session's container; `cleanup` removes its socket folder."""

    session_id: str
    image: str
    workspace: Path
    settings: Settings
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    socket_dir: Path | None = None

    @classmethod
    def for_session(cls, settings: Settings, workspace: Path, session_id: str, image: str) -> ContainerSpec:
        if settings.profile == "locked" and settings.transport == "tcp":
            raise SandboxError("the locked profile has no network, so SANDSHELL_TRANSPORT must be unix")
        return cls(session_id=session_id, image=image, workspace=workspace.resolve(), settings=settings)

    @property
    def transport(self) -> str:
        return self.settings.transport

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

    def prepare_socket_dir(self) -> Path:
        base = runtime_dir(self.settings)
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(base, 0o700)
        path = base / self.session_id
        path.mkdir(mode=0o700)
        user = self.sandbox_user()
        if user is not None and os.geteuid() == 0:
            os.chown(path, *user)  # the agent creates its socket here as that user
            os.chmod(base, 0o711)
        self.socket_dir = path
        return path

    def address(self, container: Any) -> str | tuple[str, int]:
        if self.transport == "unix":
            assert self.socket_dir is not None
            return str(self.socket_dir / "agent.sock")
        container.reload()
        ports = container.attrs["NetworkSettings"]["Ports"] or {}
        bound = ports.get(f"{AGENT_PORT}/tcp") or []
        return ("127.0.0.1", int(bound[0]["HostPort"])) if bound else ("127.0.0.1", 0)

    def environment(self) -> dict[str, str]:
        s = self.settings
        uid, gid = self.owner()
        limits = (s.file_limit, s.workspace_limit, s.scratch_limit)  # no one file may be larger than any of them
        env = {
            "SANDSHELL_MAX_TIMEOUT": str(s.max_exit_timeout),
            "SANDSHELL_KILL_GRACE": str(s.kill_grace),
            "SANDSHELL_OUTPUT_LIMIT": str(s.output_limit),
            "SANDSHELL_SPILL_LIMIT": str(s.spill_limit),
            "SANDSHELL_STATE_LIMIT": str(s.state_limit),
            "SANDSHELL_PIDS_LIMIT": str(s.pids_limit),
            "SANDSHELL_HOST_UID": str(uid),
            "SANDSHELL_HOST_GID": str(gid),
            "SANDSHELL_WORKSPACE_LIMIT": str(0 if s.workspace_mode == "ro" else s.workspace_limit),
            "SANDSHELL_SCRATCH_LIMIT": str(s.scratch_limit),
            "SANDSHELL_FILE_LIMIT": str(min((n for n in limits if n), default=0)),
        }
        if self.transport != "attach":  # a socket anyone inside may reach needs the token
            env["SANDSHELL_TOKEN"] = self.token
        if s.workspace_mode == "ro":
            env["SANDSHELL_SPILL_DIR"] = "/tmp/sandshell-output"
        if self.settings.profile == "locked":
            env["HOME"] = "/tmp"
        return env

    def run_kwargs(self) -> dict[str, Any]:
        s = self.settings
        locked = s.profile == "locked"
        sock_dir = self.prepare_socket_dir() if self.transport == "unix" else None
        mounts: dict[str, dict[str, str]] = {}
        if sock_dir is not None:
            mounts[str(sock_dir)] = {"bind": SOCKET_IN_CONTAINER, "mode": "rw"}
        if s.workspace_mode in ("rw", "ro"):
            mounts[str(self.workspace)] = {"bind": "/app", "mode": s.workspace_mode}
        command = ["python3", "-m", "sandshell_agent"]
        if self.transport == "attach":
            command.append("--stdio")
        else:
            command += (
                ["--unix", f"{SOCKET_IN_CONTAINER}/agent.sock"] if sock_dir else ["--tcp", f"0.0.0.0:{AGENT_PORT}"]
            )
        user = self.sandbox_user()
        kwargs: dict[str, Any] = {
            "image": self.image,
            "command": command,
            "name": self.name,
            "hostname": "sandbox",
            "labels": {LABEL: self.session_id, PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()},
            "environment": self.environment(),
            "volumes": mounts,
            "working_dir": "/app",
            # attach: the agent is PID 1, with no init beside it holding the channel's pipes
            "init": self.transport != "attach",
            "stdin_open": self.transport == "attach",
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
        if self.transport == "attach":  # nothing the model prints is kept by the engine (a flood fills no disk)
            kwargs["log_config"] = docker.types.LogConfig(type="none")
        if user is not None:
            kwargs["user"] = f"{user[0]}:{user[1]}"
        # /tmp is a sized tmpfs in both profiles: this engine's storage driver (fuse-overlayfs) has no
        # size option for a container's own layer; that layer is watched by the agent instead.
        tmpfs = {"/tmp": "rw,exec,nosuid,nodev,mode=1777" + _size(s.scratch_limit)}
        kwargs["tmpfs"] = tmpfs
        if locked:
            kwargs["network_mode"] = "none"
            kwargs["read_only"] = True
            tmpfs["/run/sandshell-agent"] = "rw,nosuid,nodev,size=64m"
            if s.workspace_mode == "copy":  # a volume (removed with the container): the copy can go in
                kwargs["mounts"] = [docker.types.Mount("/app", None, type="volume")]  # with a read-only root
        elif self.transport == "tcp":
            kwargs["ports"] = {f"{AGENT_PORT}/tcp": ("127.0.0.1", None)}
        return kwargs

    def cleanup(self) -> None:
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            self.socket_dir = None


def create_container(client: docker.DockerClient, spec: ContainerSpec) -> Any:
    """Create and start the container; on any failure nothing is left behind."""
    container = None
    try:
        # detach=True also keeps StdinOnce off: a dropped attach must not close the agent's stdin
        container = client.containers.create(**spec.run_kwargs())
        if spec.settings.workspace_mode == "copy":
            container.put_archive("/app", _tar(spec.workspace, spec.sandbox_user()))
        container.start()
        return container
    except docker.errors.ImageNotFound:
        _remove(container)
        raise SandboxError(f"the sandbox image {spec.image} is missing; run ./start.sh to build it") from None
    except docker.errors.APIError as e:
        _remove(container)
        spec.cleanup()
        raise SandboxError(f"cannot start the sandbox container: {e.explanation or e}") from None
    except BaseException:
        _remove(container)
        spec.cleanup()
        raise


def running(container: Any) -> bool:
    """Whether the container runs (an engine that does not answer is taken to mean yes)."""
    try:
        container.reload()
        return bool(container.status == "running")
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError:
        return True


def last_log_line(container: Any) -> str:
    """The last thing a dead container said: usually why it died."""
    try:
        lines = container.logs(tail=3).decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"status {container.status}"
    except docker.errors.APIError:
        return "it is gone"


def _size(limit: int) -> str:
    return f",size={int(limit)}" if limit else ""


def _remove(container: Any) -> None:
    if container is not None:
        try:
            container.remove(force=True, v=True)
        except docker.errors.APIError:
            pass


def _tar(folder: Path, user: tuple[int, int] | None = None) -> bytes:
    """The workspace as a tar (links stored as links, never followed), owned by `user` if given."""

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if user is not None:
            info.uid, info.gid = user
        info.mode &= ~0o6000  # no set-id bits go in either
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in sorted(folder.iterdir()):
            tar.add(entry, arcname=entry.name, filter=own)
    return buf.getvalue()
