"""At the door: request bodies no larger than SANDSHELL_API_BODY_LIMIT, HEAD answered as GET, headers
that keep every page out of frames, a bounded count of event streams, and errors in one sentence."""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import anyio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: 413 for a body over `limit` bytes, by its Content-Length or as it is read."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        if declared.isdigit():
            await self.app(scope, receive, send)  # the server reads no more than it declared
            return
        body, more = b"", True  # no length told (chunked): read it here, up to the limit, then pass it on
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            if len(body) > self.limit:
                await self._refuse(send)
                return
            more = bool(message.get("more_body"))
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"detail": f"the request body is over {self.limit:,} bytes (SANDSHELL_API_BODY_LIMIT)"})
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})


class Head:
    """ASGI middleware: HEAD answered as GET would be, without the body (a stream is ended at its head)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        started = False

        async def head_only(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def gone_once_started() -> Message:
            return {"type": "http.disconnect"} if started else await receive()

        await self.app({**scope, "method": "GET"}, gone_once_started, head_only)


class Framing:
    """ASGI middleware: no page of the server in a frame of another site (`frame-ancestors 'none'`,
    X-Frame-Options for older browsers), no MIME sniffing, and no address sent on as a Referer."""

    HEADERS = [
        (b"x-frame-options", b"DENY"),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    ]

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _REPLACED]
                if not any(k.lower() == b"content-security-policy" for k, _ in headers):
                    headers.append((b"content-security-policy", b"frame-ancestors 'none'"))
                message = {**message, "headers": [*headers, *self.HEADERS]}
            await send(message)

        await self.app(scope, receive, guarded)


_REPLACED = {k for k, _ in Framing.HEADERS}


class LeftEarly:
    """ASGI middleware: a client that went away in the middle of an answer (an event stream closed by
    its reader) is no error of the server's; the stream's own teardown then meets a closed channel,
    which is not worth a traceback in the server's log."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def noting(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, noting)
        except* (anyio.BrokenResourceError, anyio.ClosedResourceError):
            if not started:
                raise


class Slots:
    """At most `size` held at once; taking one is checked and counted under one lock."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.held = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.held >= self.size:
                return False
            self.held += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self.held -= 1


def one_sentence(errors: Sequence[Any]) -> str:
    """Pydantic's validation errors as one sentence: where, and what is wrong."""
    parts = []
    for e in list(errors)[:5]:
        if e.get("type") == "json_invalid":  # (its place is ("body", offset), its msg "JSON decode error")
            loc, ctx = e.get("loc") or (), e.get("ctx")
            at = f"at character {loc[-1]}: " if loc and isinstance(loc[-1], int) else ""
            why = ctx.get("error") if isinstance(ctx, dict) else None
            return f"the request body is not valid JSON ({at}{why or 'malformed'}); see /docs"
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "the body"
        parts.append(f"{where}: {e.get('msg', 'is not valid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "bad request: " + "; ".join(parts) + more + "; see /docs"
