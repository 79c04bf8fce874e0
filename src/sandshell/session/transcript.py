"""Events as terminal text: for the `.cast` recording (ANSI) and headless progress lines (plain).

Every event is made inert first (`sandshell.safe_text.shown`): escape sequences and other control
characters from the model or the sandbox are shown as text (`^[`, `\\x07`), never sent to a
terminal live.
"""

from __future__ import annotations

from sandshell.safe_text import shown
from sandshell.session import events as ev

RESET, DIM, BOLD = "\x1b[0m", "\x1b[2m", "\x1b[1m"
GREEN, RED, YELLOW, CYAN, MAGENTA = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[36m", "\x1b[35m"


def _paint(text: str, *styles: str, color: bool) -> str:
    return "".join(styles) + text + RESET if color and styles else text


def render(event: ev.Event, color: bool = True) -> str:
    """The text an event adds to the transcript ('' for events that show nothing)."""
    c = color
    event = shown(event)
    if isinstance(event, ev.SessionStarted):
        return _paint(f"sandshell session {event.session_id} · {event.model} · {event.profile}\n", BOLD, color=c)
    if isinstance(event, ev.TurnStarted):
        line = f"── turn {event.turn} · prompt {event.prompt_tokens}/{event.n_ctx} tokens ──"
        return "\n" + _paint(line, DIM, color=c) + "\n"
    if isinstance(event, ev.ModelText):
        return _paint(event.text, CYAN, color=c)
    if isinstance(event, ev.ModelReplied):
        tail = f"\n[answer not valid: {event.error}]" if event.error else ""
        return "\n" + (_paint(tail.strip(), YELLOW, color=c) + "\n" if tail else "")
    if isinstance(event, ev.ApprovalNeeded):
        if event.answered:
            return _paint(f"[approval: the recorded verdict answers] {event.action.summary(200)}", DIM, color=c) + "\n"
        return _paint(f"[waiting for approval] {event.action.summary(200)}", MAGENTA, color=c) + "\n"
    if isinstance(event, ev.ActionStarted):
        a = event.action
        who = " (you)" if event.by_user else ""
        note = _paint(f"# {a.comment}\n", DIM, color=c) if a.comment else ""
        if a.kind == "bash":
            return note + _paint(f"{event.prompt}{who} ", GREEN, BOLD, color=c) + a.arg + "\n"
        return note + _paint(f"[{a.kind}] {a.summary(200)}", MAGENTA, color=c) + "\n"
    if isinstance(event, ev.OutputChunk):
        text = event.data
        return _paint(text, RED, color=c) if event.stream == "stderr" else text
    if isinstance(event, ev.ActionFinished):
        if event.result is not None:
            r = event.result
            ended = "" if r.output_bytes == 0 or _ends_with_newline(r) else "\n"
            if r.ok and not r.restarted and not r.notice:
                return ended
            return ended + _paint(f"[{r.status_line()}]", YELLOW, color=c) + "\n"
        return _paint(f"  → {event.summary}", DIM if event.ok else YELLOW, color=c) + "\n"
    if isinstance(event, ev.Notice):
        style = RED if event.level == "error" else YELLOW if event.level == "warning" else DIM
        return _paint(f"[{event.level}] {event.text}", style, color=c) + "\n"
    if isinstance(event, ev.ConfigChanged):
        return _paint(f"[config] {event.before} → {event.after}", MAGENTA, color=c) + "\n"
    if isinstance(event, ev.SessionEnded):
        return _paint("\n" + event.line(), BOLD, color=c) + "\n"
    return ""


def _ends_with_newline(r: object) -> bool:
    output = getattr(r, "output", "")
    return bool(output) and output.endswith("\n")
