"""The API's bearer token: given by SANDSHELL_API_TOKEN, or made at first start and kept mode 0600.

A request carries it as `Authorization: Bearer <token>`, or, for the web view (an EventSource
cannot send headers), as the `sandshell_token` cookie that `/?token=<token>` sets once.
Compared in constant time.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from sandshell.config import Settings
from sandshell.errors import SandshellError

COOKIE = "sandshell_token"


def token_file(settings: Settings) -> Path:
    return settings.path(settings.sessions_dir) / ".service" / "api-token"


def load_token(settings: Settings) -> tuple[str, bool]:
    """(the token, whether it was made just now)."""
    if settings.api_token:
        return settings.api_token, False
    path = token_file(settings)
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
    """Why a request was not let in, in one sentence: no token, a header of another kind, or a token
    that is not this server's (where the server keeps its token is not said to a stranger)."""
    kind = (authorization or "bearer ").lstrip()[:7].lower()
    if kind not in ("bearer ", "bearer"):
        return "the Authorization header is not a bearer token: send 'Authorization: Bearer <token>'"
    if from_header(authorization) or cookie:
        return "the token is wrong: it is not this server's"
    return "a bearer token is needed (Authorization: Bearer <token>)"
