"""The HTTP API (FastAPI), its docs and the web view's files.

Every /v1 route but /v1/health needs the token, or a sign-in of the web view (a cookie); a request
signed in by the cookie that changes something must come from this server's own page (its Origin).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Literal

import fastapi_offline
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, ConfigDict, Field

from sandshell.errors import SandshellError
from sandshell.service import auth, profiles, schema
from sandshell.service.chat import ProfileMismatch, StillAnswering
from sandshell.service.core import Service
from sandshell.service.feed import follow, until_ended
from sandshell.service.limits import BodyLimit, Framing, Head, LeftEarly, one_sentence
from sandshell.service.schema import ChatEnded, ChatReply, Health, Task, TaskList, refusals
from sandshell.service.taskqueue import Busy

STREAM_SECONDS = 3600.0  # one stream's life; the client resumes with Last-Event-ID
LAST_ID_DIGITS = 18  # an event's number fits in this many digits
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LEGACY_COOKIE = "sandshell_token"  # the name a sign-in had when the cookie held the token itself
WEB = files("sandshell") / "service" / "web"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
NO_STORE = {"Cache-Control": "no-store"}
SWAGGER_UI = Path(fastapi_offline.__file__).parent / "static"  # Swagger UI's bundle, shipped in a package


class ModelOverrides(BaseModel):
    """Sampling settings a task may choose: its /app/config.json starts with them (max_tokens at most
    the server's LLAMA_MAX_TOKENS)."""

    model_config = ConfigDict(extra="forbid")
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=0, le=1000)
    min_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    repeat_penalty: float | None = Field(None, ge=0.5, le=2, allow_inf_nan=False)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    max_tokens: int | None = Field(None, ge=16, le=100_000)


Resume = Annotated[str | None, Header(description="resume after this event (the last id seen)")]
After = Annotated[
    int | None, Query(ge=0, le=10**LAST_ID_DIGITS - 1, description="resume after this event (as Last-Event-ID)")
]
View = Annotated[Literal["exact", "inert"], Query(description="inert: controls shown as text")]
Wait = Annotated[
    float, Query(ge=0, le=60, allow_inf_nan=False, description="seconds to wait for the task to end (at most 60)")
]
PROFILE_DOC = "the sandbox's profile; only those of the server's SANDSHELL_API_PROFILES (403 for another)"
Script = list[str | dict[str, Any] | list[dict[str, Any]]]


class TaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    goal: str = Field(min_length=1, max_length=16_000)
    max_steps: int = Field(20, ge=1, le=1000)
    timeout: float = Field(300.0, gt=0, le=86_400, allow_inf_nan=False, description="seconds (a finite number)")
    workspace_mode: Literal["rw", "ro", "copy"] | None = None
    profile: Literal["standard", "locked"] | None = Field(None, description=PROFILE_DOC)
    model: ModelOverrides | None = None
    script: Script | None = Field(None, max_length=500, description="answers, only for a server on the script backend")


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(min_length=1, max_length=16_000)
    conversation_id: str | None = Field(None, max_length=64)
    profile: Literal["standard", "locked"] | None = Field(None, description=PROFILE_DOC)
    script: Script | None = Field(None, max_length=500, description="answers, only for a server on the script backend")


bearer = HTTPBearer(
    auto_error=False,
    description="the API token: SANDSHELL_API_TOKEN, or the one the server "
    "made at first start (kept in SESSIONS_DIR/.service/api-token)",
)
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


def resume_point(last_event_id: Resume = None, after: After = None) -> int:
    """Where a stream starts: after `after`, or after the Last-Event-ID a reconnecting client sends."""
    if after is not None:
        return after
    given = (last_event_id or "").strip()
    if not given:
        return 0
    if not given.isascii() or not given.isdigit() or len(given) > LAST_ID_DIGITS:
        shown = given[:40] + ("…" if len(given) > 40 else "")
        raise HTTPException(
            400,
            f"Last-Event-ID must be the id of an event this stream sent (a whole number "
            f"of at most {LAST_ID_DIGITS} digits), not {shown!r}",
        )
    return int(given)


Start = Annotated[int, Depends(resume_point)]


def create_app(service: Service) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        service.start()
        yield
        await run_in_threadpool(service.stop)

    about = "Run tasks and conversations with a language model in hardened shell sandboxes."
    app = FastAPI(
        title="sandshell",
        version="0.1.0",
        lifespan=lifespan,
        description=about,
        docs_url=None,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    app.add_middleware(BodyLimit, limit=service.settings.service.api_body_limit)
    app.add_middleware(Head)
    app.add_middleware(Framing)
    app.add_middleware(LeftEarly)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_r: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": one_sentence(e.errors())}, status_code=422)

    def signed_in(request: Request) -> bool:
        """Whether the request carries this server's token, or a live sign-in of its web view."""
        if auth.matches(auth.from_header(request.headers.get("authorization")), service.token):
            return True
        return "authorization" not in request.headers and service.sign_ins.valid(request.cookies.get(service.cookie))

    def authorized(request: Request, _: Bearer = None) -> None:
        authorization = request.headers.get("authorization")
        if auth.matches(auth.from_header(authorization), service.token):
            return  # (a header no other site's page can make a browser send)
        cookie = request.cookies.get(service.cookie)
        if authorization is None and service.sign_ins.valid(cookie):
            if request.method not in SAFE_METHODS and not same_origin(request):
                raise HTTPException(
                    403,
                    "a signed-in browser may change things only from this server's own pages "
                    "(the request's Origin is another site's, or missing)",
                )
            return
        raise HTTPException(401, auth.refusal(authorization, cookie), headers={"WWW-Authenticate": "Bearer"})

    Auth = [Depends(authorized)]

    def task_or_404(task_id: str) -> dict[str, Any]:
        view = service.manager.view(task_id)
        if view is None:
            raise HTTPException(404, f"no task {task_id!r}; GET /v1/tasks lists them")
        return view

    @app.get("/v1/health", response_model=Health, response_model_exclude_none=True)
    def health(request: Request, _: Bearer = None) -> dict[str, Any]:
        """Up or not, for anyone (a load balancer); the model and the counts only with the token."""
        return service.health() if signed_in(request) else {"status": "ok"}

    @app.post(
        "/v1/tasks",
        status_code=202,
        dependencies=Auth,
        response_model=Task,
        responses=refusals(401, 403, 413, 422, 429),
    )
    def create_task(body: TaskRequest) -> dict[str, Any]:
        """Queue a task; it starts when one of the server's SANDSHELL_MAX_SESSIONS workers is free."""
        if body.script is not None and service.settings.model.backend != "script":
            raise HTTPException(422, "a task may carry a script only when the server runs LLAMA_BACKEND=script")
        most = service.settings.model.max_tokens  # (a task's config.json past it: refused inside, every turn)
        if body.model is not None and body.model.max_tokens is not None and body.model.max_tokens > most:
            raise HTTPException(422, f"model.max_tokens may be at most {most} (the server's LLAMA_MAX_TOKENS)")
        request = body.model_dump(exclude={"goal"}, exclude_none=True)
        try:
            request["profile"] = profiles.choose(service.settings.service, service.settings.sandbox, body.profile)
            record = service.manager.submit(body.goal, request)
        except profiles.Forbidden as e:
            raise HTTPException(403, str(e)) from None
        except Busy as e:
            raise HTTPException(429, str(e)) from None
        except SandshellError as e:
            raise HTTPException(500, str(e)) from None
        return task_or_404(record.id)

    @app.get("/v1/tasks", dependencies=Auth, response_model=TaskList, responses=refusals(401, 422))
    def list_tasks(offset: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=200)] = 50) -> Any:
        """The tasks, newest first, with their numbers as they stand (live while a task runs)."""
        total, tasks = service.manager.page(offset, limit)
        return {"total": total, "offset": offset, "limit": limit, "tasks": tasks}

    @app.get("/v1/tasks/{task_id}", dependencies=Auth, response_model=Task, responses=refusals(401, 404, 422))
    async def get_task(task_id: str, wait: Wait = 0.0) -> dict[str, Any]:
        """The task: status, result, error, log and the numbers. With `wait`, answers when the task has
        ended, or after that many seconds with where it stands (a long poll: no need to ask again and again)."""
        if wait > 0:
            await until_ended(service.feeds, task_id, lambda: service.manager.is_active(task_id), wait)
        return await run_in_threadpool(task_or_404, task_id)

    @app.post("/v1/tasks/{task_id}/cancel", dependencies=Auth, response_model=Task, responses=refusals(401, 403, 404))
    def cancel_task(task_id: str) -> dict[str, Any]:
        """Stop a task: a waiting one never starts, a running one stops (asking again changes nothing)."""
        task_or_404(task_id)
        service.manager.cancel(task_id)
        return task_or_404(task_id)

    async def slot() -> AsyncIterator[None]:
        if not service.streams.take():  # (checked and counted at once: never more than the limit in)
            raise HTTPException(429, f"{service.streams.size} event streams are open; close one and try again")
        try:
            yield
        finally:
            service.streams.give_back()  # (after the stream has ended)

    def conversation_or_404(conversation_id: str) -> None:
        if not service.conversations.known(conversation_id):
            raise HTTPException(404, f"no conversation {conversation_id!r}; POST /v1/chat starts one")

    async def events(
        session_id: str, active: Callable[[], bool], start: int, view: str
    ) -> AsyncIterator[ServerSentEvent]:
        path = service.store.folder(session_id) / "events.jsonl"
        async for item in follow(service.feeds, session_id, path, start, active, view == "inert", STREAM_SECONDS):
            if item is not None:
                yield ServerSentEvent(raw_data=item.data, event=item.type, id=str(item.seq))

    streamed = {**schema.event_stream(), **refusals(400, 401, 404, 422, 429)}

    @app.get(
        "/v1/tasks/{task_id}/events",
        response_class=EventSourceResponse,
        responses=streamed,
        dependencies=[*Auth, Depends(task_or_404), Depends(slot)],
    )
    async def task_events(task_id: str, start: Start, view: View = "exact") -> AsyncIterator[ServerSentEvent]:
        """The task's events as Server-Sent Events; each one's id is its number in the recording."""
        async for e in events(task_id, lambda: service.manager.is_active(task_id), start, view):
            yield e

    @app.get(
        "/v1/chat/{conversation_id}/events",
        response_class=EventSourceResponse,
        responses=streamed,
        dependencies=[*Auth, Depends(conversation_or_404), Depends(slot)],
    )
    async def chat_events(conversation_id: str, start: Start, view: View = "exact") -> AsyncIterator[ServerSentEvent]:
        """The conversation's events as Server-Sent Events (the types of the task stream), live while it is
        open; each one's id is its number in the recording. An ended conversation's stream is its recording."""
        async for e in events(conversation_id, lambda: service.conversations.is_open(conversation_id), start, view):
            yield e

    @app.post(
        "/v1/chat",
        dependencies=Auth,
        response_model=ChatReply,
        responses={
            **refusals(401, 403, 404, 409, 413, 422, 429),
            502: {"model": schema.Problem, "description": "the model or the sandbox failed"},
        },
    )
    def chat(body: ChatRequest) -> dict[str, Any]:
        """One message to a conversation (a new one without `conversation_id`); answers when the model has acted."""
        if body.script is not None and service.settings.model.backend != "script":
            raise HTTPException(422, "a chat may carry a script only when the server runs LLAMA_BACKEND=script")
        script = None if body.script is None else [s if isinstance(s, str) else _json(s) for s in body.script]
        try:
            new = body.conversation_id is None  # a new conversation gets the default profile when it names none
            profile = (
                profiles.choose(service.settings.service, service.settings.sandbox, body.profile)
                if new or body.profile
                else None
            )
            return service.conversations.say(body.message, body.conversation_id, script, profile)
        except profiles.Forbidden as e:
            raise HTTPException(403, str(e)) from None
        except ProfileMismatch as e:
            raise HTTPException(422, str(e)) from None
        except KeyError:
            why = f"no conversation {body.conversation_id!r}; leave conversation_id out to start one"
            raise HTTPException(404, why) from None
        except StillAnswering as e:
            raise HTTPException(409, str(e)) from None
        except Busy as e:
            raise HTTPException(429, str(e)) from None
        except SandshellError as e:
            raise HTTPException(502, str(e)) from None

    @app.delete(
        "/v1/chat/{conversation_id}", dependencies=Auth, response_model=ChatEnded, responses=refusals(401, 403, 404)
    )
    def end_chat(conversation_id: str) -> dict[str, Any]:
        """End a conversation: its sandbox is removed; its recording stays."""
        if not service.conversations.end(conversation_id):
            raise HTTPException(404, f"no open conversation {conversation_id!r}")
        return {"conversation_id": conversation_id, "ended": True}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            doc.setdefault("components", {}).setdefault("schemas", {}).update(schema.event_schemas())
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    # -- the web view ---------------------------------------------------------------------------
    def page(request: Request, token: str | None) -> Response:
        if token is not None:  # sign in once: a sign-in of its own becomes the cookie; the token leaves the bar
            if not auth.matches(token, service.token):
                return HTMLResponse("<p>That token is not this server's.</p>", status_code=401, headers=NO_STORE)
            r = RedirectResponse(request.url.path, status_code=303, headers=NO_STORE)
            r.set_cookie(
                service.cookie,
                service.sign_ins.new(),
                max_age=auth.SIGN_IN_SECONDS,
                httponly=True,
                samesite="strict",
                path="/",
            )
            r.delete_cookie(LEGACY_COOKIE, path="/")  # (it held the token itself: no browser should keep it)
            return r
        html = (WEB / "index.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Content-Security-Policy": CSP, **NO_STORE})

    @app.get("/", include_in_schema=False)
    def index(request: Request, token: str | None = None) -> Response:
        return page(request, token)

    @app.get("/tasks/{task_id}", include_in_schema=False)
    def task_page(request: Request, task_id: str, token: str | None = None) -> Response:
        return page(request, token)

    @app.post("/signout", include_in_schema=False, status_code=204)
    def sign_out(request: Request) -> Response:
        """End this browser's sign-in (only from this server's own page)."""
        if not same_origin(request):
            raise HTTPException(403, "signing out is done from this server's own page")
        service.sign_ins.revoke(request.cookies.get(service.cookie))
        r = Response(status_code=204)
        r.delete_cookie(service.cookie, path="/")
        return r

    @app.get("/static/view.js", include_in_schema=False)
    def script() -> Response:
        js = (WEB / "view.js").read_text(encoding="utf-8")
        return Response(js, media_type="text/javascript")

    @app.get("/docs", include_in_schema=False)
    def docs() -> Response:
        html = (WEB / "docs.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Content-Security-Policy": DOCS_CSP})

    @app.get("/static/docs.js", include_in_schema=False)
    def docs_script() -> Response:
        return Response((WEB / "docs.js").read_text(encoding="utf-8"), media_type="text/javascript")

    @app.get("/static/swagger-ui/{name}", include_in_schema=False)
    def swagger_asset(name: Literal["swagger-ui-bundle.js", "swagger-ui.css"]) -> Response:
        return FileResponse(SWAGGER_UI / name, headers={"Cache-Control": "max-age=86400"})

    return app


def same_origin(request: Request) -> bool:
    """Whether a browser sent this request from one of this server's own pages (its Origin is this
    server's scheme, host and port); a request with no Origin is taken as another site's."""
    origin = request.headers.get("origin")
    host = request.headers.get("host")
    return bool(origin and host) and origin == f"{request.url.scheme}://{host}"


def _json(value: Any) -> str:
    import json

    return json.dumps(value)
