"""Counting what the model repeats: the same action one after another, and the same whole answer
turn after turn (an answer of two alternating actions never repeats an action back to back)."""

from __future__ import annotations

from sandshell.model.actions import Action

Key = tuple[str, str, str]


class Repeats:
    """The two counts a session stops on (LLAMA_REPEAT_LIMIT), and the notes that warn the model."""

    def __init__(self) -> None:
        self.last_action: Key | None = None
        self.actions = 0  # the same action, one after another, across answers
        self.last_answer: tuple[Key, ...] = ()
        self.answers = 0  # the same whole answer, turn after turn

    def most(self) -> int:
        return max(self.actions, self.answers)

    def what(self, limit: int) -> str:
        """What reached `limit`: "action" or "answer"."""
        return "action" if self.actions >= limit else "answer"

    def forget(self) -> None:
        """After a nudge: the model gets a fresh count."""
        self.actions = self.answers = 0

    def answer(self, answer: list[Action]) -> tuple[str, str] | None:
        """Count a whole answer; once an answer of several actions repeats, a note for the model and
        a warning for the user (an answer of one action is the action's own count)."""
        key = tuple(a.key() for a in answer)
        self.answers = self.answers + 1 if key and key == self.last_answer else 1 if key else 0
        self.last_answer = key
        if self.answers < 2 or len(key) < 2:
            return None
        note = (
            f"Your whole answer is the same as your last {self.answers - 1} answer(s); its results will not "
            "change. Try something else."
        )
        return note, f"the model repeats its whole answer ({self.answers}x): {len(key)} actions"

    def action(self, action: Action) -> tuple[str, str] | None:
        """Count one action; once it follows itself, a note for the model and a warning for the user."""
        key = action.key()
        self.actions = self.actions + 1 if key == self.last_action else 1
        self.last_action = key
        if self.actions < 2:
            return None
        note = (
            f"You have now done this exact action {self.actions} times in a row; its result will not change. "
            "Try something else."
        )
        return note, f"the model repeats itself ({self.actions}x): {action.summary()}"
