"""Starting the UI on a live session or a recorded one."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.model.types import Backend
from sandshell.session import events as ev
from sandshell.session.control import Control
from sandshell.tui.app import SandshellApp
from sandshell.tui.buffer import UIBuffer


def live_app(
    settings: Settings, goal: str | None = None, control: Control | None = None, backend: Backend | None = None
) -> SandshellApp:
    """The app for a live session (the same factory serves the CLI and the tests; `backend`: a model
    already made, instead of the one the settings name)."""
    from sandshell.runner import SessionSpec, open_session
    from sandshell.sandbox.engine import copies_back

    def runner(buffer: UIBuffer, control: Control) -> None:
        def say(message: str) -> None:
            buffer.emit(ev.Notice("info", message))

        spec = SessionSpec(settings, goal, backend=backend, sinks=[buffer], control=control, log=say)
        with contextlib.suppress(Exception), open_session(spec) as session:  # a failed start: said to every sink
            app.recording = session.folder
            if copies_back(settings.sandbox):
                app.sync_workspace = session.sandbox.sync_workspace
                app.call_from_thread(app.refresh_bindings)
            say(f"recording to {session.folder}")
            session.run()

    app = SandshellApp(runner, control or Control(approval=settings.session.approval), max_lines=settings.ui.max_lines)
    return app


def replay_app(folder: Path, speed: float = 1.0, max_lines: int = 5000) -> SandshellApp:
    """The app showing a recorded session at its pace (or `speed` times faster)."""
    from sandshell.session.replay import play

    def runner(buffer: UIBuffer, control: Control) -> None:
        play(folder, buffer, control, speed)

    return SandshellApp(runner, Control(), max_lines=max_lines, title=f"replay of {folder.name}", replaying=True)


def quiet_gc() -> None:
    """Fewer, cheaper garbage collections while the UI runs: objects alive at start are frozen out
    of the scans, and a full scan waits for far more allocations. A flood allocates an event per
    chunk on the session thread; with Python's defaults the full scans it triggers stall the
    UI's loop for 100-200 ms, and key presses wait (docs/benchmarks.md)."""
    gc.freeze()
    gc.set_threshold(50_000, 50, 1000)


def run_app(app: SandshellApp) -> None:
    """Run the UI until it ends. SIGTERM and SIGHUP (a closed terminal) end it as `q` does: the
    session stops, its container is removed and its recording gets its end event."""

    def quit_(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            let_go_of_the_terminal(app)
        try:
            asyncio.get_running_loop().call_soon_threadsafe(app.call_later, app.action_quit_session)
        except RuntimeError:  # not in the UI's loop yet, or any more
            raise KeyboardInterrupt from None

    before = {sig: signal.signal(sig, quit_) for sig in (signal.SIGTERM, signal.SIGHUP)}
    quiet_gc()
    try:
        app.run()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def let_go_of_the_terminal(app: SandshellApp, session_wait: float = 30.0, ui_wait: float = 3.0) -> None:
    """The terminal is gone (SIGHUP): what the UI still writes goes nowhere, instead of failing.
    Textual's writer thread died on the first write to a hung-up terminal, and the UI's own exit then
    waited for ever to queue its goodbye to it (deaf to SIGTERM, its loop blocked: a closed window,
    `tmux kill-session`). Should the exit still hang, the process ends once the session
    has (its container removed, its recording closed), or after `session_wait` seconds."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)

    def end_when_the_session_has() -> None:
        deadline = time.monotonic() + session_wait
        while time.monotonic() < deadline and not all(w.is_finished for w in list(app.workers)):
            time.sleep(0.1)
        time.sleep(ui_wait)  # the UI's own exit first, when it can
        os._exit(128 + signal.SIGHUP)

    threading.Thread(target=end_when_the_session_has, name="sandshell-hangup", daemon=True).start()


def require_terminal(why: str = "the sandshell UI needs a terminal; run it in one, or use --headless") -> None:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise SandshellError(why)
