"""Text from the model or the sandbox, made harmless where it reaches a person or a program.

Three boundaries, one function each:
- `visible` for what a terminal shows (the TUI, the `.cast`, stderr, the last words after quit):
  C0 and C1 controls, DEL, lone surrogates and the bidirectional overrides that reorder what a
  person reads become visible text (`^[`, `\\x07`, `\\u202e`, `\\udc80`); newlines and tabs stay.
  `shown(event)` applies it to every text an event carries, however deep.
- `json_line` for what a program reads (events.jsonl): JSON whose strings keep the exact text,
  with every control, DEL, C1 and surrogate escaped, so `cat` on it is as harmless as a reader.
- `for_model` for what a model backend is sent: text it can encode. A lone surrogate (a cwd that is
  not UTF-8, `cd $'/tmp/\xff'`, comes as its bytes surrogate-escaped) is written as the byte it
  stands for (`\xff`) or as its code (`\udc00`); an OpenAI-compatible request would raise on it and
  end the session.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from typing import Any, TypeVar

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# json.dumps escapes C0 itself; the rest would reach a terminal that `cat`s the file
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

T = TypeVar("T")


def _visible(m: re.Match[str]) -> str:
    c = m.group()
    if c == "\x1b":
        return "^["
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def visible(text: str) -> str:
    """`text` with nothing a terminal would act on: controls shown as text, newlines and tabs kept."""
    return _CONTROL.sub(_visible, text)


def for_model(text: str) -> str:
    """`text` as a model backend can send it: every lone surrogate written out as an escape."""
    return _SURROGATE.sub(_byte_or_code, text) if not text.isascii() else text


def _byte_or_code(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def shown(value: T) -> T:
    """A copy of an event (or any dataclass, tuple, list, dict or string) with every string made visible."""
    if isinstance(value, str):
        return visible(value)  # type: ignore[return-value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: shown(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)  # type: ignore[type-var]
    if isinstance(value, tuple | list):
        return type(value)(shown(v) for v in value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {shown(k): shown(v) for k, v in value.items()}  # type: ignore[return-value]
    return value


def json_line(data: Any) -> str:
    """One line of JSON, UTF-8 friendly, with every control and lone surrogate escaped."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def say(message: str) -> None:
    """One line to the user on stderr, as `sandshell: …`, made visible (it may quote the model)."""
    print(f"sandshell: {visible(message)}", file=sys.stderr, flush=True)
