"""A session's life has one owner: whatever ends it, its sinks see one start and one end, and every
front end reports the same `Outcome` (no engine: the scripted sandbox and the script backend)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandshell import config
from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.model.script import ScriptBackend
from sandshell.model.turn import Model
from sandshell.runner import SessionSpec, open_session, run_session
from sandshell.sandbox.scripted import ScriptedSandbox
from sandshell.session import events as ev
from sandshell.session.control import Control
from sandshell.session.loop import Session
from sandshell.session.outcome import Outcome, outcome_of
from sandshell.session.recorder import Recorder, end_recording


class Collect:
    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    def emit(self, event: ev.Event) -> None:
        self.events.append(event)

    def count(self, kind: type) -> int:
        return sum(isinstance(e, kind) for e in self.events)

    def ended(self) -> ev.SessionEnded:
        (end,) = [e for e in self.events if isinstance(e, ev.SessionEnded)]
        return end


@pytest.fixture
def s(tmp_path: Path) -> Settings:
    base = config.load(env_file=None, environ={})
    return base.replace(
        sandbox=base.sandbox.replace(workspace=str(tmp_path / "ws")),
        session=base.session.replace(sessions_dir=str(tmp_path / "sessions"), repeat_limit=3),
        model=base.model.replace(intro=False),
    )


def script(*actions: object) -> ScriptBackend:
    return ScriptBackend([json.dumps(a) for a in actions])


def session(
    s: Settings, backend: ScriptBackend, control: Control | None = None, **kw: object
) -> tuple[Session, Collect]:  # type: ignore[type-arg]
    sink = Collect()
    box = ScriptedSandbox(answer=lambda c: ("ok\n", 0), **kw)  # type: ignore[arg-type]
    return Session(s, box, Model(backend, s.model), [sink], control or Control(), goal="the goal"), sink


class Crash(ScriptBackend):
    """A backend with a bug: its second answer raises what no front end expects."""

    def stream(self, *args: object, **kwargs: object) -> Iterator[str]:  # type: ignore[override]
        if self.calls >= 1:
            raise RuntimeError("a bug")
        self.calls += 1
        yield from super().stream(*args, **kwargs)  # type: ignore[arg-type]

    calls = 0


@pytest.mark.parametrize(
    ("how", "backend", "quit_with", "status"),
    [
        ("done", script({"bash": "ls"}, {"done": "all of it"}), None, "done"),
        ("stuck", script({"bash": "ls"}, {"bash": "ls"}, {"bash": "ls"}, {"bash": "ls"}), None, "stuck"),
        ("quit", script({"bash": "ls"}), ("quit", "the user quit"), "quit"),
        ("cancelled", script({"bash": "ls"}), ("cancelled", "cancelled"), "cancelled"),
        ("crash", Crash([json.dumps({"bash": "ls"})] * 3), None, "error"),
    ],
)
def test_one_start_and_one_end_whatever_ends_it(
    s: Settings, how: str, backend: ScriptBackend, quit_with: tuple[str, str] | None, status: str
) -> None:
    control = Control()
    if quit_with is not None:
        control.quit(*quit_with)  # type: ignore[arg-type]
    sess, sink = session(s, backend, control)
    outcome = sess.run()
    assert outcome.status == status, (how, outcome)
    assert sink.count(ev.SessionStarted) == 1 and sink.count(ev.SessionEnded) == 1
    assert isinstance(sink.events[0], ev.SessionStarted) and isinstance(sink.events[-1], ev.SessionEnded)
    assert sink.ended().outcome == outcome.replace(recording=None)
    assert sess.finish(Outcome("error", error="again")) == outcome  # a second ending changes nothing
    assert sink.count(ev.SessionEnded) == 1


def test_a_crash_is_a_sentence_with_the_numbers_so_far(s: Settings) -> None:
    sess, _ = session(s, Crash([json.dumps({"bash": "ls"})] * 3))
    outcome = sess.run()
    assert outcome.error == "sandshell failed unexpectedly (RuntimeError: a bug)" and outcome.turns == 2


def test_a_signal_ends_it_as_a_quit(s: Settings) -> None:
    class Interrupt:
        def emit(self, event: ev.Event) -> None:
            if isinstance(event, ev.ActionStarted):
                raise KeyboardInterrupt

    sess, sink = session(s, script({"bash": "ls"}, {"done": "x"}))
    sess.sinks.append(Interrupt())
    outcome = sess.run()
    assert (outcome.status, outcome.error) == ("quit", "interrupted") and sink.count(ev.SessionEnded) == 1


def test_a_conversation_begins_once_and_ends_once(s: Settings) -> None:
    sess, sink = session(s, script({"bash": "echo one"}, {"done": "two"}))
    sess.answer("first message")
    sess.answer("second message")
    outcome = sess.finish(Outcome("quit", error="the conversation was ended"))
    assert sink.count(ev.SessionStarted) == 1 and sink.count(ev.SessionEnded) == 1
    assert outcome.turns == 2 and sess.finished == "two" and outcome.status == "quit"
    said = [e.text for e in sink.events if isinstance(e, ev.Notice) and e.text.startswith("the user says")]
    assert said == ["the user says: first message", "the user says: second message"]


def test_a_quit_while_the_model_writes_is_no_model_error(s: Settings) -> None:
    """The stream of a cancelled session ends `cancelled`, with no `no answer` error before it."""
    control = Control()

    class CancelAtFirstToken:
        def emit(self, event: ev.Event) -> None:
            if isinstance(event, ev.ModelText):
                control.quit("cancelled", "cancelled")

    sess, sink = session(s, script({"bash": "ls"}), control)
    sess.sinks.append(CancelAtFirstToken())
    assert sess.run().status == "cancelled"
    assert not [e for e in sink.events if isinstance(e, ev.ModelReplied) and e.error]


def test_a_start_that_fails_is_said_with_its_start_and_end(s: Settings) -> None:
    """Every sink hears the start, the error and the end; a folder is kept only for a session the
    caller named (the service's task), and nothing is left for one nobody will look up."""
    bad = s.replace(
        model=s.model.replace(model_path=str(Path(s.sandbox.workspace) / "missing.gguf"))
    )  # the model cannot load
    sink = Collect()
    outcome = run_session(SessionSpec(bad, "g", sinks=[sink], log=lambda _m: None))
    assert outcome.status == "error" and outcome.error and "missing.gguf" in outcome.error
    assert [type(e).__name__ for e in sink.events][:1] == ["SessionStarted"]
    assert sink.count(ev.SessionEnded) == 1 and sink.ended().error == outcome.error
    assert outcome.recording is None and not any(Path(s.session.sessions_dir).glob("*/events.jsonl"))
    named = run_session(SessionSpec(bad, "g", session_id="20261128-000000-abcd", log=lambda _m: None))
    assert named.recording and (Path(named.recording) / "events.jsonl").is_file()
    recorded = [json.loads(line)["type"] for line in (Path(named.recording) / "events.jsonl").read_text().splitlines()]
    assert recorded[0] == "SessionStarted" and recorded[-1] == "SessionEnded" and recorded.count("SessionEnded") == 1


def test_a_start_cancelled_before_it_ran_ends_cancelled(s: Settings) -> None:
    control = Control()
    control.quit("cancelled", "cancelled")
    bad = s.replace(model=s.model.replace(model_path=str(Path(s.sandbox.workspace) / "missing.gguf")))
    with pytest.raises(SandshellError) as raised, open_session(SessionSpec(bad, "g", control=control)):
        pass
    assert outcome_of(raised.value).status == "cancelled"
    assert run_session(SessionSpec(bad, "g", control=control)).status == "cancelled"


def test_the_ladder_names_what_happened() -> None:
    assert outcome_of(SandshellError("the disk is full")) == Outcome("error", error="the disk is full")
    assert outcome_of(KeyboardInterrupt()) == Outcome("quit", error="interrupted")
    assert outcome_of(ValueError("x")).error == "sandshell failed unexpectedly (ValueError: x)"
    assert Outcome("done").ok and not Outcome("stuck").ok
    assert Outcome("done", "r", None, 1, 2.04).line() == "session done: r · 1 turn · 2.0s"


def test_a_recording_cut_short_gets_its_end_once(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "rec")
    rec.emit(ev.Notice("info", "working"))
    rec.close()
    with open(tmp_path / "rec" / "events.jsonl", "a") as f:
        f.write('{"t": 1.5, "type": "Notice", "lev')  # the process died mid-line
    ended = Outcome("interrupted", error="the server stopped", turns=3)
    assert end_recording(tmp_path / "rec", ended)
    assert not end_recording(tmp_path / "rec", ended)  # already ended: nothing added
    lines = (tmp_path / "rec" / "events.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    assert last["type"] == "SessionEnded" and last["status"] == "interrupted" and last["turns"] == 3
    assert sum('"SessionEnded"' in line for line in lines) == 1


def test_every_front_end_reports_from_the_outcome(s: Settings) -> None:
    """The Bot's `status` is the outcome's `ok`; a thread of the service sees the same status the stream says."""
    done: list[Outcome] = []
    sess, sink = session(s, script({"done": "x"}))
    worker = threading.Thread(target=lambda: done.append(sess.run()))
    worker.start()
    worker.join(10)
    assert done and done[0].status == sink.ended().status == "done" and done[0].ok


def test_a_rerun_answers_approvals_as_recorded_and_says_nothing_waits(s: Settings) -> None:
    """A rerun of a session recorded with approval on: each recorded verdict answers at once, and
    neither the transcript nor the UI says an action waits for approval."""
    from sandshell.model.actions import Action
    from sandshell.runner import LineLog
    from sandshell.session.control import Decision
    from sandshell.session.rerun import Plan, RerunControl
    from sandshell.session.transcript import render

    recorded = Plan(decisions=[Decision("reject", reason="not that"), Decision("approve")], approval=True)
    control = RerunControl(recorded)
    sess, sink = session(s, script({"bash": "rm -rf /app/x"}, {"bash": "ls"}, {"done": "x"}), control)
    log = LineLog(echo=False)
    sess.sinks.append(log)
    assert sess.run().status == "done"
    asked = [e for e in sink.events if isinstance(e, ev.ApprovalNeeded)]
    assert len(asked) == 2 and all(e.answered for e in asked)
    assert not [e for e in sink.events if isinstance(e, ev.Phase) and e.name == "approval"]
    assert not any("waiting for approval" in line for line in log.lines), log.lines
    assert sess.sandbox.commands == ["ls"]  # the rejected one never ran, as recorded
    waiting = render(ev.ApprovalNeeded(Action("bash", "ls"), "0 root@sandbox:/app #"), color=False)
    assert "waiting for approval" in waiting  # a live session's still says so
