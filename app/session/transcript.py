"""Events as terminal text: for the `.cast` recording (ANSI) and headless progress lines (plain).

Everything that came from the model or the sandbox is made inert first: escape sequences and
other control characters are shown as text (`^[`, `\\x07`), never sent to a terminal live.
"""

from __future__ import annotations

import re

from sandshell.session import events as ev

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(text: str) -> str:
    """Make control characters visible: ESC becomes `^[`, others `\\xNN`; newlines and tabs stay."""
    return _CONTROL.sub(lambda m: "^[" if m.group() == "\x1b" else f"\\x{ord(m.group()):02x}", text)


RESET, DIM, BOLD = "\x1b[0m", "\x1b[2m", "\x1b[1m"
GREEN, RED, YELLOW, CYAN, MAGENTA = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[36m", "\x1b[35m"


def _paint(text: str, *styles: str, color: bool) -> str:
    return "".join(styles) + text + RESET if color and styles else text


def render(event: ev.Event, color: bool = True) -> str:
    """The text an event adds to the transcript ('' for events that show nothing)."""
    c = color
    if isinstance(event, ev.SessionStarted):
        return _paint(f"sandshell session {event.session_id} · {event.model} · {event.profile}\n", BOLD, color=c)
    if isinstance(event, ev.TurnStarted):
        line = f"── turn {event.turn} · prompt {event.prompt_tokens}/{event.n_ctx} tokens ──"
        return "\n" + _paint(line, DIM, color=c) + "\n"
    if isinstance(event, ev.ModelText):
        return _paint(inert(event.text), CYAN, color=c)
    if isinstance(event, ev.ModelReplied):
        tail = f"\n[answer not valid: {inert(event.error)}]" if event.error else ""
        return "\n" + (_paint(tail.strip(), YELLOW, color=c) + "\n" if tail else "")
    if isinstance(event, ev.ApprovalNeeded):
        return _paint(f"[waiting for approval] {inert(event.action.summary(200))}", MAGENTA, color=c) + "\n"
    if isinstance(event, ev.ActionStarted):
        a = event.action
        who = " (you)" if event.by_user else ""
        note = _paint(f"# {inert(a.comment)}\n", DIM, color=c) if a.comment else ""
        if a.kind == "bash":
            return note + _paint(f"{event.prompt}{who} ", GREEN, BOLD, color=c) + inert(a.arg) + "\n"
        return note + _paint(f"[{a.kind}] {inert(a.summary(200))}", MAGENTA, color=c) + "\n"
    if isinstance(event, ev.OutputChunk):
        text = inert(event.data)
        return _paint(text, RED, color=c) if event.stream == "stderr" else text
    if isinstance(event, ev.ActionFinished):
        if event.result is not None:
            r = event.result
            ended = "" if r.output_bytes == 0 or _ends_with_newline(r) else "\n"
            if r.ok and not r.restarted and not r.notice:
                return ended
            return ended + _paint(f"[{inert(r.status_line())}]", YELLOW, color=c) + "\n"
        return _paint(f"  → {inert(event.summary)}", DIM if event.ok else YELLOW, color=c) + "\n"
    if isinstance(event, ev.Notice):
        style = RED if event.level == "error" else YELLOW if event.level == "warning" else DIM
        return _paint(f"[{event.level}] {inert(event.text)}", style, color=c) + "\n"
    if isinstance(event, ev.ConfigChanged):
        return _paint(f"[config] {event.before} → {event.after}", MAGENTA, color=c) + "\n"
    if isinstance(event, ev.SessionEnded):
        text = f"\nsession {event.status}" + (f": {inert(event.result)}" if event.result else "")
        text += f" ({inert(event.error)})" if event.error else ""
        return _paint(text + f" · {event.turns} turns · {event.seconds:.1f}s", BOLD, color=c) + "\n"
    return ""


def _ends_with_newline(r: object) -> bool:
    output = getattr(r, "output", "")
    return bool(output) and output.endswith("\n")
