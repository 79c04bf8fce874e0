"""A model turn: a backend's streamed text parsed into actions, with bounded retries.

`Model.turn` streams the text, then yields one `Reply`. `make_backend` picks the backend the
settings ask for (each is imported only when chosen, so nothing here needs llama.cpp).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sandshell.config import ModelSettings
from sandshell.errors import ModelError
from sandshell.model import actions
from sandshell.model.actions import Action, ParseError
from sandshell.model.types import Backend, Message, PromptProgress, Stats


@dataclass
class Reply:
    """One turn of the model: its text, its actions (or why there are none), and the stats."""

    text: str
    actions: list[Action] = field(default_factory=list)
    error: str | None = None
    stats: Stats = field(default_factory=Stats)
    attempts: int = 1
    notes: list[str] = field(default_factory=list)  # for the model's next observation


class Model:
    """A backend plus parsing and bounded retries."""

    def __init__(self, backend: Backend, settings: ModelSettings) -> None:
        self.backend = backend
        self.settings = settings

    def turn(
        self, messages: list[Message], params: dict[str, Any], score: Callable[[Reply], float] | None = None
    ) -> Iterator[str | Reply | PromptProgress]:
        """Stream the prompt's evaluation and the answer's text, then yield one Reply.

        With `best_of` N > 1 and a `score`, N answers are sampled (the prompt's KV cache is reused,
        only the answers are new) and the best scored one is given, its text all at once.
        """
        n = self.settings.best_of if score is not None else 1
        if n <= 1 or score is None:
            yield from self._attempts(messages, params)
            return
        best: tuple[float, Reply] | None = None
        total = Stats()
        for i in range(n):
            candidate = dict(params)
            if "seed" in candidate:  # a fixed seed would give the same answer N times
                candidate["seed"] = (int(candidate["seed"]) + i) % 2**31
            if i:  # each further sample a little hotter: a low temperature would give the same answer again
                candidate["temperature"] = min(1.5, float(params.get("temperature", 0.8)) + 0.3 * i)
            reply = next(r for r in self._attempts(messages, candidate) if isinstance(r, Reply))
            _add(total, reply.stats)
            value = score(reply)
            if best is None or value > best[0]:
                best = (value, reply)
            if value >= 0:  # nothing the checker dislikes: no need to pay for more samples
                break
        assert best is not None
        chosen = best[1]
        chosen.stats, chosen.notes = total, [*chosen.notes]
        yield chosen.text
        yield chosen

    def _attempts(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Reply | PromptProgress]:
        """One answer, asked again (a bounded number of times) while an unconstrained one does not parse."""
        retries = 0 if self.backend.constrained else self.settings.parse_retries
        convo = list(messages)
        total = Stats()
        text = ""
        for attempt in range(1, retries + 2):
            text = ""
            for item in self.backend.stream(convo, params):
                if isinstance(item, Stats):
                    _add(total, item)
                elif isinstance(item, PromptProgress):
                    yield item
                else:
                    text += item
                    yield item
            try:
                yield Reply(text, actions.parse(text), stats=total, attempts=attempt)
                return
            except ParseError as e:
                error = str(e)
            kept = actions.salvage(text)
            if kept:
                note = (
                    f"Your answer was cut off at {params.get('max_tokens', '?')} tokens; its {len(kept)} "
                    "complete action(s) ran and the unfinished one was dropped. Write shorter answers."
                )
                yield Reply(text, kept, stats=total, attempts=attempt, notes=[note])
                return
            if total.cut:
                error = (
                    f"the answer was cut off at {params.get('max_tokens', '?')} tokens before its first "
                    "action was complete; write shorter answers"
                )
            if attempt <= retries:
                yield f"\n[not parsed: {error}; asking again]\n"
                convo += [
                    {"role": "assistant", "content": text},
                    {
                        "role": "user",
                        "content": f"That did not parse: {error}. Answer with only a JSON list "
                        'of actions, e.g. [{"comment": "look", "bash": "ls"}].',
                    },
                ]
        yield Reply(text, error=error, stats=total, attempts=retries + 1)


def _add(total: Stats, s: Stats) -> None:
    if not total.prompt_tokens:
        total.prompt_tokens, total.cached_tokens, total.ttft = s.prompt_tokens, s.cached_tokens, s.ttft
    total.completion_tokens += s.completion_tokens
    total.seconds += s.seconds
    total.cut = s.cut


def make_backend(settings: ModelSettings) -> Backend:
    """The backend the settings ask for."""
    if settings.backend == "script":
        if not settings.script_path:
            raise ModelError("LLAMA_BACKEND=script needs LLAMA_SCRIPT, a JSONL file of actions")
        from sandshell.model.script import ScriptBackend

        return ScriptBackend.from_file(settings.path(settings.script_path), settings.n_ctx)
    if settings.backend == "openai":
        from sandshell.model.openai import OpenAIBackend

        backend: Backend = OpenAIBackend(settings)
        return backend
    from sandshell.model.llama import LlamaBackend

    return LlamaBackend(settings)
