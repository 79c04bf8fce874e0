"""The model's own generation settings, read each turn from `/app/config.json` and validated.

Unknown keys, wrong types and out-of-range values are reported (to the model and the user) and
the last good configuration stays in force. Load-time and safety settings are refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Settings the model must never touch: load-time ones, and anything that would lift the
# constraint or a limit.
REFUSED = {
    "n_ctx",
    "model_path",
    "model",
    "grammar",
    "n_threads",
    "n_threads_batch",
    "n_batch",
    "n_gpu_layers",
    "use_mmap",
    "use_mlock",
    "chat_format",
    "stream",
    "logits_processor",
    "stop",
    "response_format",
    "exit_timeout",
    "timeout",
    "output_limit",
    "max_steps",
}


class GenerationConfig(BaseModel):
    """What `/app/config.json` may set; every field optional, bounds enforced."""

    model_config = ConfigDict(extra="forbid", strict=True)

    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, le=1000)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    typical_p: float | None = Field(default=None, gt=0.0, le=1.0)
    repeat_penalty: float | None = Field(default=None, ge=0.5, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    mirostat_mode: int | None = Field(default=None, ge=0, le=2)
    mirostat_tau: float | None = Field(default=None, ge=0.0, le=20.0)
    mirostat_eta: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    max_tokens: int | None = Field(default=None, ge=16)


STARTER = {"temperature": 0.7, "top_p": 0.95, "top_k": 40, "repeat_penalty": 1.1}


@dataclass
class ConfigRead:
    """The result of reading config.json this turn."""

    params: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    change: tuple[dict[str, Any], dict[str, Any]] | None = None


class ModelConfig:
    """Keeps the last good configuration; `update` validates a new text of config.json."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.good: dict[str, Any] = {}
        self.last_text: str | None = None

    def update(self, text: str | None, read_error: str | None = None) -> ConfigRead:
        if read_error and read_error != "missing":
            return ConfigRead(dict(self.good), [f"/app/config.json: {read_error}; keeping the last good settings"])
        if text is None or text == self.last_text:
            return ConfigRead(dict(self.good))
        self.last_text = text
        params, problems = self.validate(text)
        if problems:
            return ConfigRead(
                dict(self.good), [f"/app/config.json: {p}" for p in problems] + ["keeping the last good settings"]
            )
        before, self.good = self.good, params
        return ConfigRead(dict(params), change=(before, params) if before != params else None)

    def validate(self, text: str) -> tuple[dict[str, Any], list[str]]:
        try:
            raw = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as e:
            return {}, [f"invalid JSON ({e.msg}, line {e.lineno})"]
        if not isinstance(raw, dict):
            return {}, ["must be a JSON object of generation settings"]
        refused = sorted(k for k in raw if k in REFUSED)
        if refused:
            return {}, [f"{', '.join(refused)} cannot be changed from inside the sandbox"]
        try:
            cfg = GenerationConfig.model_validate(_ints_as_floats(raw))
        except ValidationError as e:
            return {}, [_describe(err) for err in e.errors()]
        params = cfg.model_dump(exclude_none=True)
        if params.get("max_tokens", 0) > self.max_tokens:
            return {}, [f"max_tokens may be at most {self.max_tokens}"]
        return params, []


def _ints_as_floats(raw: dict[str, Any]) -> dict[str, Any]:
    """Strict mode, except that 1 is a fine temperature."""
    floats = {n for n, f in GenerationConfig.model_fields.items() if "float" in str(f.annotation)}
    return {k: float(v) if k in floats and type(v) is int else v for k, v in raw.items()}


def _describe(err: Any) -> str:
    where = ".".join(str(p) for p in err.get("loc", ())) or "config"
    if err.get("type") == "extra_forbidden":
        return f"unknown setting {where!r}"
    return f"{where}: {err.get('msg', 'invalid')} (got {err.get('input')!r})"
