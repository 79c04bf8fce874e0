"""How a user steers a running session from another thread: pause, step, approve, hint, take over, quit."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sandshell.model.actions import Action
from sandshell.session.outcome import Status


@dataclass(frozen=True)
class Decision:
    """The user's answer to an approval request."""

    verdict: str  # approve, edit, reject
    action: Action | None = None  # the edited action, for edit
    reason: str = ""  # for reject


class Control:
    """Thread-safe switches the session checks between steps."""

    def __init__(self, approval: bool = False) -> None:
        self.approval = approval
        self._running = threading.Event()
        self._running.set()
        self._step = threading.Event()
        self._granted = False
        self._quit = threading.Event()
        self._cut = threading.Event()
        self._finish = threading.Event()
        self._hints: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._commands: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._decisions: queue.SimpleQueue[Decision] = queue.SimpleQueue()
        self._wake = threading.Condition()
        self.on_quit: list[Callable[[], None]] = []  # e.g. the sandbox's interrupt
        self.ending: tuple[Status, str] = ("quit", "the user quit")  # how a quit ends the session

    # -- called by the UI ----------------------------------------------------------------------
    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()
        self._poke()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def step(self) -> None:
        """Let one turn run while paused."""
        self._step.set()
        self._poke()

    def quit(self, status: Status = "quit", why: str = "the user quit") -> None:
        """End the session at its next step; `status` and `why` are how it ends (the first quit's)."""
        if not self._quit.is_set():
            self.ending = (status, why)
        self._quit.set()
        self._running.set()
        self._decisions.put(Decision("reject", reason="the user quit"))
        self._poke()
        for hook in list(self.on_quit):
            hook()

    def stop_after_turn(self, why: str = "the user stopped it after a turn") -> None:
        """End the session once the turn under way has run (nothing is interrupted), as a quit."""
        if not self._quit.is_set() and not self._finish.is_set():
            self.ending = ("quit", why)
        self._finish.set()
        self._running.set()
        self._poke()

    def hint(self, text: str) -> None:
        self._hints.put(text)

    def take_over(self, command: str) -> None:
        """Run `command` in the sandbox as the user; the model sees it and its output."""
        self._commands.put(command)
        self._poke()

    def cut_short(self) -> None:
        """Stop the answer being written so the commands the user typed run now; the model is asked again."""
        self._cut.set()
        self._poke()

    def decide(self, decision: Decision) -> None:
        self._decisions.put(decision)

    def _poke(self) -> None:
        with self._wake:
            self._wake.notify_all()

    # -- called by the session -----------------------------------------------------------------
    @property
    def answers_itself(self) -> bool:
        """Whether approvals are answered without the user (a rerun answers as its recording did)."""
        return False

    @property
    def quitting(self) -> bool:
        return self._quit.is_set()

    @property
    def holding(self) -> bool:
        """Paused, and not in a turn the user let run with a step."""
        return not self._running.is_set() and not self._granted

    def cut_requested(self) -> bool:
        """True once after `cut_short` while commands wait (a cut with nothing to run is dropped)."""
        if not self._cut.is_set():
            return False
        self._cut.clear()
        return not self._commands.empty()

    def next_move(self, timeout: float = 0.25) -> str:
        """What the session should do now: "quit", "commands" (the user typed some), "turn" or "idle"."""
        with self._wake:
            for _ in range(2):
                if self._quit.is_set() or self._finish.is_set():
                    return "quit"
                if not self._commands.empty():
                    return "commands"
                if self._running.is_set() or self._step.is_set():
                    self._granted = self._step.is_set()  # a step lets one whole turn run while paused
                    self._step.clear()
                    return "turn"
                self._wake.wait(timeout)
        return "idle"

    def user_commands(self) -> list[str]:
        return _drain(self._commands)

    def hints(self) -> list[str]:
        return _drain(self._hints)

    def await_decision(self) -> Decision:
        return self._decisions.get()


def _drain(q: queue.SimpleQueue[str]) -> list[str]:
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out
