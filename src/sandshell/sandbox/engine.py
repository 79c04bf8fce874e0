"""The Docker engine: connecting with a clear error, and reaping what crashed sessions left behind."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.tls
import docker.utils
import requests.exceptions
from docker.constants import MINIMUM_DOCKER_API_VERSION

from sandshell.config import SandboxSettings
from sandshell.errors import DockerUnavailable
from sandshell.sandbox import sshengine

LABEL = "sandshell.session"
PID_LABEL = "sandshell.pid"
HOST_LABEL = "sandshell.host"


def client(settings: SandboxSettings | None = None) -> docker.DockerClient:
    """A Docker client for the configured engine that has answered a ping, or DockerUnavailable with what to do."""
    host = settings.docker_host if settings is not None else ""
    where = host or os.environ.get("DOCKER_HOST") or "the local Docker socket"
    try:
        kwargs = _kwargs(settings)
        return _connect(kwargs)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        reason = str(e).split("(")[0].strip()[:160]
        if host or os.environ.get("DOCKER_HOST"):
            raise DockerUnavailable(
                f"the Docker engine at {where} does not answer ({reason}); check SANDSHELL_DOCKER_HOST "
                "(or DOCKER_HOST), its certificates (SANDSHELL_DOCKER_TLS) and that it runs"
            ) from None
        raise DockerUnavailable(
            f"no Docker engine answers ({reason}); start Docker (e.g. `sudo systemctl start docker`) "
            "and make sure your user may use it"
        ) from None


def _kwargs(settings: SandboxSettings | None) -> dict[str, Any]:
    """docker-py's base_url and tls for the configured engine (SANDSHELL_DOCKER_HOST, else DOCKER_HOST and friends)."""
    host = settings.docker_host if settings is not None else ""
    if host:
        tls = _tls(settings.docker_tls) if settings is not None and settings.docker_tls else False
        return {"base_url": host, "tls": tls}
    kwargs: dict[str, Any] = docker.utils.kwargs_from_env()  # DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH
    if isinstance(kwargs.get("tls"), docker.tls.TLSConfig) and not kwargs["tls"].verify:
        # docker-py makes DOCKER_CERT_PATH alone TLS that checks no certificate: anyone between
        # us and the engine could pose as it
        raise DockerUnavailable(
            "DOCKER_CERT_PATH is set without DOCKER_TLS_VERIFY, which would not check the engine's "
            "certificate; set DOCKER_TLS_VERIFY=1 (or SANDSHELL_DOCKER_TLS to the folder)"
        )
    return kwargs


def _connect(kwargs: dict[str, Any], timeout: int = 60) -> docker.DockerClient:
    """A client at the engine's own API version, never trusting the environment's CA or proxies.

    Not version="auto": docker-py asks the engine from inside the constructor, before trust_env can
    be turned off, so requests would let a REQUESTS_CA_BUNDLE (or a proxy) replace the engine's CA.
    A first client at the oldest version docker-py speaks (its /version needs none) asks instead."""
    url = str(kwargs.get("base_url", ""))
    _refuse_plain_tcp(url, kwargs.get("tls"))
    if url.startswith("ssh://"):
        version = sshengine.api_version(url)  # a wrong URL, a refused key: one sentence, no prompt
        kwargs = {"base_url": sshengine.socket_url(url)}
    else:
        probe = docker.APIClient(**kwargs, timeout=timeout, version=MINIMUM_DOCKER_API_VERSION)
        try:
            probe.trust_env = False
            version = str(probe.version(api_version=False)["ApiVersion"])
        finally:
            probe.close()
    c = docker.DockerClient(**kwargs, timeout=timeout, version=version)
    c.api.trust_env = False
    c.ping()
    return c


def local_client(remote: SandboxSettings) -> docker.DockerClient:
    """Another engine to build the image on for a remote one: the user's own (DOCKER_HOST, else the
    docker context in use, else the default socket or a rootless one). DockerUnavailable if none answers."""
    far = (remote.docker_host or os.environ.get("DOCKER_HOST", "")).removeprefix("http+")
    candidates: list[dict[str, Any]] = []
    if remote.docker_host and os.environ.get("DOCKER_HOST"):
        with contextlib.suppress(DockerUnavailable):  # SANDSHELL_DOCKER_HOST points elsewhere than the user's engine
            candidates.append(_kwargs(None))
    with contextlib.suppress(Exception):  # a broken docker config is as good as none
        context = docker.ContextAPI.get_context(os.environ.get("DOCKER_CONTEXT") or None)
        if context is not None and context.Host:
            candidates.append({"base_url": context.Host, "tls": context.TLSConfig or False})
    candidates.append({"base_url": docker.constants.DEFAULT_UNIX_SOCKET})
    if os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append({"base_url": f"unix://{os.environ['XDG_RUNTIME_DIR']}/docker.sock"})
    tried: list[str] = []
    for kwargs in candidates:
        url = str(kwargs["base_url"]).removeprefix("http+")  # docker-py's default socket is http+unix://
        if url in tried or url == far:
            continue
        tried.append(url)
        try:
            return _connect(kwargs, timeout=600)
        except (docker.errors.DockerException, requests.exceptions.RequestException, DockerUnavailable):
            pass  # the next one, then one sentence naming them all
    raise DockerUnavailable(f"no other Docker engine answers here (tried {', '.join(tried) or 'none'})")


def _refuse_plain_tcp(url: str, tls: Any) -> None:
    """An engine is root on its machine: over TCP without TLS, anyone on the path could drive it
    (only the loopback address is let through, for a local test engine)."""
    if not url.startswith(("tcp://", "http://")) or tls:
        return
    address = url.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
    if address not in ("127.0.0.1", "localhost", "::1"):
        raise DockerUnavailable(
            f"the Docker engine at {url} would be reached over TCP without TLS, so anyone on the way could "
            "drive it; give SANDSHELL_DOCKER_TLS (ca.pem, cert.pem, key.pem) or use ssh://USER@HOST"
        )


def _tls(folder: str) -> docker.tls.TLSConfig:
    """Mutual TLS from a folder holding ca.pem, cert.pem and key.pem (as `docker --tlsverify` expects)."""
    certs = Path(folder).expanduser()
    missing = [n for n in ("ca.pem", "cert.pem", "key.pem") if not (certs / n).is_file()]
    if missing:
        raise DockerUnavailable(
            f"SANDSHELL_DOCKER_TLS={folder} lacks {', '.join(missing)}; it must hold ca.pem, cert.pem and key.pem"
        )
    return docker.tls.TLSConfig(
        client_cert=(str(certs / "cert.pem"), str(certs / "key.pem")), ca_cert=str(certs / "ca.pem"), verify=True
    )


def least_loaded(settings: SandboxSettings) -> SandboxSettings:
    """The settings for the engine of SANDSHELL_DOCKER_HOSTS running the fewest sessions (an engine that
    does not answer is passed over); the settings as they are when the list is empty."""
    if settings.engine == "kubernetes":  # the cluster's scheduler places pods: no list of engines to weigh
        return settings
    hosts = [h.strip() for h in settings.docker_hosts.split(",") if h.strip()]
    best: tuple[int, SandboxSettings] | None = None
    failed = []
    for host in hosts:
        candidate = settings.replace(docker_host=host)
        try:
            c = client(candidate)
        except DockerUnavailable as e:
            failed.append(str(e))
            continue
        try:  # created ones count too: a session placed a moment ago is starting there
            load = len(c.api.containers(all=True, filters={"label": LABEL, "status": ["created", "running"]}))
        except docker.errors.APIError as e:
            failed.append(f"the Docker engine at {host} cannot list its containers ({e.explanation or e})")
            continue
        finally:
            c.close()
        if best is None or load < best[0]:
            best = (load, candidate)
    if hosts and best is None:
        raise DockerUnavailable("no engine of SANDSHELL_DOCKER_HOSTS answers: " + "; ".join(failed)[:600])
    return best[1] if best is not None else settings


def is_local(settings: SandboxSettings) -> bool:
    """Whether the engine shares this machine's filesystem (a unix socket), so the workspace can be mounted."""
    host = settings.docker_host or os.environ.get("DOCKER_HOST", "")
    return host == "" or host.startswith("unix://")


def archive_transfer(settings: SandboxSettings) -> bool:
    """Whether the workspace goes in (and comes back) through the engine's API instead of a mount."""
    if settings.engine == "kubernetes":  # no Docker API there: the workspace goes through the agent
        return False
    mode = settings.workspace_transfer
    return mode == "archive" or (mode == "auto" and not is_local(settings))


def copies_back(settings: SandboxSettings) -> bool:
    """Whether /app is copied back into the host folder (archive transfer in rw mode)."""
    return settings.workspace_mode == "rw" and archive_transfer(settings)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def reap(c: docker.DockerClient) -> list[str]:
    """Remove sandshell containers whose host process is gone (or that have stopped), and such a process's
    volumes and networks; returns their names.

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
    listed_volumes = c.api.volumes(filters={"label": [LABEL, PID_LABEL, HOST_LABEL], "dangling": True}) or {}
    for volume in listed_volumes.get("Volumes") or []:  # a remote read-only workspace's copy
        labels = volume.get("Labels") or {}
        pid = labels.get(PID_LABEL, "")
        if labels.get(HOST_LABEL) == here and pid.isdigit() and not _alive(int(pid)):
            try:
                c.api.remove_volume(volume["Name"])
                removed.append(volume["Name"])
            except docker.errors.APIError:
                pass  # in use again, or gone
    for network in c.api.networks(filters={"label": [LABEL, PID_LABEL, HOST_LABEL]}) or []:  # a session's bridge
        labels = network.get("Labels") or {}
        pid = labels.get(PID_LABEL, "")
        if labels.get(HOST_LABEL) == here and pid.isdigit() and not _alive(int(pid)):
            try:
                c.api.remove_network(network["Id"])
                removed.append(network["Name"])
            except docker.errors.APIError:
                pass  # a container still on it, or gone
    return removed


def new_session_id() -> str:
    """A session's name: when it started, and a little randomness (`20261122-011200-ab12`)."""
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
