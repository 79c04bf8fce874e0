"""sandshell: watch a local language model live inside a shell.

Rooms: `sandbox/` (the container and its agent), `model/` (backends, actions, the prompt),
`session/` (the loop, its events, recording and replay), `tui/` (the terminal UI), and the
front doors `cli` and `runner`. Shared by all: `config` (settings), `errors`, `resources`.
"""

__version__ = "0.1.0"
