"""Any OpenAI-compatible server (llama-server, llama_cpp.server, Ollama, vLLM, OpenRouter).

Structured output is requested where the server supports it, trying in turn: a GBNF grammar
(llama.cpp servers), a JSON schema (`response_format`), and none (then answers that do not
parse are retried). Whichever the server accepts first is kept for the session.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from sandshell.config import Settings
from sandshell.errors import ModelError
from sandshell.model import actions
from sandshell.model.types import Message, Stats

ACTION_SCHEMA: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "maxItems": actions.MAX_ACTIONS,
    "items": {
        "type": "object",
        "properties": {
            "comment": {"type": "string"},
            "bash": {"type": "string"},
            "timeout": {"type": "number"},
            "read": {"type": "string"},
            "write": {"type": "string"},
            "content": {"type": "string"},
            "done": {"type": "string"},
        },
        "additionalProperties": False,
    },
}
MODES = ("grammar", "json_schema", "none")


class OpenAIBackend:
    """Chat completions over HTTP, streamed (server-sent events)."""

    name = "openai"

    def __init__(self, settings: Settings, client: httpx.Client | None = None) -> None:
        self.settings = settings
        self.base = settings.openai_base_url.rstrip("/")
        self.n_ctx = settings.n_ctx
        headers = {"Authorization": f"Bearer {settings.openai_api_key}"} if settings.openai_api_key else {}
        self.http = client or httpx.Client(headers=headers, timeout=httpx.Timeout(300.0, connect=10.0))
        self.mode_index = 0 if settings.grammar else len(MODES) - 1
        self.description = f"{settings.openai_model} at {self.base}"

    @property
    def constrained(self) -> bool:
        return MODES[self.mode_index] != "none"

    def count(self, messages: list[Message]) -> int:
        # No tokenizer over HTTP: a conservative estimate (about 3.5 characters a token).
        return int(sum(len(m["content"]) for m in messages) / 3.2) + 6 * len(messages)

    def _body(self, messages: list[Message], params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.settings.openai_model, "messages": messages, "stream": True, **params}
        mode = MODES[self.mode_index]
        if mode == "grammar":
            body["grammar"] = actions.GRAMMAR
        elif mode == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "actions", "schema": ACTION_SCHEMA, "strict": False},
            }
        return body

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats]:
        start = time.perf_counter()
        stats = Stats(prompt_tokens=self.count(messages))
        while True:
            try:
                with self.http.stream("POST", f"{self.base}/chat/completions", json=self._body(messages, params)) as r:
                    if r.status_code in (400, 422) and self.mode_index < len(MODES) - 1:
                        r.read()
                        self.mode_index += 1  # the server refused that kind of constraint: try the next
                        continue
                    if r.status_code != 200:
                        detail = r.read().decode(errors="replace")[:200]
                        raise ModelError(f"the model server answered {r.status_code}: {detail}")
                    for text in _sse_text(r.iter_lines(), stats):
                        if not stats.completion_tokens:
                            stats.ttft = time.perf_counter() - start
                        stats.completion_tokens += 1
                        yield text
                break
            except httpx.HTTPError as e:
                raise ModelError(
                    f"cannot reach the model server at {self.base} ({type(e).__name__}); "
                    "check LLAMA_OPENAI_BASE_URL and that the server runs"
                ) from None
        stats.seconds = time.perf_counter() - start
        yield stats


def _sse_text(lines: Iterator[str], stats: Stats) -> Iterator[str]:
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
            choice = chunk["choices"][0]
            delta = choice.get("delta") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        if choice.get("finish_reason") == "length":
            stats.cut = True
        text = delta.get("content")
        if text:
            yield str(text)
