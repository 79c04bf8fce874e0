"""The keys that steer a session: pause, step, approval, hints, take-over, edit, quit, help.

A key that does not apply in the current state (replay, done, nothing to approve, not paused)
is hidden from the footer and does nothing; what the user types is never dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.widgets import Input, TextArea

from sandshell.model.actions import Action
from sandshell.session.control import Control, Decision
from sandshell.tui.keys import ASKS, STEERING
from sandshell.tui.widgets import WRITING, ApprovalBar, StatusBar

if TYPE_CHECKING:
    from textual.app import App

    from sandshell.session import events as ev

    _Base = App[None]
else:
    _Base = object


class Steering(_Base):
    """Mixed into the app: every key's action, and which keys apply now."""

    control: Control
    status: StatusBar
    pending: Action | None
    asking: str | None
    ended: ev.SessionEnded | None
    replaying: bool
    edit_path: str
    flush: Callable[[], None]
    sync_workspace: Callable[[], str] | None
    queued: int  # commands typed with t that have not run yet

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in STEERING and (self.ended is not None or (self.replaying and action != "pause")):
            return False  # a session that is over cannot be steered; a recording can only be paused
        if action in ("approve", "edit", "reject"):
            return self.pending is not None
        if action == "step":
            return self.control.paused
        if action == "cut_short":  # only while the model writes and a command of the user's waits
            return self.queued > 0 and self.status.state in WRITING
        if action == "sync":
            return self.sync_workspace is not None
        return True

    def action_sync(self) -> None:
        """Copy /app back now, in a thread (it waits for a running command); the sandbox says how it went."""
        if (sync := self.sync_workspace) is not None:
            self.run_worker(sync, thread=True, group="sync", exclusive=True)

    def action_pause(self) -> None:
        if self.ended is not None:
            return
        if self.control.paused:
            self.control.resume()
            self.status.set_state("resuming")
        else:
            self.control.pause()
            self.status.set_state("paused")  # the timer counts from the key press, not the phase before
        self.status.refresh_bar()
        self.refresh_bindings()

    def action_step(self) -> None:
        self.control.step()

    def action_approval(self) -> None:
        self.control.approval = not self.control.approval
        self.status.approval = self.control.approval
        self.status.refresh_bar()

    def action_approve(self) -> None:
        self._decide(Decision("approve"))

    def action_edit(self) -> None:
        if self.pending is not None:
            self._ask("edit", self.pending.arg)

    def action_reject(self) -> None:
        if self.pending is not None:
            self._ask("reject", "")

    def action_hint(self) -> None:
        self._ask("hint", "")

    def action_take_over(self) -> None:
        self._ask("take_over", "")

    def action_cut_short(self) -> None:
        if self.queued > 0 and self.status.state in WRITING:
            self.control.cut_short()
            self.notify("cutting the answer short: your command runs now")

    def action_help(self) -> None:
        from sandshell.tui.help import HelpScreen

        self.push_screen(HelpScreen())

    def _decide(self, decision: Decision) -> None:
        """Answer the pending approval once (a second key press must not answer the next one)."""
        if self.pending is not None:
            self.control.decide(decision)
            self.pending = None
            self.query_one(ApprovalBar).close()
            self.refresh_bindings()

    def _ask(self, what: str, value: str) -> None:
        self.asking = what
        box = self.query_one("#ask", Input)
        kind = self.pending.kind if self.pending is not None else ""
        box.placeholder = ASKS.get(f"{what}:{kind}", ASKS.get(what, ""))
        box.value = value
        box.add_class("active")
        box.focus()

    def action_cancel_input(self) -> None:
        for widget in (self.query_one("#ask", Input), self.query_one("#content", TextArea)):
            widget.remove_class("active")
        self.asking = None
        self.set_focus(self.query_one("#log"))  # the keys scroll the shell again

    def action_save_content(self) -> None:
        """ctrl+s in the content editor: the write goes ahead with the path and content as edited."""
        area = self.query_one("#content", TextArea)
        if self.asking == "edit:content" and self.pending is not None:
            a = self.pending
            self.action_cancel_input()
            self._decide(Decision("edit", action=Action("write", self.edit_path, area.text, a.comment)))

    def on_input_submitted(self, message: Input.Submitted) -> None:
        what, value = self.asking, message.value
        self.action_cancel_input()
        if what in ("hint", "take_over") and value.strip() and self.ended is not None:
            self.notify(f"not sent: the session has ended ({value})", severity="warning")
        elif what == "hint" and value.strip():
            self.control.hint(value)
            self.notify(f"hint queued: the model reads it at its next turn ({value})")
        elif what == "take_over" and value.strip():
            self.control.take_over(value)
            self.queued += 1
            if self.pending is not None:  # (the session waits on the decision: it runs right after)
                self.notify(f"queued: it runs once you decide on the action waiting for approval ({value})")
            elif self.status.state in WRITING:  # an answer takes tens of seconds on a slow machine: say so now
                self.notify(f"queued: it runs after the answer being written and its actions; x runs it now ({value})")
            elif self.status.state == "running a command":
                self.notify(f"queued: it runs when the running command ends ({value})")
            self.refresh_bindings()
        elif what == "edit" and self.pending is not None and self.pending.kind == "write":
            area = self.query_one("#content", TextArea)  # then the content, in a multi-line editor
            area.text, self.edit_path = self.pending.content, value
            area.border_title = f"content of {value} · ctrl+s writes it · esc cancels"
            self.asking = "edit:content"
            area.add_class("active")
            area.focus()
        elif what == "edit" and self.pending is not None:
            a = self.pending
            self._decide(Decision("edit", action=Action(a.kind, value, a.content, a.comment, a.timeout)))
        elif what == "reject":
            self._decide(Decision("reject", reason=value))

    def action_quit_session(self) -> None:
        self.control.quit()
        self.status.state = "quitting"
        self.status.refresh_bar()
        self.set_timer(0.05, self._exit_when_done)

    def _exit_when_done(self, waited: float = 0.0) -> None:
        if all(w.is_finished for w in self.workers) or waited > 10:
            self.flush()
            self.exit()
        else:
            self.set_timer(0.1, lambda: self._exit_when_done(waited + 0.1))
