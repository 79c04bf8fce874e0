"""What the model may do each turn, how its answer is parsed, and the grammar that makes it parse.

An answer is a JSON list of 1 to MAX_ACTIONS actions, each an object with an optional
"comment" first and then exactly one of:

    {"comment": "look around", "bash": "ls -la", "timeout": 30}
    {"read": "/app/goal"}
    {"write": "/app/notes.md", "content": "# Notes\\n"}
    {"done": "the result, in a sentence"}

Strings are JSON strings, so any command (quotes, backslashes, backticks, `$()`, newlines,
heredocs) is expressible and arrives unchanged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

MAX_ACTIONS = 4
PATH_BANNED = set('"\\{}[]')  # JSON debris a small model leaves in a path (`/app/note.txt}}] ]`)
Kind = Literal["bash", "read", "write", "done"]
KINDS: tuple[Kind, ...] = ("bash", "read", "write", "done")


class ParseError(ValueError):
    """The model's answer is not a list of actions; the message is written for the model."""


@dataclass(frozen=True)
class Action:
    """One thing the model asked for."""

    kind: Kind
    arg: str  # the command, the path, or the result
    content: str = ""  # for write
    comment: str = ""
    timeout: float | None = None  # for bash: a per-command override, capped by the settings

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.comment:
            out["comment"] = self.comment
        out[self.kind] = self.arg
        if self.kind == "write":
            out["content"] = self.content
        if self.kind == "bash" and self.timeout is not None:
            out["timeout"] = self.timeout
        return out

    def key(self) -> tuple[str, str, str]:
        """What makes two actions the same action (for the repeat detector)."""
        return (self.kind, self.arg, self.content)

    def summary(self, width: int = 80) -> str:
        text = {"bash": "$ ", "read": "read ", "write": "write ", "done": "done: "}[self.kind] + self.arg
        text = text.replace("\n", "⏎")
        return text if len(text) <= width else text[: width - 1] + "…"


def from_json(obj: Any) -> Action:
    """One action from a decoded JSON object; ParseError says what is wrong with it."""
    if not isinstance(obj, dict):
        raise ParseError(f"each action must be a JSON object, got {type(obj).__name__}")
    kinds = [k for k in KINDS if k in obj]
    if len(kinds) != 1:
        raise ParseError('each action needs exactly one of "bash", "read", "write" or "done"')
    kind = kinds[0]
    allowed = (
        {"comment", kind} | ({"content"} if kind == "write" else set()) | ({"timeout"} if kind == "bash" else set())
    )
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ParseError(f"unknown key(s) {', '.join(unknown)} in a {kind} action")
    arg, comment = obj[kind], obj.get("comment", "")
    if not isinstance(arg, str) or not isinstance(comment, str):
        raise ParseError(f'"{kind}" and "comment" must be strings')
    for key in (kind, "comment", "content"):
        if isinstance(obj.get(key), str) and (bad := _lone_surrogate(obj[key])):
            raise ParseError(f'"{key}" holds \\u{bad:04x}, half of a character: write the character itself')
    if kind in ("bash", "read", "write") and not arg.strip():
        raise ParseError(f'"{kind}" must not be empty')
    if kind in ("read", "write") and (len(arg) > 4096 or any(c in PATH_BANNED or is_control(c) for c in arg)):
        raise ParseError(
            f'"{kind}" must be a path of at most 4096 characters without quotes, backslashes, brackets or braces'
        )
    content = obj.get("content", "")
    if kind == "write" and not isinstance(content, str):
        raise ParseError('"content" must be a string')
    timeout = obj.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf
    ):  # json.loads takes NaN and Infinity: neither is a number of seconds
        raise ParseError('"timeout" must be a positive, finite number of seconds')
    return Action(kind, arg, content, comment, float(timeout) if timeout is not None else None)


def is_control(c: str) -> bool:
    return ord(c) < 32 or 0x7F <= ord(c) <= 0x9F


def _lone_surrogate(text: str) -> int:
    """The first lone surrogate in `text` (json.loads makes one of a stray `\\ud83d`), or 0."""
    return next((ord(c) for c in text if 0xD800 <= ord(c) <= 0xDFFF), 0)


def parse(text: str) -> list[Action]:
    """Parse an answer: the first JSON list (or single object) in `text`."""
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    if start < 0:
        raise ParseError("no JSON found: answer with a JSON list of actions")
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as e:
        raise ParseError(f"invalid JSON: {e.msg} at character {e.pos}") from None
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ParseError("the list of actions is empty")
    if len(items) > MAX_ACTIONS:
        raise ParseError(f"at most {MAX_ACTIONS} actions a turn")
    return [from_json(item) for item in items]


def salvage(text: str) -> list[Action]:
    """The complete actions at the start of an answer cut short (by max_tokens); [] if none.

    An action whose text was cut is dropped, never run half-written.
    """
    start = text.find("[")
    if start < 0:
        return []
    decoder = json.JSONDecoder()
    pos, out = start + 1, list[Action]()
    while len(out) < MAX_ACTIONS:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            obj, pos = decoder.raw_decode(text, pos)
            out.append(from_json(obj))
        except (json.JSONDecodeError, ParseError):
            break
    return out or _closed_done(text)


def _closed_done(text: str) -> list[Action]:
    """A lone "done" whose result was cut: closing it loses only the end of a sentence."""
    for suffix in ('"}]', "}]", '"]'):
        try:
            found = parse(text + suffix)
        except ParseError:
            continue
        if len(found) == 1 and found[0].kind == "done":
            return found
    return []


def dumps(actions: list[Action]) -> str:
    """The canonical text of an answer (what the model's history shows)."""
    return json.dumps([a.to_json() for a in actions], ensure_ascii=False)


# A lean GBNF: fixed key order, one small string rule. Far cheaper to apply than a grammar
# compiled from a JSON schema; it bans nothing a JSON string can hold, except in a path, where
# quotes, escapes, brackets and braces are JSON debris, never part of the file name.
GRAMMAR = r"""
root    ::= "[" ws action (ws "," ws action){0,3} ws "]"
action  ::= "{" ws comment? (bash | read | write | done) ws "}"
comment ::= "\"comment\"" ws ":" ws string ws "," ws
bash    ::= "\"bash\"" ws ":" ws string (ws "," ws "\"timeout\"" ws ":" ws number)?
read    ::= "\"read\"" ws ":" ws path
write   ::= "\"write\"" ws ":" ws path ws "," ws "\"content\"" ws ":" ws string
done    ::= "\"done\"" ws ":" ws string
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
path    ::= "\"" [^"\\\x00-\x1f{}\[\]]+ "\""
number  ::= [1-9] [0-9]{0,3}
ws      ::= [ \t\n]{0,2}
"""


def grammar(comment_chars: int = -1) -> str:
    """The grammar, with the comment capped at `comment_chars` characters (0: no comment; -1: no cap)."""
    if comment_chars < 0:
        return GRAMMAR
    if comment_chars == 0:
        return GRAMMAR.replace(" comment? ", " ")
    capped = f'comment ::= "\\"comment\\"" ws ":" ws "\\"" char{{0,{comment_chars}}} "\\"" ws "," ws'
    return "\n".join(capped if line.startswith("comment ") else line for line in GRAMMAR.split("\n"))
