"""What the API answers, as types: the OpenAPI at /openapi.json (and /docs) is made from these."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from sandshell.session import events as ev


class Problem(BaseModel):
    """Every refusal and error: one sentence that says what is wrong and how to fix it."""

    detail: str = Field(examples=["no task '20250101-120000-abcd'; GET /v1/tasks lists them"])


class TaskSummary(BaseModel):
    """A task as lists show it. The numbers grow while it runs; an interrupted task keeps what it ran."""

    model_config = ConfigDict(extra="forbid")
    id: str
    goal: str
    status: typing.Literal[
        "queued", "running", "done", "max_steps", "timeout", "stuck", "quit", "error", "cancelled", "interrupted"
    ]
    created: float = Field(description="when it was asked for (seconds since the epoch)")
    started: float | None
    ended: float | None
    result: str | None = Field(description="the model's answer, when it said done")
    error: str | None = Field(description="why it ended otherwise (or `cancelling` while it stops)")
    turns: int
    seconds: float
    tokens_in: int = Field(description="prompt tokens evaluated (not counting those reused from the cache)")
    tokens_out: int


class Task(TaskSummary):
    """A task with its place in the queue and its transcript as plain lines (bounded)."""

    queue_position: int | None = Field(description="1 for the next to start; null once it started")
    log: list[str]


class TaskList(BaseModel):
    model_config = ConfigDict(extra="forbid")
    total: int
    offset: int
    limit: int
    tasks: list[TaskSummary] = Field(description="newest first")


class Load(BaseModel):
    generating: int
    waiting: int


class Health(BaseModel):
    """Without the token only `status`; with it the model, the profiles and the counts."""

    model_config = ConfigDict(extra="forbid")
    status: typing.Literal["ok"]
    backend: str | None = None
    profiles: list[str] | None = None
    running: int | None = None
    queued: int | None = None
    tasks: int | None = None
    conversations: int | None = None
    generations: Load | None = None


class ChatReply(BaseModel):
    """What the model did this turn: its words, the command it ran and what that printed (bounded)."""

    model_config = ConfigDict(extra="forbid")
    conversation_id: str
    thought: str
    code: str
    observation: str
    done: str | None = Field(description="its answer, when it said done")
    error: str | None


class ChatEnded(BaseModel):
    model_config = ConfigDict(extra="forbid")
    conversation_id: str
    ended: typing.Literal[True]


def refusals(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The error answers a route can give, each `{"detail": "sentence"}`."""
    said = {
        400: "a header is malformed (Last-Event-ID)",
        401: "no token, or not this server's",
        403: "not allowed: a profile the server does not offer, or a signed-in page of another site",
        404: "no such task or conversation",
        409: "the conversation is busy with another message",
        413: "the body is over SANDSHELL_API_BODY_LIMIT",
        422: "the request is not valid: what is wrong, in one sentence",
        429: "too much at once: the queue, the conversations or the event streams are full",
    }
    return {code: {"model": Problem, "description": said[code]} for code in codes}


EVENT_TYPES: tuple[type, ...] = typing.get_args(ev.Event)


def event_schemas() -> dict[str, Any]:
    """The JSON schema of each event a stream sends (each line of `events.jsonl`), by type name,
    with the types they use; for the OpenAPI's components."""
    out: dict[str, Any] = {}
    for kind in EVENT_TYPES:
        schema = TypeAdapter(kind).json_schema(ref_template="#/components/schemas/{model}")
        out.update(schema.pop("$defs", {}))
        schema["properties"] = {
            "type": {"const": kind.__name__, "description": "the event's type (also the SSE event name)"},
            "t": {"type": "number", "description": "seconds since the session started"},
            **schema.get("properties", {}),
        }
        schema["required"] = ["type", "t", *schema.get("required", [])]
        out[kind.__name__] = schema
    return out


def event_stream() -> dict[int | str, dict[str, Any]]:
    """The 200 answer of an event stream: Server-Sent Events whose data is one of the event types."""
    one_of = [{"$ref": f"#/components/schemas/{kind.__name__}"} for kind in EVENT_TYPES]
    return {
        200: {
            "description": "Server-Sent Events: `id` is the event's number in the recording, `event` its type, "
            "`data` the event as JSON (one of the schemas below); a comment line keeps an idle stream alive",
            "content": {"text/event-stream": {"schema": {"oneOf": one_of}}},
        }
    }
