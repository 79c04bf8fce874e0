"""Help for small models, each a setting: few-shot examples, best-of-N with a checker,
an error-fix loop, a nudge before a session is called stuck, and an intro that is not the model's move.

The loop asks the coach; with every setting off, the coach changes nothing the model sees.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Callable

from sandshell.config import ModelSettings
from sandshell.errors import SandshellError
from sandshell.model.actions import Action
from sandshell.model.context import Step, Turn
from sandshell.model.turn import Reply
from sandshell.session.types import SandboxLike

INTRO = [
    Action("read", "/app/goal", comment="first, read my goal"),
    Action("bash", "pwd && ls -la", comment="look at where I am"),
]
# Short on purpose: every token of the fixed prompt is evaluated on each new session.
FEW_SHOT = """
Examples of good answers:
Goal "Save the date into /app/d.txt": [{"bash": "date > /app/d.txt"}]
Goal "How many lines has /app/a.log?": [{"bash": "wc -l < /app/a.log"}]
Goal "Fix /app/t.py": [{"bash": "python3 /app/t.py"}] then, after its error, a command that fixes it
After the goal is reached: [{"done": "what you did"}]
"""
PATH = re.compile(r"(?<![>\w.~-])/[\w.+-]+(?:/[\w.+-]+)*")  # an absolute path not written to by `>`
UNSET = -1e9


class Coach:
    """What the settings ask for, around one session's loop."""

    def __init__(self, settings: ModelSettings, sandbox: SandboxLike, goal: Callable[[], str]) -> None:
        self.settings = settings
        self.sandbox = sandbox
        self.goal = goal
        self.seen: set[tuple[str, str, str]] = set()
        self.failed: set[tuple[str, str, str]] = set()
        self.acted = False  # an action other than done has succeeded
        self.nudges = 0
        self.bash = shutil.which("bash")

    def intro(self, goal_given: bool) -> list[Action]:
        """The scripted first actions (no goal read when the goal was given; no comments when there are none)."""
        out = [a for a in INTRO if not (goal_given and a.arg == "/app/goal")]
        if self.settings.comment_chars == 0:
            out = [Action(a.kind, a.arg, a.content) for a in out]
        return out

    def system(self, text: str) -> str:
        return text.rstrip() + "\n" + FEW_SHOT if self.settings.few_shot else text

    def opening(self, text: str) -> str:
        """With the examples, the goal ends the opening message just as in them (a small model copies form)."""
        return f'{text}\nGoal "{self.goal()[:400]}":' if self.settings.few_shot else text

    # -- after each step: what the model is told -------------------------------------------------
    def after(self, step: Step, turn: Turn) -> None:
        key = step.action.key()
        self.seen.add(key)
        if step.failed:
            self.failed.add(key)
        elif step.action.kind != "done":
            self.acted = True
        if self.settings.error_fix and step.failed and step.action.kind == "bash":
            turn.notes.append(
                f"The command `{step.action.arg[:200]}` failed: {error_line(step.observation)}. "
                "Fix the cause of this error with a different command; do not run the same one again."
            )

    def nudged(self, tell: Callable[[str], None], what: str) -> bool:
        """Once a session, instead of calling it stuck: restate the goal. False when the nudge is spent."""
        if not self.settings.nudge or self.nudges >= 1:
            return False
        self.nudges += 1
        tell(
            f"You are stuck: you repeated {what} and it changes nothing. Your goal: {self.goal()[:400]} "
            'Do one new step toward it now, or answer [{"done": "..."}] if it is reached.'
        )
        return True

    # -- best of N: the checker ------------------------------------------------------------------
    def score(self, reply: Reply) -> float:
        """0 for an answer the checker finds nothing wrong with; less for each fault found."""
        if reply.error or not reply.actions:
            return UNSET
        value = 0.0
        paths: list[tuple[bool, str]] = []  # (its folder will do, path): a command may make a new file
        for a in reply.actions:
            key = a.key()
            if key in self.failed:
                value -= 10  # a repeat of an action that failed
            elif key in self.seen:
                value -= 4  # a repeat: its result will not change
            if a.kind == "bash":
                value -= 5 if not self._parses(a.arg) else 0
                paths += [(True, p) for p in PATH.findall(a.arg)]
            elif a.kind == "read":
                paths.append((False, a.arg))
            elif a.kind == "write":
                paths.append((False, a.arg.rsplit("/", 1)[0] or "/"))
            elif a.kind == "done" and not self.acted:
                value -= 3  # done before anything was done
        return value - 2 * self._missing(paths)

    def _parses(self, command: str) -> bool:
        if self.bash is None:
            return True
        try:
            done = subprocess.run([self.bash, "-n"], input=command, capture_output=True, text=True, timeout=5)
            return done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return True

    def _missing(self, paths: list[tuple[bool, str]]) -> int:
        """How many of the paths do not exist in the sandbox (nor their folder, where that will do)."""
        paths = list(dict.fromkeys(p for p in paths if p[1] and len(p[1]) < 512))[:16]
        if not paths:
            return 0
        tests = [
            f"[ -e {q} ]" + (f' || [ -d "$(dirname {q})" ]' if folder else "")
            for folder, q in ((f, shlex.quote(p)) for f, p in paths)
        ]
        probe = "; ".join(f"{{ {t}; }} && printf 1 || printf 0" for t in tests)
        try:
            result = self.sandbox.execute(probe, 5)
        except SandshellError:
            return 0
        return result.output.count("0") if result.ok else 0


def error_line(observation: str) -> str:
    """The line of a command's observation that best says what went wrong."""
    lines = [ln.strip() for ln in observation.splitlines()[1:] if ln.strip()]
    body = [ln for ln in lines if not ln.startswith("[") and not ln.endswith(("#", "$"))]
    keyed = [ln for ln in body if re.search(r"error|not found|no such|denied|invalid|cannot|fail", ln, re.I)]
    line = (keyed or body or lines or ["(no output)"])[-1]
    return '"' + line[:300] + '"'
