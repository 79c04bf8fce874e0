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
    Binding("end", "follow", "Follow output", show=False),
    Binding("escape", "cancel_input", "Cancel", show=False),
]

# What the input bar asks for, by what it is for (and, for an edit, the kind of action edited).
ASKS = {
    "hint": "a hint for the model",
    "take_over": "a command to run as you",
    "edit:bash": "the command to run instead",
    "edit:read": "the path to read instead",
    "edit:write": "the content to write instead (the path stays)",
    "reject": "why (the model will see it)",
}
