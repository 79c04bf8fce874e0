"""The model seam's shared types: chat messages, generation stats and the Backend protocol.

No native dependency here: events, recordings and replay import these without llama.cpp.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from sandshell.safe_text import for_model

Message = dict[str, str]


def sendable(messages: list[Message]) -> list[Message]:
    """`messages` as a backend can encode them: lone surrogates written out (`safe_text.for_model`)."""
    if all(m["content"].isascii() for m in messages):
        return messages
    return [{**m, "content": for_model(m["content"])} for m in messages]


@dataclass(frozen=True)
class PromptProgress:
    """Prompt tokens evaluated so far, of those to evaluate (the prefix reused from the cache is not counted)."""

    done: int
    total: int


@dataclass
class Stats:
    """How one generation went."""

    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens reused from the KV cache (not evaluated again)
    completion_tokens: int = 0
    ttft: float = 0.0  # seconds to the first token
    seconds: float = 0.0
    cut: bool = False  # stopped by max_tokens

    @property
    def tokens_per_second(self) -> float:
        gen = self.seconds - self.ttft
        return self.completion_tokens / gen if gen > 0 else 0.0


class Backend(Protocol):
    """Something that turns chat messages into streamed text."""

    name: str
    n_ctx: int

    @property
    def constrained(self) -> bool:
        """Whether every answer is guaranteed to parse."""
        ...

    def count(self, messages: list[Message]) -> int:
        """Tokens the prompt for `messages` takes."""
        ...

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats | PromptProgress]:
        """Yield text chunks, then one Stats."""
        ...
