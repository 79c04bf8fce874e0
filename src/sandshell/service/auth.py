"""Who may use the API: the bearer token, and the web view's sign-ins.

The token is given by SANDSHELL_API_TOKEN, or made at first start and kept mode 0600; a request
carries it as `Authorization: Bearer <token>` (compared in constant time).

The web view signs in once with `/?token=<token>`: the server answers with a cookie that holds a
sign-in of its own, a random value, never the token (browsers send a cookie to every port of a
host, so another web server on 127.0.0.1 sees it). The server keeps each sign-in's SHA-256 and
expiry in `.service/sign-ins` (mode 0600), so a sign-in outlives a restart and is revoked by
signing out. The cookie's name carries the port and the sessions folder: two servers on one host
keep their own sign-ins.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from pathlib import Path

from sandshell.config import ServiceSettings, SessionSettings
from sandshell.errors import SandshellError

SIGN_IN_SECONDS = 30 * 24 * 3600  # a sign-in lasts a month in that browser
MAX_SIGN_INS = 200  # kept at once; the oldest goes first


def token_file(session: SessionSettings) -> Path:
    return session.path(session.sessions_dir) / ".service" / "api-token"


def load_token(service: ServiceSettings, session: SessionSettings) -> tuple[str, bool]:
    """(the token, whether it was made just now)."""
    if service.api_token:
        return service.api_token, False
    path = token_file(session)
    try:
        if path.is_file():
            token = path.read_text(encoding="ascii").strip()
            if token:
                return token, False
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
        return token, True
    except (OSError, UnicodeError) as e:
        raise SandshellError(
            f"cannot read or make the API token file {path} ({getattr(e, 'strerror', e)}); "
            "fix its folder or set SANDSHELL_API_TOKEN"
        ) from None


def matches(given: str | None, token: str) -> bool:
    """Constant-time comparison; an absent token never matches."""
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


def from_header(value: str | None) -> str | None:
    if value and value[:7].lower() == "bearer ":
        return value[7:].strip()
    return None


def refusal(authorization: str | None, cookie: str | None) -> str:
    """Why a request was not let in, in one sentence: no token, a header of another kind, a token
    that is not this server's, or a sign-in that has ended (where the server keeps its token is not
    said to a stranger)."""
    kind = (authorization or "bearer ").lstrip()[:7].lower()
    if kind not in ("bearer ", "bearer"):
        return "the Authorization header is not a bearer token: send 'Authorization: Bearer <token>'"
    if from_header(authorization):
        return "the token is wrong: it is not this server's"
    if cookie:
        return "the sign-in has ended or was revoked: sign in again with /?token=<token>"
    return "a bearer token is needed (Authorization: Bearer <token>)"


def cookie_name(session: SessionSettings, port: int | None) -> str:
    """The sign-in cookie's name for this server: its port and its sessions folder in it."""
    folder = str(session.path(session.sessions_dir).resolve())
    instance = hashlib.sha256(folder.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"sandshell-{port}-{instance}" if port else f"sandshell-{instance}"


class SignIns:
    """The web view's sign-ins: each a random value the browser keeps in a cookie; the server keeps
    only the SHA-256 of the token and the value together, and when it expires, in a file (mode 0600)
    that a restart reads back. A new token ends every sign-in made with the old one."""

    def __init__(self, path: Path, token: str, seconds: float = SIGN_IN_SECONDS) -> None:
        self.path = path
        self.token = token
        self.seconds = seconds
        self._lock = threading.Lock()
        self._expiry: dict[str, float] = {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                self._expiry = {k: float(v) for k, v in data.items() if isinstance(v, int | float)}
        except (OSError, ValueError):
            pass  # none yet, or unreadable: every browser signs in again

    def new(self) -> str:
        value = secrets.token_urlsafe(32)
        with self._lock:
            now = time.time()
            self._expiry = {k: t for k, t in self._expiry.items() if t > now}
            while len(self._expiry) >= MAX_SIGN_INS:
                del self._expiry[min(self._expiry, key=self._expiry.__getitem__)]
            self._expiry[self._digest(value)] = now + self.seconds
            self._write()
        return value

    def valid(self, value: str | None) -> bool:
        if not value:
            return False
        with self._lock:
            return self._expiry.get(self._digest(value), 0.0) > time.time()

    def revoke(self, value: str | None) -> bool:
        """End a sign-in (signing out); whether there was one."""
        if not value:
            return False
        with self._lock:
            gone = self._expiry.pop(self._digest(value), None) is not None
            if gone:
                self._write()
        return gone

    def _digest(self, value: str) -> str:
        return hashlib.sha256(f"{self.token}\0{value}".encode("utf-8", "replace")).hexdigest()

    def _write(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._expiry, f)
            os.replace(tmp, self.path)
        except OSError:
            pass  # kept in memory: the sign-ins hold until the server stops
