"""The session loop: read the model's world, prompt it, stream its answer, run its actions, repeat.

No Textual here: the loop emits events to sinks (the TUI, the headless runner, the recorder).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from sandshell.config import Settings
from sandshell.errors import ContextOverflow, ModelError, SandshellError
from sandshell.model import actions
from sandshell.model.actions import Action
from sandshell.model.context import Context, Step, Turn, brief_command, cut, observe_command
from sandshell.model.turn import Model, Reply
from sandshell.model.types import Stats
from sandshell.sandbox.protocol import Result
from sandshell.session import events as ev
from sandshell.session.coach import Coach
from sandshell.session.control import Control
from sandshell.session.outcome import Outcome, outcome_of
from sandshell.session.repeats import Repeats
from sandshell.session.types import SandboxLike, public_settings
from sandshell.session.world import ModelWorld

OPENING_PROMPT = "0 root@sandbox:/app #"
MAX_BAD_ANSWERS = 3  # answers in a row that did not parse before the session stops as stuck


def emit_all(sinks: list[ev.Sink], event: ev.Event) -> None:
    """Give the event to every sink; a sink's failure (a full disk) is raised after all have it."""
    failure: SandshellError | None = None
    for sink in sinks:
        try:
            sink.emit(event)
        except SandshellError as e:
            failure = failure or e
    if failure is not None:
        raise failure


class Lifecycle:
    """The one owner of a session's first and last events: `SessionStarted` and `SessionEnded` are
    each emitted exactly once, whatever ends the session (done, a limit, quit, cancel, a crash, a
    signal, or a start that failed before there was a session)."""

    def __init__(self, sinks: list[ev.Sink], session_id: str, settings: Settings) -> None:
        self.sinks = sinks
        self.session_id = session_id
        self.settings = settings
        self.started = time.monotonic()
        self.began = False
        self.outcome: Outcome | None = None

    def begin(self, model: str) -> None:
        if self.began:
            return
        self.began, self.started = True, time.monotonic()
        s = self.settings
        emit_all(
            self.sinks,
            ev.SessionStarted(self.session_id, model, s.sandbox.profile, s.sandbox.workspace, public_settings(s)),
        )

    def end(self, outcome: Outcome, before: Callable[[], None] = lambda: None) -> Outcome:
        """Emit the end (once; a later call returns the first ending); `before` runs first, if this ends it."""
        if self.outcome is not None:
            return self.outcome
        if not self.began:
            self.begin(self.settings.model.backend)
        self.outcome = outcome
        try:
            before()
            emit_all(self.sinks, ev.Phase("done"))
            emit_all(self.sinks, ev.SessionEnded.of(outcome))
        except SandshellError:
            pass  # a sink that already failed (the recorder, on a full disk) said so in the outcome
        return outcome


S = TypeVar("S", bound=SandboxLike)


class Session(Generic[S]):
    """One session: it owns its start, its turns and its end (`run`, or `begin`/`answer`/`finish`
    for a conversation driven a message at a time)."""

    def __init__(
        self,
        settings: Settings,
        sandbox: S,
        model: Model,
        sinks: list[ev.Sink],
        control: Control | None = None,
        session_id: str = "session",
        goal: str | None = None,
        world: ModelWorld | None = None,
        lifecycle: Lifecycle | None = None,
        folder: Path | None = None,
    ) -> None:
        self.settings = settings
        self.sandbox = sandbox
        self.model = model
        self.sinks = sinks
        self.control = control or Control(approval=settings.session.approval)
        self.session_id = session_id
        self.goal_override = goal
        self.world = world or ModelWorld(settings, goal)
        self.life = lifecycle or Lifecycle(sinks, session_id, settings)
        self.folder = folder  # where it is recorded, if it is
        self.coach = Coach(settings.model, sandbox, lambda: self.world.last.get("goal", ""))
        self.opening = f"Begin. The shell is ready: {OPENING_PROMPT}"  # fixed within a session: the cache holds
        backend = model.backend
        self.context = Context(
            backend.n_ctx,
            settings.model.max_tokens,
            settings.model.context_margin,
            backend.count,
            observation_tokens=settings.model.observation_tokens,
        )
        self.turns = 0
        self.prompt_line = "0 root@sandbox:/app #"
        self.repeats = Repeats()
        self.bad_answers = 0
        self.finished: str | None = None
        self.tokens_in = self.tokens_out = 0

    @property
    def started(self) -> float:
        return self.life.started

    def emit(self, event: ev.Event) -> None:
        """Give the event to every sink; a sink's failure (a full disk) is raised after all have it."""
        emit_all(self.sinks, event)

    # -- the loop ---------------------------------------------------------------------------
    def begin(self) -> None:
        """Start the session's clock and say it started (once)."""
        self.life.begin(getattr(self.model.backend, "description", self.model.backend.name))

    def finish(self, outcome: Outcome) -> Outcome:
        """End the session (once), with its numbers; a later call returns the first ending."""
        seconds = round(time.monotonic() - self.started, 2)
        o = outcome.replace(
            turns=self.turns,
            seconds=seconds,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            recording=str(self.folder) if self.folder else None,
        )
        return self.life.end(o, before=self._undelivered)

    def run(self) -> Outcome:
        """Run until done, a limit, a stuck model, quit or a failure; never raises."""
        try:
            self.begin()
            if self.settings.model.intro:
                self._intro()
            outcome = self._loop()
        except (Exception, KeyboardInterrupt) as e:
            outcome = outcome_of(e)
        return self.finish(outcome)

    def answer(self, message: str) -> None:
        """One turn on a new message, which is the goal from now on (a conversation's turn)."""
        self.begin()
        self.world.goal_override = self.goal_override = message
        self.emit(ev.Notice("info", f"the user says: {message}"))
        self.finished = None
        self.turn()

    def _loop(self) -> Outcome:
        paused = False
        while True:
            if self.finished is not None:
                return Outcome("done", result=self.finished)
            stop = self._limit_reached()
            if stop is not None:
                return stop
            move = self.control.next_move()
            if move == "quit":
                status, why = self.control.ending
                return Outcome(status, error=why)
            if move == "commands":
                self._user_commands()
            elif move == "idle":
                if not paused:  # one event a pause, not one at each wake-up while it lasts
                    self.emit(ev.Phase("paused"))
            else:
                self.turn()
            paused = move == "idle"

    def _limit_reached(self) -> Outcome | None:
        s = self.settings
        if s.session.max_steps and self.turns >= s.session.max_steps:
            return Outcome("max_steps", error=f"the step limit ({s.session.max_steps}) was reached before the goal")
        if s.session.max_seconds and time.monotonic() - self.started >= s.session.max_seconds:
            return Outcome("timeout", error=f"the time limit ({s.session.max_seconds:g}s) was reached before the goal")
        if s.session.repeat_limit and self.repeats.most() >= s.session.repeat_limit:
            what = self.repeats.what(s.session.repeat_limit)
            if self.coach.nudged(self._tell, f"the same {what}"):
                self.repeats.forget()
                return None
            return Outcome("stuck", error=f"the model repeated the same {what} {s.session.repeat_limit} times in a row")
        if self.bad_answers >= MAX_BAD_ANSWERS:
            return Outcome("stuck", error=f"{MAX_BAD_ANSWERS} answers in a row were not valid actions")
        return None

    def turn(self) -> None:
        """One turn: state, prompt, answer, actions."""
        self.turns += 1
        for hint in self.control.hints():
            self._hint(hint)
        params, system = self._read_state()
        reply = self._answer(system, params)
        if reply is None:  # paused while it was written: the turn is asked again on resume
            self.turns -= 1
            return
        turn = Turn(answer=reply.text if reply.error else actions.dumps(reply.actions), notes=list(reply.notes))
        for note in reply.notes:
            self.emit(ev.Notice("warning", note))
        if reply.error:
            self.bad_answers += 1
            turn.notes.append(f"Your answer was not valid: {reply.error}. Answer with a JSON list of actions.")
        else:
            self.bad_answers = 0
        self.context.turns.append(turn)
        self._repeated(self.repeats.answer(reply.actions), turn)
        for action in reply.actions:
            if self.control.quitting:
                break
            self._repeated(self.repeats.action(action), turn)
            step = self._act(action)
            turn.steps.append(step)
            self.coach.after(step, turn)
            if action.kind == "done":
                self.finished = action.arg
                break

    def _answer(self, system: str, params: dict[str, Any]) -> Reply | None:
        """Ask the model; a server that says the prompt overflows its context is asked again, shorter."""
        for _ in range(3):
            messages, used = self.context.messages(self.coach.system(system), self.coach.opening(self.opening))
            self.emit(ev.TurnStarted(self.turns, used, self.context.limit, self.context.n_ctx, self.context.dropped))
            self.emit(ev.Phase("thinking"))
            try:
                return self._ask(messages, params)
            except ContextOverflow as e:
                fits = e.n_ctx if 0 < e.n_ctx < self.context.n_ctx else int(self.context.n_ctx * 0.75)
                self.context.n_ctx = max(fits, 2 * self.context.max_tokens + self.context.margin + 128)
                self.emit(ev.Notice("warning", f"{e}; the history shrinks to fit {self.context.n_ctx:,} tokens"))
        raise ModelError("the prompt still overflows the model server's context; set LLAMA_N_CTX to its size")

    def _ask(self, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply | None:
        """The model's answer; None when the user paused or quit while it was being written (it is dropped)."""
        reply, written = Reply("", error="no answer"), ""
        for item in self.model.turn(messages, params, self.coach.score):
            if isinstance(item, Reply):
                reply = item
            elif isinstance(item, ev.PromptProgress):  # a few a turn: one per batch of n_batch tokens
                self.emit(item)
            else:
                written += item
                self.emit(ev.ModelText(item))
            if self.control.quitting:
                break
            cut = self.control.cut_requested()  # the user's commands run now, then the model is asked again
            if cut or self.control.holding:  # pause stops the generation at once; resume asks again
                self.emit(ev.ModelReplied(written, (), None, Stats()))
                if cut:
                    said = "the answer was cut short: your command runs now, then the model is asked again"
                else:
                    said = "paused: the unfinished answer was dropped; resuming asks the model again"
                self.emit(ev.Notice("info", said))
                return None
        if self.control.quitting and reply.error == "no answer":  # cut short by the quit: not the model's fault
            self.emit(ev.ModelReplied(written, (), None, Stats()))
            return None
        self.tokens_in += reply.stats.prompt_tokens - reply.stats.cached_tokens
        self.tokens_out += reply.stats.completion_tokens
        self.emit(ev.ModelReplied(reply.text, tuple(reply.actions), reply.error, reply.stats))
        return reply

    def _undelivered(self) -> None:
        """What the user typed that the session ended before running: said, never dropped silently."""
        for command in self.control.user_commands():
            self.emit(ev.Notice("warning", f"not run, the session had ended: {command}"))
        for hint in self.control.hints():
            self.emit(ev.Notice("warning", f"not sent, the session had ended: hint {hint}"))

    # -- the model's world ------------------------------------------------------------------
    def _read_state(self) -> tuple[dict[str, Any], str]:
        reading = self.world.read(self.sandbox.state())
        self.emit(reading.state)
        if reading.change is not None:
            self.emit(reading.change)
        for problem in reading.new_problems:
            self._tell(problem)
            self.emit(ev.Notice("warning", problem))
        return reading.params, reading.system

    # -- actions ----------------------------------------------------------------------------
    def _act(self, action: Action, by_user: bool = False) -> Step:
        if self.control.approval and not by_user and action.kind != "done":
            answered = self.control.answers_itself
            if not answered:
                self.emit(ev.Phase("approval"))
            self.emit(ev.ApprovalNeeded(action, self.prompt_line, answered))
            decision = self.control.await_decision()
            if decision.verdict == "reject":
                text = f"[the user rejected this action: {decision.reason or 'no reason given'}]"
                self.emit(ev.ActionFinished(action, text, ok=False))
                return Step(action, f"{action.summary(200)}\n{text}", f"{action.summary()} -> rejected", failed=True)
            if decision.verdict == "edit" and decision.action is not None:
                self.emit(ev.Notice("info", f"the user edited the action to: {decision.action.summary()}"))
                action = decision.action
        self.emit(ev.Phase("running"))
        self.emit(ev.ActionStarted(action, self.prompt_line, by_user=by_user))
        limit = self.context.observation_chars
        if action.kind == "bash":
            result = self._run(action)
            self.prompt_line = result.prompt()
            self.emit(ev.ActionFinished(action, result.status_line(), result, ok=result.ok))
            return Step(action, observe_command(result, limit), brief_command(result), failed=not result.ok)
        if action.kind == "read":
            f = self.sandbox.read_file(action.arg)
            ok = f.content is not None
            body = cut(f.content or "", limit) if ok else f"error: {f.error}"
            summary = f"read {f.size:,} bytes" + (" (truncated)" if f.truncated else "") if ok else f"{f.error}"
            lines = body.rstrip("\n").split("\n") if ok and body else []  # shown as a command's output is,
            for i in range(0, len(lines), 100):  # in pieces as that comes, as much as the model sees
                self.emit(ev.OutputChunk("stdout", "\n".join(lines[i : i + 100]) + "\n"))
            self.emit(ev.ActionFinished(action, summary, ok=ok))
            return Step(action, f"read {action.arg}:\n{body}", f"read {action.arg} -> {summary}", failed=not ok)
        if action.kind == "write":
            try:
                size = self.sandbox.write_file(action.arg, action.content)
                summary, ok = f"wrote {size:,} bytes", True
            except SandshellError as e:
                summary, ok = str(e), False
            self.emit(ev.ActionFinished(action, summary, ok=ok))
            return Step(action, f"write {action.arg}: {summary}", f"write {action.arg} -> {summary}", failed=not ok)
        self.emit(ev.ActionFinished(action, "finished"))
        return Step(action, f"done: {action.arg}", "done")

    def _run(self, action: Action) -> Result:
        return self.sandbox.execute(action.arg, action.timeout, lambda o: self.emit(ev.OutputChunk(o.stream, o.data)))

    def _repeated(self, said: tuple[str, str] | None, turn: Turn) -> None:
        if said is not None:  # the model reads the note after this turn; the user sees the warning now
            turn.notes.append(said[0])
            self.emit(ev.Notice("warning", said[1]))

    def _user_commands(self) -> None:
        """Commands the user typed (take over): run them, and let the model see them."""
        for command in self.control.user_commands():
            step = self._act(Action("bash", command, comment="typed by the user"), by_user=True)
            self._tell(f"The user ran a command in your shell:\n{step.observation}")
        for hint in self.control.hints():
            self._hint(hint)

    def _hint(self, text: str) -> None:
        self._tell(f"A hint from the user: {text}")
        self.emit(ev.Notice("info", f"hint sent: {text}"))

    def _tell(self, note: str) -> None:
        """Put a note where the model reads it next: after the last turn's observations."""
        if self.context.turns:
            self.context.turns[-1].notes.append(note)
        else:
            self.context.turns.append(Turn(answer="[]", notes=[note]))

    def _intro(self) -> None:
        intro = self.coach.intro(bool(self.goal_override))  # a given goal is not /app/goal: not read
        if self.settings.model.intro_style == "observation":  # what the shell showed, not the model's own move
            self.opening += "".join("\n\n" + self._act(a).observation for a in intro)
            return
        turn = Turn(answer=actions.dumps(intro))
        self.context.turns.append(turn)
        self.emit(ev.ModelReplied(turn.answer, tuple(intro), None, Stats()))
        for action in intro:
            turn.steps.append(self._act(action))
