"""The keys of the UI and what the footer calls them."""

from __future__ import annotations

from textual.binding import Binding, BindingType

KEYS: list[BindingType] = [
    Binding("p", "pause", "Pause/resume"),
    Binding("s", "step", "Step"),
    Binding("a", "approval", "Approval mode"),
    Binding("y", "approve", "Approve"),
    Binding("e", "edit", "Edit"),
    Binding("r", "reject", "Reject"),
    Binding("h", "hint", "Hint"),
    Binding("t", "take_over", "Take over"),
    Binding("x", "cut_short", "Run mine now"),
    Binding("w", "sync", "Copy /app back"),
    Binding("question_mark", "help", "Help"),
    Binding("q", "quit_session", "Quit"),
    Binding("ctrl+c", "quit_session", "Quit", show=False, priority=True),
    Binding("end", "follow", "Follow output", show=False),
    Binding("g", "panel", "Side panel", show=False),
    Binding("escape", "cancel_input", "Cancel", show=False),
    Binding("ctrl+s", "save_content", "Save", show=False),
]

# Keys that steer a live session: hidden in a replay and once the session is over.
STEERING = {"pause", "step", "approval", "approve", "edit", "reject", "hint", "take_over", "cut_short", "sync"}

# What the input bar asks for, by what it is for (and, for an edit, the kind of action edited).
ASKS = {
    "hint": "a hint for the model",
    "take_over": "a command to run as you",
    "edit:bash": "the command to run instead",
    "edit:read": "the path to read instead",
    "edit:write": "the path to write (enter: then its content)",
    "reject": "why (the model will see it)",
}

# The help screen: every key, and what the panes mean.
HELP = """\
[b]Keys[/b]
  p        pause / resume (pausing stops the answer being written; resume asks again)
  s        step: while paused, let one turn run
  a        approval mode: ask before every action (shown as APPROVAL in the status bar)
  y e r    approve, edit or reject (with a reason) the action waiting for approval
           edit: a command, a read's path, a write's path and then its content
           (ctrl+s writes it, esc cancels)
  h        a hint the model reads at its next turn
  t        take over: run a command yourself; the model sees it and its output. Typed
           while the model writes, it waits for the answer's actions; x then cuts
           the answer short and runs it at once (the model is asked again after)
  w        copy /app back to the host folder now (only when the engine is elsewhere and
           the workspace travels as a copy; it also comes back at the end)
  g        show or hide the side panel (hidden by itself below 110 columns)
  End      back to the live output after scrolling up

[b]Focus[/b]
  The shell pane has the keys when the UI opens: ↑↓ PgUp PgDn Home scroll it. An action
  waiting for approval takes them (its bar scrolls) until it is answered; h, t, e and r
  open an input that has them until enter or esc. Tab and shift+tab move between the
  panes by hand; the letter keys above work wherever the focus is, except in an input.
  ?        this help            q / ctrl+c   quit (the container is removed)

[b]Panes[/b]
  main     the shell as the model lives it: ❯ prompt and command, output (stderr ▍ red),
           ◆ reads and writes, # the model's comments, ! warnings, ✗ failures
  model    the answer being written (below the shell, while the model writes)
  right    the model's world, read before each turn: its goal, /app/system.md and
           /app/config.json (● changed marks what it changed last turn)
  status   model · profile · context used · per turn: time to first token and tokens/s ·
           turn · what is happening now, for how long

In a replay only p (pause the playback), End, ? and q apply.
Press esc, q or ? to close this help."""
