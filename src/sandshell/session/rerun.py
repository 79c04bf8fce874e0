"""Running a recorded session again: the model's answers, and the user's part, in their order.

The script backend gives the model's answers back; `RerunControl` plays the user: their own
commands and hints come back before the turn they came before, and every approval is answered
as it was (a rejected action is rejected again with its reason, never run; an edited one runs
as edited).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from sandshell.model.actions import Action
from sandshell.session import events as ev
from sandshell.session.control import Control, Decision
from sandshell.session.replay import load

REJECTED = "[the user rejected this action: "
HINT = "hint sent: "


@dataclass
class Plan:
    answers: list[str] = field(default_factory=list)  # one JSON list of actions a line
    moves: list[tuple[str, str]] = field(default_factory=list)  # ("turn", ""), ("command", c), ("hint", h)
    decisions: list[Decision] = field(default_factory=list)  # one per action the model asked to run
    goal: str | None = None  # the goal the recorded session had (its first reading of the world)
    approval: bool = False  # whether the recorded session asked for approval at all


def plan(folder: Path) -> Plan:
    """What happened in a recording, in the order the session will need it."""
    p = Plan()
    turns = False  # answers before the first turn are the scripted intro
    asked: Action | None = None
    for _, event in load(folder):
        if isinstance(event, ev.StateRead) and p.goal is None:
            p.goal = event.goal
        if isinstance(event, ev.TurnStarted):
            turns = True
        elif isinstance(event, ev.ModelReplied) and turns and event.actions:
            p.answers.append(json.dumps([a.to_json() for a in event.actions], ensure_ascii=False))
            p.moves.append(("turn", ""))
        elif isinstance(event, ev.Notice) and event.text.startswith(HINT):
            p.moves.append(("hint", event.text[len(HINT) :]))
        elif isinstance(event, ev.ApprovalNeeded):
            asked, p.approval = event.action, True
        elif isinstance(event, ev.ActionStarted) and event.by_user:
            p.moves.append(("command", event.action.arg))
        elif isinstance(event, ev.ActionStarted) and turns and event.action.kind != "done":
            edited = asked is not None and event.action != asked
            p.decisions.append(Decision("edit", action=event.action) if edited else Decision("approve"))
            asked = None
        elif isinstance(event, ev.ActionFinished) and asked is not None and event.summary.startswith(REJECTED):
            p.decisions.append(Decision("reject", reason=event.summary[len(REJECTED) : -1]))
            asked = None
    return p


class RerunControl(Control):
    """A Control that answers for the user as the recording says; the real user may still quit or pause."""

    def __init__(self, p: Plan) -> None:
        super().__init__(approval=p.approval)  # asked only as the recording was: nothing waits otherwise
        self.moves = deque(p.moves)
        self.decisions = deque(p.decisions)

    def next_move(self, timeout: float = 0.25) -> str:
        while self.moves and self.moves[0][0] != "turn" and not self.quitting and not self.paused:
            kind, text = self.moves.popleft()
            if kind == "command":
                self.take_over(text)
                return "commands"
            self.hint(text)
        move = super().next_move(timeout)
        if move == "turn" and self.moves:
            self.moves.popleft()
        return move

    @property
    def answers_itself(self) -> bool:
        return True

    def await_decision(self) -> Decision:
        if self.quitting:
            return super().await_decision()
        return self.decisions.popleft() if self.decisions else Decision("approve")
