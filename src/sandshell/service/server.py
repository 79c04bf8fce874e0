"""`sandshell serve`: the port and the sessions folder claimed, the service's parts put together
(`core.Service`), and uvicorn to run the API on them.

Start-up, in order: the port taken and the sessions folder claimed (a second server on either
is refused before it touches a task), the token (printed once, when it is made), the task records
(those that were running when the server last stopped are marked interrupted), leftover containers
reaped, the model loaded (or, for the openai backend, its server waited for), then the workers.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from pathlib import Path
from typing import IO

from sandshell import config
from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.safe_text import say
from sandshell.service.auth import token_file


def serve(host: str = "127.0.0.1", port: int = 8000, settings: Settings | None = None) -> int:
    """Run the API until Ctrl-C or SIGTERM; running tasks are then stopped and marked interrupted."""
    import uvicorn

    from sandshell.service.api import create_app
    from sandshell.service.core import Service

    s = settings or config.load()
    with contextlib.ExitStack() as held:  # (the sockets and the claim let go of on every way out)
        listeners = listen(host, port)
        held.callback(_close, listeners)
        held.enter_context(claim_sessions(s.path(s.session.sessions_dir)))  # (held while this process lives)
        service = Service(s, port=port)
        shown = "localhost" if host in ("0.0.0.0", "::") else host
        url = f"http://{shown}:{port}"
        if service.token_made:
            say(f"made an API token, kept in {token_file(s.session)} (mode 0600); it is shown this once:")
            say(f"  {service.token}")
            say(f"web view: {url}/?token={service.token}")
        else:
            where = "SANDSHELL_API_TOKEN" if s.service.api_token else str(token_file(s.session))
            say(f"web view: {url}/?token=<the token in {where}>")
        most = s.service.max_sessions
        say(
            f"API at {url}/v1 (docs at {url}/docs); {most} task{'' if most == 1 else 's'} at once;"
            f" model: {service.models.description}"
        )
        server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning", timeout_graceful_shutdown=5))
        with contextlib.suppress(KeyboardInterrupt):  # (uvicorn says Ctrl-C again once it has shut down: a stop)
            server.run(sockets=listeners)
    return 0


def listen(host: str, port: int) -> list[socket.socket]:
    """The API's listening sockets (every address `host` names, as asyncio binds them), taken before
    anything else starts and handed to uvicorn: a port in use is said in one sentence, where uvicorn
    found out only after the workers had started."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise SandshellError(f"cannot listen on {host}: {e.strerror}; pass another --host") from None
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            socks.append(sock := socket.socket(family, kind, proto))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(2048)
    except OSError as e:
        _close(socks)
        if e.errno == errno.EADDRINUSE:
            raise SandshellError(
                f"port {port} on {host} is in use (another sandshell serve, or another program):"
                " stop it, or pass --port"
            ) from None
        raise SandshellError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return socks


def _close(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def claim_sessions(folder: Path) -> IO[str]:
    """Claim the sessions folder for this server (a lock the kernel drops when the process ends, a
    crash too). A second server on the same folder would mark the first one's running tasks
    interrupted and start its queued ones itself."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / ".serve.lock", "a+", encoding="utf-8")  # noqa: SIM115 (held as long as the server runs)
    except OSError as e:
        raise SandshellError(
            f"cannot use the sessions folder {folder}: {e.strerror}; see SANDSHELL_SESSIONS_DIR"
        ) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise SandshellError(
            f"another sandshell server ({holder}) serves the tasks in {folder}: stop it, or give"
            " this one its own folder with SANDSHELL_SESSIONS_DIR"
        ) from None
    lock.truncate(0)
    lock.write(f"pid {os.getpid()}\n")
    lock.flush()
    return lock
