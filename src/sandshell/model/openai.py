"""Any OpenAI-compatible server (llama-server, llama_cpp.server, Ollama, vLLM, OpenRouter).

Structured output is requested where the server supports it, trying in turn: a GBNF grammar
(llama.cpp servers), a JSON schema (`response_format`), and none (then answers that do not
parse are retried). Whichever the server accepts first is kept for the session.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx

from sandshell.config import ModelSettings
from sandshell.errors import ContextOverflow, ModelError
from sandshell.model import actions
from sandshell.model.types import Message, Stats, sendable

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
# How servers say a prompt does not fit: llama-server, llama_cpp.server, vLLM, OpenAI.
OVERFLOW = re.compile(r"exceed\w* (the )?(available )?context|context (window|length|size)|too many tokens", re.I)


class OpenAIBackend:
    """Chat completions over HTTP, streamed (server-sent events)."""

    name = "openai"

    def __init__(self, settings: ModelSettings, client: httpx.Client | None = None) -> None:
        self.settings = settings
        self.base = settings.openai_base_url.rstrip("/")
        self.n_ctx = settings.n_ctx
        headers = {"Authorization": f"Bearer {settings.openai_api_key}"} if settings.openai_api_key else {}
        self.http = client or httpx.Client(headers=headers, timeout=httpx.Timeout(300.0, connect=10.0))
        self.mode_index = 0 if settings.grammar else len(MODES) - 1
        self.scale = 1.0
        served = self._served_n_ctx()
        self.n_ctx = served or settings.n_ctx
        told = "from the server" if served else "from LLAMA_N_CTX; the server did not say"
        self.description = f"{settings.openai_model} at {self.base} (context {self.n_ctx:,} tokens, {told})"

    def _served_n_ctx(self) -> int:
        """The server's context size where it tells: llama-server's /props, vLLM's max_model_len; else 0."""
        root = self.base.removesuffix("/v1")
        props = self._get(f"{root}/props")
        if isinstance(props, dict):
            n = props.get("n_ctx") or (props.get("default_generation_settings") or {}).get("n_ctx")
            if isinstance(n, int) and n > 0:
                return n
        models = self._get(f"{self.base}/models")
        first = (models.get("data") or [None])[0] if isinstance(models, dict) else None
        n = first.get("max_model_len") if isinstance(first, dict) else None
        return n if isinstance(n, int) and n > 0 else 0

    def _get(self, url: str) -> Any:
        try:
            return self.http.get(url, timeout=3.0).json()
        except (httpx.HTTPError, ValueError):
            return None

    @property
    def constrained(self) -> bool:
        return MODES[self.mode_index] != "none"

    def count(self, messages: list[Message]) -> int:
        # No tokenizer over HTTP: an estimate (about 3.2 characters a token), scaled up once the
        # server has said how many tokens a prompt really took (digits and symbols take more).
        return int((sum(len(m["content"]) for m in messages) / 3.2 + 6 * len(messages)) * self.scale)

    def _body(self, messages: list[Message], params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.settings.openai_model,
            "messages": sendable(messages),
            "stream": True,
            **params,
        }
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
                    if r.status_code in (400, 413, 422):
                        detail = r.read().decode(errors="replace")
                        if OVERFLOW.search(detail):
                            raise self._overflow(detail, stats.prompt_tokens)
                        if self.mode_index < len(MODES) - 1:
                            self.mode_index += 1  # the server refused that kind of constraint: try the next
                            continue
                    if r.status_code != 200:
                        detail = r.read().decode(errors="replace")[:200]
                        raise ModelError(f"the model server answered {r.status_code}: {detail}")
                    events = [0]
                    for text in _sse_text(r.iter_lines(), stats, events):
                        if not stats.completion_tokens:
                            stats.ttft = time.perf_counter() - start
                        stats.completion_tokens += 1
                        yield text
                if not events[0]:  # an empty stream: some servers (llama_cpp.server) fail a prompt so
                    self._why_empty(messages, params, stats.prompt_tokens)  # ask once more, unstreamed
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                raise ModelError(
                    f"cannot reach the model server at {self.base} ({type(e).__name__}); "
                    "check LLAMA_OPENAI_BASE_URL and that the server runs"
                ) from None
            except httpx.HTTPError as e:
                if not stats.completion_tokens:  # it broke off before a word: ask it why, once, unstreamed
                    self._why_empty(messages, params, stats.prompt_tokens)
                raise ModelError(f"the model server at {self.base} broke off its answer ({type(e).__name__})") from None
        stats.seconds = time.perf_counter() - start
        yield stats

    def _why_empty(self, messages: list[Message], params: dict[str, Any], estimate: int) -> None:
        """After an answer that came back empty: the server's reason, unstreamed and one token long."""
        body = {**self._body(messages, params), "stream": False, "max_tokens": 1}
        for attempt in range(2):  # the stream that broke may have left a dead connection in the pool
            try:
                r = self.http.post(f"{self.base}/chat/completions", json=body)
                break
            except httpx.HTTPError as e:
                if attempt:
                    raise ModelError(
                        f"the model server at {self.base} broke off its answer ({type(e).__name__})"
                    ) from None
        if r.status_code != 200 and OVERFLOW.search(r.text):
            raise self._overflow(r.text, estimate)
        raise ModelError(f"the model server sent an empty answer (then {r.status_code}: {r.text[:200]})")

    def _overflow(self, detail: str, estimate: int) -> ContextOverflow:
        e = _overflow(detail, estimate, self.n_ctx)
        if e.prompt_tokens > estimate > 0:  # our estimate was low: count higher from now on
            self.scale *= e.prompt_tokens / estimate * 1.05
        if 0 < e.n_ctx < self.n_ctx:
            self.n_ctx = e.n_ctx
        return e


def _sse_text(lines: Iterator[str], stats: Stats, events: list[int]) -> Iterator[str]:
    for line in lines:
        if not line.startswith("data:"):
            continue
        events[0] += 1
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


def _overflow(detail: str, estimate: int, n_ctx: int) -> ContextOverflow:
    """The server's refusal as one sentence with the numbers (its own where it gives them).

    llama-server: {"error": {"n_prompt_tokens": P, "n_ctx": C}}; llama_cpp.server, vLLM, OpenAI:
    "maximum context length is C tokens. However, you requested P tokens"; older llama_cpp:
    "Requested tokens (P) exceed context window of C"."""
    try:
        err = json.loads(detail).get("error")
    except (ValueError, AttributeError):
        err = None
    err = err if isinstance(err, dict) else {}
    text = str(err.get("message", detail))
    ctx = re.search(r"(?:context (?:length|window|size)(?: is| of)?)\s*(\d+)", text)
    asked = re.search(r"requested (?:tokens )?\(?(\d+)", text, re.I)
    prompt = int(err.get("n_prompt_tokens") or (asked.group(1) if asked else estimate))
    limit = int(err.get("n_ctx") or (ctx.group(1) if ctx else 0))
    told = f"of {limit:,} tokens" if limit else f"(we assumed {n_ctx:,} tokens)"
    return ContextOverflow(f"the prompt ({prompt:,} tokens) overflows the model server's context {told}", prompt, limit)
