"""An engine on another machine reached over ssh (`ssh://USER@HOST[:PORT]`), through the system ssh client.

docker-py's own ssh transport needs paramiko even to shell out to `ssh`, and its shell-out
socket cannot carry the agent's attach (it reads a pipe that waits for a full buffer, with no
timeout). So the client talks to a private unix socket here instead, and each connection to it
is handed, as stdin and stdout, to its own `ssh ... docker system dial-stdio`: every request,
stream and attach then behaves as on a local engine. Before any of it, one `ssh -o BatchMode=yes`
asks the engine's API version: a wrong address, a refused key or a missing docker there is one
sentence, and no prompt for a password or a host key can ever wait on the terminal.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import urllib.parse

from sandshell.errors import DockerUnavailable

CHECK_SECONDS = 30


def target(url: str) -> tuple[str | None, str | None, str]:
    """(user, port, host) of an ssh:// URL, or DockerUnavailable saying what is wrong with it."""
    shape = "it must look like ssh://USER@HOST or ssh://USER@HOST:PORT"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise DockerUnavailable(f"the Docker engine address {url} is not a valid ssh URL; {shape}") from None
    if parts.scheme != "ssh" or not parts.hostname or parts.path not in ("", "/") or parts.query or parts.password:
        raise DockerUnavailable(f"the Docker engine address {url} is not a valid ssh URL; {shape}")
    if ":" in parts.hostname or parts.hostname.startswith("-") or (parts.username or "").startswith("-"):
        raise DockerUnavailable(f"the Docker engine address {url} names no usable host; {shape}")
    return parts.username, None if port is None else str(port), parts.hostname


def command(url: str, *remote: str, batch: bool = True) -> list[str]:
    """The ssh command running `remote` there, as docker-py builds it (and never asking anything)."""
    user, port, host = target(url)
    args = ["ssh", "-o", "BatchMode=yes"] if batch else ["ssh"]
    if user:
        args += ["-l", user]
    if port:
        args += ["-p", port]
    return [*args, "--", host, *remote]


def api_version(url: str) -> str:
    """The engine's API version, asked over ssh; DockerUnavailable with the reason in one sentence."""
    args = command(url, "docker", "version", "--format", "'{{.Server.APIVersion}}'")
    try:
        done = subprocess.run(args, capture_output=True, timeout=CHECK_SECONDS, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise DockerUnavailable(
            f"the Docker engine at {url} is reached with the ssh client, which is not installed; "
            "install it (apt-get install openssh-client)"
        ) from None
    except subprocess.TimeoutExpired:
        raise DockerUnavailable(f"the Docker engine at {url} does not answer over ssh in {CHECK_SECONDS} s") from None
    said = _last_line(done.stderr)
    if done.returncode == 255:  # ssh's own failure: no route, refused, host key, key refused
        raise DockerUnavailable(
            f"cannot log in to {url} over ssh ({said}); check the address, that your key is accepted there "
            f"without a prompt (`{' '.join(command(url, 'true'))}` must work) and that the host key is known"
        )
    version = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0 or not re.fullmatch(r"\d+\.\d+", version):
        raise DockerUnavailable(
            f"{url} answers over ssh, but `docker version` there fails ({said or version[:120]}); install "
            "Docker there and let that user use it"
        )
    return version


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no reason given"


class Tunnel:
    """A private unix socket here (in a 0700 folder) standing for the engine: each connection made
    to it is carried by its own `ssh HOST docker system dial-stdio`, given the connection itself as
    its stdin and stdout. One per ssh URL, for the life of the process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.folder = tempfile.mkdtemp(prefix="sandshell-ssh-")
        self.path = os.path.join(self.folder, "docker.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(64)
        self.procs: list[subprocess.Popen[bytes]] = []
        threading.Thread(target=self._serve, name=f"ssh tunnel {url}", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # closed
            try:
                proc = subprocess.Popen(
                    command(self.url, "docker", "system", "dial-stdio"),
                    stdin=conn.fileno(),
                    stdout=conn.fileno(),
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # a ^C in the terminal is ours to handle, not ssh's
                )
                self.procs = [p for p in self.procs if p.poll() is None] + [proc]
            except OSError:
                pass  # the client sees its connection closed
            finally:
                conn.close()  # ssh holds it now: when the client closes its end, ssh ends

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.server.close()
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(2)
        shutil.rmtree(self.folder, ignore_errors=True)


_tunnels: dict[str, Tunnel] = {}
_tunnels_lock = threading.Lock()


def socket_url(url: str) -> str:
    """unix://... of this process's tunnel to the engine at the ssh:// `url` (made on first use)."""
    with _tunnels_lock:
        if url not in _tunnels:
            if not _tunnels:
                atexit.register(close_all)
            _tunnels[url] = Tunnel(url)
        return f"unix://{_tunnels[url].path}"


def close_all() -> None:
    with _tunnels_lock:
        for tunnel in _tunnels.values():
            tunnel.close()
        _tunnels.clear()
