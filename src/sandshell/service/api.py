"""The HTTP API (FastAPI) and the web view's files. Every /v1 route but /v1/health needs the token."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, ConfigDict, Field

from sandshell.errors import SandshellError
from sandshell.service import auth, profiles
from sandshell.service.chat import ProfileMismatch
from sandshell.service.core import Service
from sandshell.service.feed import follow, until_ended
from sandshell.service.limits import BodyLimit, one_sentence
from sandshell.service.taskqueue import Busy

COOKIE_SECONDS = 30 * 24 * 3600  # the web view's sign-in lasts a month in that browser
MAX_STREAMS = 64  # event streams open at once
STREAM_SECONDS = 3600.0  # one stream's life; the client resumes with Last-Event-ID
WEB = files("sandshell") / "service" / "web"
CSP = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'"


class ModelOverrides(BaseModel):
    """Sampling settings a task may choose: its /app/config.json starts with them (max_tokens at most
    the server's LLAMA_MAX_TOKENS)."""

    model_config = ConfigDict(extra="forbid")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, le=1000)
    min_p: float | None = Field(None, ge=0, le=1)
    repeat_penalty: float | None = Field(None, ge=0.5, le=2)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    max_tokens: int | None = Field(None, ge=16, le=100_000)


Resume = Annotated[str | None, Header(description="resume after this event (the last id seen)")]
After = Annotated[int | None, Query(ge=0, description="resume after this event (as Last-Event-ID)")]
View = Annotated[Literal["exact", "inert"], Query(description="inert: controls shown as text")]
Wait = Annotated[float, Query(ge=0, le=60, description="seconds to wait for the task to end (at most 60)")]
PROFILE_DOC = "the sandbox's profile; only those of the server's SANDSHELL_API_PROFILES (403 for another)"
Script = list[str | dict[str, Any] | list[dict[str, Any]]]


class TaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    goal: str = Field(min_length=1, max_length=16_000)
    max_steps: int = Field(20, ge=1, le=1000)
    timeout: float = Field(300.0, gt=0, le=86_400)
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


def create_app(service: Service) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        service.start()
        yield
        await run_in_threadpool(service.stop)

    about = "Run tasks and conversations with a language model in hardened shell sandboxes."
    app = FastAPI(title="sandshell", version="0.1.0", lifespan=lifespan, description=about)
    app.add_middleware(BodyLimit, limit=service.settings.api_body_limit)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_r: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": one_sentence(e.errors())}, status_code=422)

    def authorized(request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
        cookie = request.cookies.get(auth.COOKIE)
        if not auth.matches(auth.from_header(authorization) or cookie, service.token):
            raise HTTPException(401, auth.refusal(authorization, cookie), headers={"WWW-Authenticate": "Bearer"})

    Auth = [Depends(authorized)]

    def task_or_404(task_id: str) -> dict[str, Any]:
        view = service.manager.view(task_id)
        if view is None:
            raise HTTPException(404, f"no task {task_id!r}; GET /v1/tasks lists them")
        return view

    @app.get("/v1/health")
    def health(request: Request, authorization: Annotated[str | None, Header()] = None) -> dict[str, Any]:
        """Up or not, for anyone (a load balancer); the model and the counts only with the token."""
        given = auth.from_header(authorization) or request.cookies.get(auth.COOKIE)
        return service.health() if auth.matches(given, service.token) else {"status": "ok"}

    @app.post("/v1/tasks", status_code=202, dependencies=Auth)
    def create_task(body: TaskRequest) -> dict[str, Any]:
        if body.script is not None and service.settings.backend != "script":
            raise HTTPException(422, "a task may carry a script only when the server runs LLAMA_BACKEND=script")
        most = service.settings.max_tokens  # (a task's config.json past it: refused inside, every turn)
        if body.model is not None and body.model.max_tokens is not None and body.model.max_tokens > most:
            raise HTTPException(422, f"model.max_tokens may be at most {most} (the server's LLAMA_MAX_TOKENS)")
        request = body.model_dump(exclude={"goal"}, exclude_none=True)
        try:
            request["profile"] = profiles.choose(service.settings, body.profile)
            record = service.manager.submit(body.goal, request)
        except profiles.Forbidden as e:
            raise HTTPException(403, str(e)) from None
        except Busy as e:
            raise HTTPException(429, str(e)) from None
        except SandshellError as e:
            raise HTTPException(500, str(e)) from None
        return task_or_404(record.id)

    @app.get("/v1/tasks", dependencies=Auth)
    def list_tasks(offset: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=200)] = 50) -> Any:
        total, tasks = service.manager.page(offset, limit)
        return {"total": total, "offset": offset, "limit": limit, "tasks": tasks}

    @app.get("/v1/tasks/{task_id}", dependencies=Auth)
    async def get_task(task_id: str, wait: Wait = 0.0) -> dict[str, Any]:
        """The task: status, result, error, log and the numbers. With `wait`, answers when the task has
        ended, or after that many seconds with where it stands (a long poll: no need to ask again and again)."""
        if wait > 0:
            await until_ended(service.feeds, task_id, lambda: service.manager.is_active(task_id), wait)
        return await run_in_threadpool(task_or_404, task_id)

    @app.post("/v1/tasks/{task_id}/cancel", dependencies=Auth)
    def cancel_task(task_id: str) -> dict[str, Any]:
        task_or_404(task_id)
        service.manager.cancel(task_id)
        return task_or_404(task_id)

    def slot() -> None:
        if service.streams >= MAX_STREAMS:
            raise HTTPException(429, f"{MAX_STREAMS} event streams are open; close one and try again")

    def conversation_or_404(conversation_id: str) -> None:
        if not service.conversations.known(conversation_id):
            raise HTTPException(404, f"no conversation {conversation_id!r}; POST /v1/chat starts one")

    async def events(
        session_id: str, active: Callable[[], bool], resumed: str | None, after: int | None, view: str
    ) -> AsyncIterator[ServerSentEvent]:
        start = after if after is not None else int(resumed) if resumed and resumed.isdigit() else 0
        path = service.store.folder(session_id) / "events.jsonl"
        service.streams += 1
        try:
            async for item in follow(service.feeds, session_id, path, start, active, view == "inert", STREAM_SECONDS):
                if item is not None:
                    yield ServerSentEvent(raw_data=item.data, event=item.type, id=str(item.seq))
        finally:
            service.streams -= 1

    @app.get(
        "/v1/tasks/{task_id}/events",
        response_class=EventSourceResponse,
        dependencies=[*Auth, Depends(task_or_404), Depends(slot)],
    )
    async def task_events(
        task_id: str, last_event_id: Resume = None, after: After = None, view: View = "exact"
    ) -> AsyncIterator[ServerSentEvent]:
        """The task's events as Server-Sent Events; each one's id is its number in the recording."""
        async for e in events(task_id, lambda: service.manager.is_active(task_id), last_event_id, after, view):
            yield e

    @app.get(
        "/v1/chat/{conversation_id}/events",
        response_class=EventSourceResponse,
        dependencies=[*Auth, Depends(conversation_or_404), Depends(slot)],
    )
    async def chat_events(
        conversation_id: str, last_event_id: Resume = None, after: After = None, view: View = "exact"
    ) -> AsyncIterator[ServerSentEvent]:
        """The conversation's events as Server-Sent Events (the types of the task stream), live while it is
        open; each one's id is its number in the recording. An ended conversation's stream is its recording."""
        async for e in events(
            conversation_id, lambda: service.conversations.is_open(conversation_id), last_event_id, after, view
        ):
            yield e

    @app.post("/v1/chat", dependencies=Auth)
    def chat(body: ChatRequest) -> dict[str, Any]:
        if body.script is not None and service.settings.backend != "script":
            raise HTTPException(422, "a chat may carry a script only when the server runs LLAMA_BACKEND=script")
        script = None if body.script is None else [s if isinstance(s, str) else _json(s) for s in body.script]
        try:
            new = body.conversation_id is None  # a new conversation gets the default profile when it names none
            profile = profiles.choose(service.settings, body.profile) if new or body.profile else None
            return service.conversations.say(body.message, body.conversation_id, script, profile)
        except profiles.Forbidden as e:
            raise HTTPException(403, str(e)) from None
        except ProfileMismatch as e:
            raise HTTPException(422, str(e)) from None
        except KeyError:
            why = f"no conversation {body.conversation_id!r}; leave conversation_id out to start one"
            raise HTTPException(404, why) from None
        except Busy as e:
            raise HTTPException(429, str(e)) from None
        except SandshellError as e:
            raise HTTPException(502, str(e)) from None

    @app.delete("/v1/chat/{conversation_id}", dependencies=Auth)
    def end_chat(conversation_id: str) -> dict[str, Any]:
        if not service.conversations.end(conversation_id):
            raise HTTPException(404, f"no open conversation {conversation_id!r}")
        return {"conversation_id": conversation_id, "ended": True}

    # -- the web view ---------------------------------------------------------------------------
    def page(request: Request, token: str | None) -> Response:
        if token is not None:  # sign in once: the token becomes a cookie, and leaves the address bar
            if not auth.matches(token, service.token):
                return HTMLResponse("<p>That token is not this server's.</p>", status_code=401)
            r = RedirectResponse(request.url.path, status_code=303)
            r.set_cookie(auth.COOKIE, token, max_age=COOKIE_SECONDS, httponly=True, samesite="strict", path="/")
            return r
        html = (WEB / "index.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"})

    @app.get("/", include_in_schema=False)
    def index(request: Request, token: str | None = None) -> Response:
        return page(request, token)

    @app.get("/tasks/{task_id}", include_in_schema=False)
    def task_page(request: Request, task_id: str, token: str | None = None) -> Response:
        return page(request, token)

    @app.get("/static/view.js", include_in_schema=False)
    def script() -> Response:
        js = (WEB / "view.js").read_text(encoding="utf-8")
        return Response(js, media_type="text/javascript", headers={"X-Content-Type-Options": "nosniff"})

    return app


def _json(value: Any) -> str:
    import json

    return json.dumps(value)
