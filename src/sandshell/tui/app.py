"""The terminal UI: a model living in a shell, live. A consumer of session events, nothing more."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Input, TextArea

from sandshell.model.actions import Action
from sandshell.session import events as ev
from sandshell.session.control import Control
from sandshell.tui.buffer import UIBuffer
from sandshell.tui.keys import KEYS
from sandshell.tui.steering import Steering
from sandshell.tui.widgets import (
    COMMENT,
    ERR,
    FAIL,
    FILE,
    INFO,
    LOADING,
    OUT,
    PROMPT,
    RULE,
    WARN,
    ApprovalBar,
    ModelLine,
    MoreBelow,
    ShellLog,
    StatusBar,
    WorldPanel,
)

Runner = Callable[[UIBuffer, Control], None]
FLUSH_HZ = 30
MAX_LINE_CHARS = 2000
PANEL_MIN_WIDTH = 110  # below this the side panel gives way to the shell (80 columns: 76 for the shell)


class SandshellApp(Steering, App[None]):
    """Shows one session (live or replayed); keys steer it through a Control."""

    TITLE = "sandshell"
    AUTO_FOCUS = "#log"  # scrolling keys work at once; the app's own keys are not the log's
    CSS_PATH = "app.tcss"
    BINDINGS = KEYS

    def __init__(
        self, runner: Runner, control: Control, max_lines: int = 5000, title: str = "", replaying: bool = False
    ) -> None:
        super().__init__()
        self.replaying = replaying
        self.recording: Path | None = None  # the session folder, once it started
        self.sync_workspace: Callable[[], str] | None = None  # copies /app back (an engine elsewhere)
        self.edit_path = ""
        self.runner = runner
        self.control = control
        self.buffer = UIBuffer()
        self.max_lines = max_lines
        self.pending: Action | None = None  # the action waiting for approval
        self.approved: Action | None = None  # the last one asked about
        self.asking: str | None = None  # hint, take_over, edit, reject
        self.ended: ev.SessionEnded | None = None
        self.model_text = ""
        self.skipped_lines = 0
        self.skipped_chars = 0
        self.queued = 0  # commands typed with t that have not run yet
        self.panel_wanted: bool | None = None  # None: shown when the terminal is wide enough; g decides
        self.panel_told = False  # the log said once how to get a hidden panel back
        self.panel_placed = False
        if title:
            self.sub_title = title

    def compose(self) -> ComposeResult:
        yield StatusBar()
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield ShellLog(self.max_lines)
                yield MoreBelow(id="more")
                yield ModelLine(id="model")
                yield ApprovalBar(id="approval")
                yield Input(id="ask")
                yield TextArea(id="content")
            yield WorldPanel(id="world")
        yield Footer()

    def on_mount(self) -> None:
        self.status = self.query_one(StatusBar)
        self.log_view = self.query_one(ShellLog)
        self.more = self.query_one(MoreBelow)  # held: the flush timer may fire while the app unmounts
        self.status.approval, self.status.replay = self.control.approval, self.replaying
        self.status.refresh_bar()
        self.set_interval(1 / FLUSH_HZ, self.flush)
        self._place_panel()
        self.run_session()

    def on_resize(self) -> None:
        if self.panel_placed:  # (a first resize may come before on_mount)
            self._place_panel()

    def _place_panel(self) -> None:
        """The side panel is shown when wide enough, unless `g` said otherwise; the shell keeps the width."""
        wide = self.size.width >= PANEL_MIN_WIDTH
        shown = wide if self.panel_wanted is None else self.panel_wanted
        self.query_one(WorldPanel).display = shown
        self.panel_placed = True
        if not shown and self.panel_wanted is None and not self.panel_told:
            self.panel_told = True
            why = f"the side panel (goal, system.md, config.json) is hidden below {PANEL_MIN_WIDTH} columns; g shows it"
            width = max(30, self.size.width - 6)  # the pane's width to be: it may not be laid out yet
            self.log_view.add(INFO, textwrap.fill(why, width, subsequent_indent="  "))

    def action_panel(self) -> None:
        self.panel_wanted = not self.query_one(WorldPanel).display
        self._place_panel()

    @work(thread=True, exit_on_error=False)
    def run_session(self) -> None:
        try:
            self.runner(self.buffer, self.control)
        except Exception as e:  # the runner reports user errors itself; this is a last resort
            self.buffer.emit(ev.Notice("error", f"the session stopped unexpectedly: {type(e).__name__}: {e}"))
            self.buffer.emit(ev.Phase("done"))

    def on_unmount(self) -> None:
        self.control.quit()  # whatever closes the app, the session thread stops too

    # -- events to screen (UI thread, bounded work a frame) -------------------------------------
    def flush(self) -> None:
        batch = self.buffer.drain()
        if batch.skipped_lines or batch.skipped_chars:
            self.skipped_lines += batch.skipped_lines
            self.skipped_chars += batch.skipped_chars
        run: list[str] = []  # consecutive lines of one stream go to the log in one write
        run_stream = ""
        for item in batch.items:
            if isinstance(item, tuple) and item[0] == run_stream:
                run.append(item[1])
                continue
            if run:
                self._lines(run_stream, run)
                run = []
            if isinstance(item, tuple):
                run_stream, run = item[0], [item[1]]
            else:
                run_stream = ""
                self._say_skipped()
                self.show(item)
        if run:
            self._lines(run_stream, run)
        self.more.show(self.log_view)
        self.status.refresh_bar()  # the current step's elapsed time

    def action_follow(self) -> None:
        self.log_view.follow()
        self.more.show(self.log_view)

    def _say_skipped(self) -> None:
        """After a flood: one line saying how much output was not drawn (the recording has it all)."""
        if self.skipped_lines or self.skipped_chars:
            what = f"{self.skipped_lines:,} lines"
            if self.skipped_chars:
                what += f" and {self.skipped_chars:,} characters"
            self._line(WARN, f"[… {what} of output were not drawn; the recording has them …]")
            self.skipped_lines = self.skipped_chars = 0

    def _lines(self, stream: str, lines: list[str]) -> None:
        clipped = [ln if len(ln) <= MAX_LINE_CHARS else ln[:MAX_LINE_CHARS] + "…" for ln in lines]
        self.log_view.add_lines(ERR if stream == "stderr" else OUT, clipped)

    def _line(self, gutter: str, text: str) -> None:
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + f"… (+{len(text) - MAX_LINE_CHARS:,} chars)"
        if gutter in (WARN, FAIL, INFO):  # messages are read whole: wrapped to the pane, never cut at its edge
            width = max(30, self.log_view.size.width - 5)
            text = "\n".join(textwrap.fill(p, width, subsequent_indent="  ") or p for p in text.split("\n"))
        self.log_view.add(gutter, text)

    def show(self, event: ev.Event) -> None:
        if isinstance(event, ev.SessionStarted):
            self.status.model, self.status.profile = event.model, event.profile
        elif isinstance(event, ev.TurnStarted):
            self.status.turn = event.turn
            self.status.context = f"{event.prompt_tokens}/{event.n_ctx}"
            self._line(RULE, f"turn {event.turn} " + "─" * 40)
            self.status.set_state("evaluating prompt")
        elif isinstance(event, ev.PromptProgress):  # a slow machine does not look frozen
            self.status.set_state("evaluating prompt")
            self.status.detail = f"{event.done:,}/{event.total:,} tokens"
        elif isinstance(event, ev.ModelText):
            self.model_text += event.text
            line = self.query_one("#model", ModelLine)
            line.add_class("active")
            line.update(Text(self.model_text[-600:]))
            if self.status.state == "evaluating prompt":
                self.status.set_state("generating")
        elif isinstance(event, ev.ModelReplied):
            self.model_text = ""
            self.query_one("#model", ModelLine).remove_class("active")
            if event.error:
                self._line(WARN, f"[answer not valid: {event.error}] {event.text[:300]}")
            st = event.stats
            if st.completion_tokens and st.ttft > 0 and st.tokens_per_second:  # a real generation, not a script
                self.status.speed = f"first token {st.ttft:.2f}s · {st.tokens_per_second:.0f} tok/s"
        elif isinstance(event, ev.ApprovalNeeded) and not event.answered:
            self._approval(event.action)
        elif isinstance(event, ev.ActionStarted | ev.ActionFinished):
            if self.pending is not None:  # answered elsewhere (a rerun answers as the recording did)
                self.pending = None
                self.query_one(ApprovalBar).close()
                self.refresh_bindings()
            if isinstance(event, ev.ActionStarted):
                if event.by_user and self.queued:
                    self.queued -= 1
                    self.refresh_bindings()
                self._action(event)
            else:
                self._finished(event)
        elif isinstance(event, ev.StateRead):
            values = {"goal": event.goal, "system": event.system, "config": event.config}
            self.query_one(WorldPanel).show(values, event.changed, event.problems)
        elif isinstance(event, ev.ConfigChanged):
            self._line(FILE, f"[config] {event.before} → {event.after}")
        elif isinstance(event, ev.Notice):
            self._line({"error": FAIL, "warning": WARN}.get(event.level, INFO), f"[{event.level}] {event.text}")
        elif isinstance(event, ev.Phase):
            names = {
                "thinking": "evaluating prompt",
                "running": "running a command",
                "approval": "waiting for approval",
            }
            name = names.get(event.name, event.name)
            # `holding`, not `paused`: a step (s) lets a turn run while paused, and it shows what it does
            held = self.control.holding and name not in ("done", "waiting for approval")
            self.status.set_state("paused" if held else name)
        elif isinstance(event, ev.SessionEnded):
            self.ended = event
            self._line(PROMPT if event.status == "done" else WARN, f"{event.line()} — press q to quit")
            self.status.set_state(f"session {event.status}")
            if self.status.model == LOADING:  # it never loaded: the bar must not promise it still might
                self.status.model = "no model"
            self.refresh_bindings()
        if self.queued:  # x applies only while the model writes
            self.refresh_bindings()
        self.status.refresh_bar()

    def _approval(self, a: Action) -> None:
        if a.comment:
            self._line(COMMENT, a.comment)
        self._line(FILE, f"[waiting for approval] {a.summary(200)}")
        self.pending = self.approved = a
        self.query_one(ApprovalBar).ask(a)
        self.refresh_bindings()

    def _action(self, event: ev.ActionStarted) -> None:
        a = event.action
        if a.comment and a != self.approved:  # an approved action's comment was shown with the question
            self._line(COMMENT, a.comment)
        if a.kind == "bash":
            self._line(PROMPT, f"{event.prompt} {a.arg}" + ("   (you)" if event.by_user else ""))
        else:
            self._line(FILE, f"{a.kind} {a.arg if a.kind != 'write' else a.arg + f' ({len(a.content):,} chars)'}")

    def _finished(self, event: ev.ActionFinished) -> None:
        r = event.result
        if r is not None:
            if not r.ok or r.restarted or r.notice:
                self._line(FAIL if (r.timed_out or r.lost) else WARN, f"[{r.status_line()}]")
        else:
            self._line(INFO if event.ok else WARN, f"→ {event.summary}")
