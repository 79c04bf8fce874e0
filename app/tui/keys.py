"""The keys of the UI and what the footer calls them."""

from __future__ import annotations

from textual.binding import Binding, BindingType

KEYS: list[BindingType] = [
    Binding("p", "pause", "Pause/resume"),
    Binding("s", "step", "Step"),
    Binding("a", "approval", "Approval mode"),
    Binding("y", "approve", "Approve", show=False),
    Binding("e", "edit", "Edit", show=False),
    Binding("r", "reject", "Reject", show=False),
    Binding("h", "hint", "Hint"),
    Binding("t", "take_over", "Take over"),
    Binding("q", "quit_session", "Quit"),
    Binding("ctrl+c", "quit_session", "Quit", show=False, priority=True),
    Binding("escape", "cancel_input", "Cancel", show=False),
]
