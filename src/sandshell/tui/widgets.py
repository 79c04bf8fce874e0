"""The UI's pieces: the status bar, the side panel with the model's world, the prompt bar."""

from __future__ import annotations

import time

from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Log, Static

from sandshell.model.actions import Action

LOADING = "loading model…"
WRITING = ("evaluating prompt", "generating")  # the model is at work on its answer


class StatusBar(Static):
    """Model · profile · context · last turn's speed · turn · what happens now, for how long."""

    DEFAULT_CSS = """
    StatusBar { height: 1; background: $primary-background; color: $text; padding: 0 1; }
    """
    STYLES = {
        "generating": "bold cyan",
        "evaluating prompt": "bold cyan",
        "running a command": "bold green",
        "paused": "bold yellow",
        "waiting for approval": "bold magenta",
    }

    def __init__(self) -> None:
        super().__init__(id="status")
        self.model = LOADING
        self.profile = ""
        self.context = ""
        self.speed = ""
        self.turn = 0
        self.approval = False
        self.replay = False  # a recording played back, not a live session: said by a badge
        self.state = "starting"
        self.detail = ""  # how far the state is, e.g. the prompt's tokens evaluated of those to evaluate
        self.since = time.monotonic()
        self._shown = ""

    def set_state(self, state: str) -> None:
        if state != self.state:
            self.state, self.since, self.detail = state, time.monotonic(), ""

    def refresh_bar(self) -> None:
        parts = [f"sandshell · {self.model}", self.profile]
        if self.context:
            parts.append(f"ctx {self.context}")
        if self.speed:
            parts.append(self.speed)
        parts.append(f"turn {self.turn}")
        elapsed = "" if self.state in ("done", "starting") else f" {time.monotonic() - self.since:.0f}s"
        elapsed = f" {self.detail}{elapsed}" if self.detail else elapsed
        key = " · ".join(p for p in parts if p) + f"{self.approval}{self.replay}{self.state}{elapsed}"
        if key == self._shown:
            return  # redrawn only when something shown changed (the flush timer calls this 30 times a second)
        self._shown = key
        text = Text()
        if self.replay:  # first: a long bar is cut at the terminal's edge
            text.append(" REPLAY ", style="bold reverse cyan")
            text.append(" ")
        text.append(" · ".join(p for p in parts if p) + "  ")
        if self.approval:
            text.append(" APPROVAL ", style="bold reverse magenta")
            text.append(" ")
        text.append(f"[{self.state}{elapsed}]", style=self.STYLES.get(self.state, "bold"))
        self.update(text)


class WorldPanel(VerticalScroll):
    """The goal, /app/system.md and /app/config.json; what changed last turn is marked."""

    DEFAULT_CSS = """
    WorldPanel { width: 42; border-left: solid $primary; padding: 0 1; }
    WorldPanel > .title { color: $accent; text-style: bold; margin-top: 1; }
    WorldPanel > .title.changed { color: $warning; }
    WorldPanel > .body { color: $text-muted; }
    WorldPanel > #problems { color: $error; }
    """

    PARTS = (("goal", "goal"), ("system", "/app/system.md"), ("config", "/app/config.json"))

    def compose(self) -> ComposeResult:
        for key, title in self.PARTS:
            yield Static(title, id=f"{key}-title", classes="title")
            yield Static("…", id=f"{key}-body", classes="body")
        yield Static("", id="problems")

    def show(self, values: dict[str, str], changed: tuple[str, ...], problems: tuple[str, ...]) -> None:
        for key, title in self.PARTS:
            label = self.query_one(f"#{key}-title", Static)
            label.set_class(key in changed, "changed")
            label.update(title + ("  ● changed" if key in changed else ""))
            body = values.get(key, "").strip() or "(empty)"
            if len(body) > 1500:
                body = body[:1500] + "…"
            self.query_one(f"#{key}-body", Static).update(Text(body))
        self.query_one("#problems", Static).update(Text("\n".join(problems)))


class ModelLine(Static):
    """The model's answer as it is generated."""

    DEFAULT_CSS = """
    ModelLine { height: auto; max-height: 8; color: $accent; padding: 0 1; display: none; }
    ModelLine.active { display: block; }
    """


# The log's gutter: the first character of every line says what the line is, so a fast plain-text
# Log can still colour it (the highlighter runs only on the lines on screen).
OUT, ERR, PROMPT, COMMENT, FILE, WARN, FAIL, INFO, RULE = " ", "▍", "❯", "#", "◆", "!", "✗", "·", "─"
GUTTER_STYLES = {
    ERR: "red",
    PROMPT: "bold green",
    COMMENT: "dim italic",
    FILE: "magenta",
    WARN: "yellow",
    FAIL: "bold red",
    INFO: "dim",
    RULE: "dim",
}


class ShellHighlighter(Highlighter):
    """Colours a log line by its gutter character; a prompt line also gets its command in bold."""

    def highlight(self, text: Text) -> None:
        plain = text.plain
        if not plain:
            return
        style = GUTTER_STYLES.get(plain[0])
        if plain[0] == PROMPT:
            cut = plain.find(" #", 2)
            cut = plain.find(" $", 2) if cut < 0 else cut
            end = cut + 2 if cut >= 0 else len(plain)
            text.stylize("bold green", 0, end)
            text.stylize("bold", end)
        elif style:
            text.stylize(style)


class ShellLog(Log):
    """The main pane: a bounded plain-text log with a gutter; cheap to append to in floods.

    It follows new output unless the user scrolled up. Textual's own auto-scroll follows only
    while the offset equals the end, which stops being true whenever the pane shrinks (a
    resize, the model's line or the approval bar appearing), so the pane tracks the user's
    intent instead: `following` changes only when the scroll position does.
    """

    def __init__(self, max_lines: int) -> None:
        super().__init__(highlight=True, max_lines=max_lines, auto_scroll=False, id="log")
        self.highlighter = ShellHighlighter()
        self.following = True
        self.unseen = 0  # lines written while the user was scrolled up

    def add(self, gutter: str, text: str) -> None:
        self.add_lines(gutter, text.split("\n"))

    def add_lines(self, gutter: str, lines: list[str]) -> None:
        self.write_lines([f"{gutter} {line}" for line in lines], scroll_end=False)
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        else:
            self.unseen += len(lines)

    def follow(self) -> None:
        """Back to the live end (the End key)."""
        self.following = True
        self.scroll_end(animate=False, immediate=True, x_axis=False)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.following = new_value >= self.max_scroll_y
        if self.following:
            self.unseen = 0

    def on_resize(self) -> None:
        if self.following:
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True, x_axis=False)


class ApprovalBar(Vertical):
    """The action waiting for approval, whole (scrollable when long), and the keys that answer it."""

    MAX_CHARS = 100_000  # a 1 MiB write is shown up to here; `e` edits all of it

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="approval-scroll"):
            yield Static(id="approval-action")
        yield Static("y approve · e edit · r reject with a reason · ↑↓ PgUp PgDn scroll", id="approval-keys")

    def ask(self, a: Action) -> None:
        if a.kind == "bash":
            timeout = f" (timeout {a.timeout:g} s)" if a.timeout else ""
            text = f"run this command{timeout}?\n{a.arg}"
        elif a.kind == "write":
            text = f"write {len(a.content):,} characters to {a.arg}?\n{a.content}"
        elif a.kind == "read":
            text = f"read {a.arg}?"
        else:
            text = f"end the session with this result?\n{a.arg}"
        if len(text) > self.MAX_CHARS:
            text = text[: self.MAX_CHARS] + f"\n… {len(text) - self.MAX_CHARS:,} more characters not shown"
        self.query_one("#approval-action", Static).update(Text(text))
        self.add_class("active")
        scroll = self.query_one("#approval-scroll", VerticalScroll)
        scroll.scroll_home(animate=False)
        scroll.focus()  # arrows and page keys scroll it; y, e and r still answer

    def close(self) -> None:
        self.remove_class("active")
        if self.screen.focused is self.query_one("#approval-scroll"):
            self.screen.set_focus(self.screen.query_one("#log"))  # the keys scroll the shell again


class MoreBelow(Static):
    """Shown while the user is scrolled up and new output arrives: how much, and how to get back."""

    def show(self, log: ShellLog) -> None:
        waiting = not log.following and log.unseen > 0
        if waiting:
            self.update(f"▼ {log.unseen:,} new lines below · End follows the live output")
        self.set_class(waiting, "active")
