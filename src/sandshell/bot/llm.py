"""The model with a conversation of its own: `ask` returns the parsed actions, `clear_history` forgets."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sandshell import config
from sandshell.config import ModelSettings, SandboxSettings
from sandshell.errors import ModelError
from sandshell.model import actions
from sandshell.model.turn import Model, Reply, make_backend
from sandshell.model.types import Backend, Message

log = logging.getLogger(__name__)

MAX_MESSAGE = 64 * 1024  # characters of one message
MAX_HISTORY = 200  # messages kept (the context window usually bounds it first)

FORMAT = (
    "Answer with a JSON list of 1 to 4 actions and nothing else. Each action has an optional "
    '"comment" first, then exactly one of: {"bash": "command"}, {"read": "/path"}, '
    '{"write": "/path", "content": "text"}, {"done": "the result"}.'
)


class LLM:
    """A backend (llama.cpp by default, as the settings say) and a bounded chat history.

    `ask(message)` returns the answer as a list of action objects (`[{"comment": ..., "bash":
    ...}]`, the format sessions use; a command's `timeout` above LLAMA_MAX_EXIT_TIMEOUT is
    lowered to it, as a session would run it) or raises ModelError when the answer is not valid actions
    (a failed answer is not kept in the history). The oldest exchanges are dropped when the
    history no longer fits the context window; the system prompt always stays."""

    def __init__(
        self,
        system_prompt: str,
        settings: ModelSettings | None = None,
        backend: Backend | None = None,
        with_format: bool = True,
        timeout_cap: float = SandboxSettings().max_exit_timeout,
    ) -> None:
        if not isinstance(system_prompt, str) or not system_prompt.strip():
            raise ModelError("the LLM needs a system prompt (a non-empty string)")
        self.settings = settings or config.load().model
        self.timeout_cap = timeout_cap  # the sandbox's SANDSHELL_MAX_EXIT_TIMEOUT: what a command may ask for
        self.backend = backend or make_backend(self.settings)
        self.model = Model(self.backend, self.settings)
        self.system_prompt = system_prompt.strip() + ("\n\n" + FORMAT if with_format else "")
        self.history: list[Message] = []

    @property
    def messages(self) -> list[Message]:
        return [{"role": "system", "content": self.system_prompt}, *self.history]

    def ask(self, message: str) -> list[dict[str, Any]]:
        """Send `message`, get the model's actions (parsed JSON), keep both in the history."""
        if not isinstance(message, str) or not message.strip():
            raise ModelError("ask() needs a message (a non-empty string)")
        if len(message) > MAX_MESSAGE:
            raise ModelError(f"the message is {len(message):,} characters; at most {MAX_MESSAGE:,} may be sent")
        turn: Message = {"role": "user", "content": message}
        messages = self._fit([*self.messages, turn])
        params = {**self.settings.sampling, "max_tokens": self.settings.max_tokens}
        reply = Reply("", error="no answer")
        for item in self.model.turn(messages, params):
            if isinstance(item, Reply):
                reply = item
        if reply.error:
            log.info("the model's answer did not parse: %s", reply.error)
            raise ModelError(f"the model's answer was not a list of actions: {reply.error}")
        cap = self.timeout_cap  # as a session would run it: what is returned is what would run
        found = [
            dataclasses.replace(a, timeout=cap) if a.timeout is not None and a.timeout > cap else a
            for a in reply.actions
        ]
        if found != reply.actions:
            log.info("a command's timeout was lowered to the limit, %gs (LLAMA_MAX_EXIT_TIMEOUT)", cap)
        reply.actions = found
        answer = actions.dumps(reply.actions)
        self.history += [turn, {"role": "assistant", "content": answer}]
        del self.history[: max(0, len(self.history) - MAX_HISTORY)]
        log.debug("asked %d characters, got %d action(s)", len(message), len(reply.actions))
        return [a.to_json() for a in reply.actions]

    def _fit(self, messages: list[Message]) -> list[Message]:
        """Drop the oldest exchanges until the prompt leaves room for the answer."""
        s = self.settings
        room = self.backend.n_ctx - s.max_tokens - s.context_margin
        while self.backend.count(messages) > room:
            if len(messages) <= 2:
                raise ModelError(
                    f"the system prompt and the message take more than the {room:,} tokens the context "
                    "leaves for them; send a shorter message or raise LLAMA_N_CTX"
                )
            dropped = messages[1:3]  # the oldest user message and its answer
            del messages[1:3]
            self.history = self.history[len(dropped) :]
            log.info("dropped the oldest exchange to fit the context window")
        return messages

    def clear_history(self) -> None:
        """Forget the conversation; the system prompt stays."""
        self.history.clear()


__all__ = ["LLM"]
