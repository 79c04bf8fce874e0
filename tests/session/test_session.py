"""The session loop on the script backend and a real sandbox: endings, steering, recording, headless."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandshell import config
from sandshell.config import Settings
from sandshell.model.actions import Action
from sandshell.model.script import ScriptBackend
from sandshell.runner import SessionSpec, open_session, run_task
from sandshell.session import events
from sandshell.session.control import Control, Decision
from sandshell.session.replay import load
from sandshell.session.rerun import plan

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
KEYS = {"status", "result", "error", "log", "turns", "seconds", "tokens_in", "tokens_out", "session"}


class Collect:
    def __init__(self) -> None:
        self.events: list[events.Event] = []

    def emit(self, event: events.Event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:  # type: ignore[type-arg]
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture
def s(workspace: Path, tmp_path: Path) -> Settings:
    base = config.load(env_file=None, environ={})
    return base.replace(
        sandbox=base.sandbox.replace(workspace=str(workspace), exit_timeout=5.0),
        session=base.session.replace(sessions_dir=str(tmp_path / "sessions")),
        model=base.model.replace(intro=False),
    )


def script(*lines: object) -> ScriptBackend:
    return ScriptBackend([json.dumps(x) for x in lines])


def run(s: Settings, backend: ScriptBackend, control: Control | None = None, goal: str = "test") -> tuple:  # type: ignore[type-arg]
    sink = Collect()
    with open_session(SessionSpec(s, goal, backend, [sink], control or Control())) as session:
        outcome = session.run()
        context = session.context
        folder = session.folder
    return outcome, sink, context, folder


def test_done_ends_the_session_with_its_result(s: Settings) -> None:
    outcome, sink, _context, _ = run(s, script({"bash": "cd /tmp && echo hi"}, {"bash": "pwd"}, {"done": "all good"}))
    assert (outcome.status, outcome.result, outcome.turns) == ("done", "all good", 3)
    finished = [e for e in sink.of(events.ActionFinished) if e.result is not None]
    assert finished[1].result.output == "/tmp\n" and finished[1].result.prompt() == "0 root@sandbox:/tmp #"
    assert "hi" in "".join(e.data for e in sink.of(events.OutputChunk))
    assert isinstance(sink.events[-1], events.SessionEnded)


def test_failed_command_shows_exit_code_and_error_to_the_model(s: Settings) -> None:
    _, _, context, _ = run(s, script({"bash": "ls /nope"}, {"done": "x"}))
    observation = context.turns[0].observation()
    assert "[exit 2]" in observation and "No such file or directory" in observation


def test_bad_reads_and_writes_are_told_to_the_model_and_the_session_goes_on(s: Settings) -> None:
    steps = [
        {"read": "/app/nope"},
        {"read": "/app/" + "x" * 5000},
        {"read": "/etc"},
        {"write": "/proc/x", "content": "x"},
        {"read": "/app/a\x00b"},
        {"done": "still here"},
    ]
    outcome, _, context, _ = run(s, script(*steps))
    assert outcome.status == "done" and outcome.result == "still here"
    seen = "\n".join(t.observation() for t in context.turns)
    assert "No such file" in seen and "at most 4096 characters" in seen and "directory" in seen.lower()
    assert "write /proc/x:" in seen


def test_step_limit(s: Settings) -> None:
    outcome, *_ = run(
        s.replace(session=s.session.replace(max_steps=2)), script(*[{"bash": f"echo {i}"} for i in range(10)])
    )
    assert outcome.status == "max_steps" and outcome.turns == 2


def test_a_repeating_model_is_told_then_stopped(s: Settings) -> None:
    outcome, _sink, context, _ = run(
        s.replace(session=s.session.replace(repeat_limit=3)), script(*[{"bash": "ls"}] * 10)
    )
    assert outcome.status == "stuck" and "repeated the same action 3 times" in (outcome.error or "")
    assert any("exact action 2 times" in n for n in context.turns[1].notes)


@pytest.mark.docker
def test_a_whole_answer_of_alternating_actions_repeated_is_told_then_stopped(s: Settings) -> None:
    """Two actions an answer, the same answer each turn: no action follows itself, yet it is a repeat."""
    answer = [{"bash": "echo a"}, {"bash": "echo b"}]
    outcome, sink, context, _ = run(s.replace(session=s.session.replace(repeat_limit=3)), script(*[answer] * 10))
    assert outcome.status == "stuck" and "repeated the same answer 3 times" in (outcome.error or "")
    assert outcome.turns == 3
    assert any("same as your last 1 answer" in n for n in context.turns[1].notes)
    assert any("repeats its whole answer (2x)" in n.text for n in sink.of(events.Notice))


def test_garbage_answers_stop_the_session_as_stuck(s: Settings) -> None:
    backend = ScriptBackend(["[1]", "[2]", "[3]", '[{"done": "never"}]'])
    outcome, _sink, context, _ = run(s, backend)
    assert outcome.status == "stuck" and "not valid actions" in (outcome.error or "")
    assert "must be a JSON object" in context.turns[0].observation()


def test_model_config_changes_are_recorded_and_bad_ones_reported(s: Settings) -> None:
    outcome, sink, context, _ = run(
        s,
        script(
            {"write": "/app/config.json", "content": '{"temperature": 0.2}'},
            {"write": "/app/config.json", "content": '{"n_ctx": 99999}'},
            {"bash": "true"},
            {"done": "ok"},
        ),
    )
    changes = sink.of(events.ConfigChanged)
    assert changes and changes[0].after == {"temperature": 0.2}
    assert any("n_ctx cannot be changed" in n for n in context.turns[1].notes)
    assert outcome.status == "done"


def test_approval_reject_with_reason_reaches_the_model(s: Settings) -> None:
    control = Control(approval=True)
    control.decide(Decision("reject", reason="not on my machine"))
    control.decide(Decision("edit", action=events.Action("bash", "echo edited")))
    outcome, _sink, context, _ = run(
        s, script({"bash": "rm -rf /app"}, {"bash": "echo original"}, {"done": "ok"}), control
    )
    assert "rejected this action: not on my machine" in context.turns[0].observation()
    assert "edited" in context.turns[1].observation()
    assert outcome.status == "done"


def test_hint_and_take_over_are_seen_by_the_model(s: Settings) -> None:
    control = Control()
    control.pause()
    sink = Collect()
    backend = script({"bash": "echo model"}, {"done": "ok"})
    with open_session(SessionSpec(s, "g", backend, [sink], control)) as session:
        worker = threading.Thread(target=session.run)
        worker.start()
        control.take_over("echo typed-by-user")
        control.hint("look in /tmp")
        control.step()
        control.resume()
        worker.join(30)
        context = session.context
    first = context.turns[0].observation()
    assert "The user ran a command" in first and "typed-by-user" in first
    assert any("A hint from the user: look in /tmp" in n for t in context.turns for n in t.notes)
    assert any(e.by_user for e in sink.of(events.ActionStarted))


def test_recording_is_an_ordered_event_log_and_a_valid_cast(s: Settings) -> None:
    _, sink, _, folder = run(s, script({"bash": "printf 'a\\033]0;pwned\\007b\\n'"}, {"done": "ok"}))
    recorded = list(load(folder))
    assert [type(e).__name__ for _, e in recorded] == [type(e).__name__ for e in sink.events]
    times = [t for t, _ in recorded]
    assert times == sorted(times)
    lines = (folder / "session.cast").read_text().splitlines()
    header = json.loads(lines[0])
    assert header["version"] == 2 and header["width"] > 0 and header["height"] > 0
    assert header["idle_time_limit"] == s.session.cast_idle_limit  # a long wait does not play as dead time
    events_ = [json.loads(line) for line in lines[1:]]
    assert [f[0] for f in events_] == sorted(f[0] for f in events_)
    assert [f[2] for f in events_ if f[1] == "m"] == ["$ printf 'a\\033]0;pwned\\007b\\n'"]  # one marker a command
    frames = [f for f in events_ if f[1] == "o"]
    text = "".join(f[2] for f in frames)
    assert "^[]0;pwned" in text and "\x1b]0;pwned" not in text  # the model's escape is shown, not run
    assert plan(folder).answers == ['[{"bash": "printf \'a\\\\033]0;pwned\\\\007b\\\\n\'"}]', '[{"done": "ok"}]']


def test_the_cast_plays_in_asciinema_and_v3_is_an_option(s: Settings) -> None:
    import pexpect

    answers = ({"bash": "echo first-command"}, {"bash": "sleep 5; echo after-a-wait"}, {"done": "ok"})
    _, _, _, folder = run(s, script(*answers))
    player = str(Path(sys.executable).parent / "asciinema")
    child = pexpect.spawn(
        player, ["play", str(folder / "session.cast")], encoding="utf-8", timeout=60, dimensions=(36, 120)
    )
    child.expect("first-command")
    waited = time.monotonic()
    child.expect("after-a-wait")
    waited = time.monotonic() - waited
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert waited < 4.0  # the 5 s wait was played as 2 s (idle_time_limit), the player's start left out
    _, _, _, folder3 = run(s.replace(session=s.session.replace(cast_version="3")), script(*answers))
    lines = (folder3 / "session.cast").read_text().splitlines()
    header = json.loads(lines[0])
    assert header["version"] == 3 and header["term"]["cols"] > 0 and header["idle_time_limit"] == 2.0
    intervals = [json.loads(line)[0] for line in lines[1:]]
    assert all(i >= 0 for i in intervals) and max(intervals) >= 4.9  # v3 stores the time since the last event
    assert sum(json.loads(line)[1] == "m" for line in lines[1:]) == 2


def test_run_task_returns_status_result_error_log(s: Settings, tmp_path: Path) -> None:
    out = run_task(
        "say hi", timeout=60, max_iterations=5, settings=s, backend=script({"bash": "echo hi"}, {"done": "said hi"})
    )
    assert set(out) == KEYS
    assert out["turns"] == 2 and out["seconds"] > 0
    assert out["tokens_in"] == out["tokens_out"] == 0  # a script: no model evaluated or wrote a token
    assert Path(str(out["session"]), "events.jsonl").exists()
    assert out["status"] == "done" and out["result"] == "said hi" and out["error"] is None
    assert any("echo hi" in line for line in out["log"])


def test_run_task_on_a_read_only_workspace(s: Settings, workspace: Path) -> None:
    (workspace / "data.txt").write_text("keep")
    out = run_task(
        "t",
        timeout=60,
        max_iterations=5,
        settings=s,
        read_only=True,
        backend=script({"bash": "echo gone > /app/data.txt"}, {"done": "tried"}),
    )
    assert out["status"] == "done" and (workspace / "data.txt").read_text() == "keep"
    assert any("Read-only file system" in line for line in out["log"])


def test_headless_cli_prints_json_and_exit_status(s: Settings, tmp_path: Path) -> None:
    actions_file = tmp_path / "actions.jsonl"
    actions_file.write_text('{"bash": "uname -s"}\n{"done": "it is Linux"}\n')
    env = {
        "SANDSHELL_WORKSPACE": s.sandbox.workspace,
        "SANDSHELL_SESSIONS_DIR": s.session.sessions_dir,
        "PATH": "/usr/bin:/bin",
    }
    cmd = [sys.executable, "-m", "sandshell.cli", "--headless", "--goal", "which OS?", "--script", str(actions_file)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["status"] == "done" and result["result"] == "it is Linux"
    assert "Linux" in proc.stderr  # progress lines go to stderr
    failing = subprocess.run(
        [*cmd[:-2], "--max-steps", "1", "--script", str(actions_file)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert failing.returncode == 1 and json.loads(failing.stdout)["status"] == "max_steps"


def test_bad_settings_in_headless_are_one_sentence(tmp_path: Path) -> None:
    env = {"LLAMA_EXIT_TIMEOUT": "soon", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "sandshell.cli", "--headless", "--goal", "x"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "LLAMA_EXIT_TIMEOUT='soon' is not a valid float" in proc.stderr
    result = json.loads(proc.stdout)  # a script reading stdout still gets its JSON
    assert result["status"] == "error" and "LLAMA_EXIT_TIMEOUT" in result["error"]


@pytest.mark.docker
def test_a_failed_start_leaves_no_folder_unless_its_caller_named_it(s: Settings, tmp_path: Path) -> None:
    """Headless, the UI, eval: nothing ran, nothing is left in sessions/. The service names a task's
    folder and reads it: there the recording says why the session never began."""
    missing = s.replace(sandbox=s.sandbox.replace(workspace=str(tmp_path / "no-such-workspace")))
    result = run_task("g", settings=missing, backend=script({"done": "never"}))
    assert result["status"] == "error" and "does not exist" in result["error"] and result["session"] is None
    assert not Path(s.session.sessions_dir).exists() or not any(Path(s.session.sessions_dir).iterdir())
    result = run_task("g", settings=missing, backend=script({"done": "never"}), session_id="task-1")
    assert result["status"] == "error"
    (folder,) = Path(s.session.sessions_dir).iterdir()
    recorded = list(load(folder))
    last = recorded[-1][1]
    assert isinstance(last, events.SessionEnded) and last.status == "error" and "does not exist" in (last.error or "")


class QuitAfterPause:
    """A sink that quits the session `seconds` after its pause began (timed from the pause, not the
    start: the sandbox starts first, which took longer than a 2.5 s timer from the start in CI)."""

    def __init__(self, control: Control, seconds: float) -> None:
        self.control, self.seconds = control, seconds

    def emit(self, event: object) -> None:
        if isinstance(event, events.Phase) and event.name == "paused":
            threading.Timer(self.seconds, self.control.quit).start()


def test_a_long_pause_is_one_event_not_a_stream(s: Settings) -> None:
    control = Control()
    control.pause()
    fallback = threading.Timer(60, control.quit)  # (should it never pause)
    fallback.daemon = True
    fallback.start()
    sink = Collect()
    quitter = QuitAfterPause(control, 2.5)
    with open_session(SessionSpec(s, "test", script({"done": "x"}), [sink, quitter], control)) as session:
        session.run()
    fallback.cancel()
    paused = [e for e in sink.of(events.Phase) if e.name == "paused"]
    assert len(paused) == 1, len(paused)


def rerun_headless(s: Settings, folder: Path) -> subprocess.CompletedProcess[str]:
    """`sandshell --headless rerun FOLDER` on the session's workspace, as a user runs it."""
    env = {
        "SANDSHELL_WORKSPACE": s.sandbox.workspace,
        "SANDSHELL_SESSIONS_DIR": s.session.sessions_dir,
        "PATH": "/usr/bin:/bin",
        "LLAMA_INTRO": "false",
    }
    command = [sys.executable, "-m", "sandshell.cli", "--headless", "--goal", "g", "rerun", str(folder)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def test_rerun_replays_a_recordings_actions(s: Settings, tmp_path: Path) -> None:
    _, _, _, folder = run(s, script({"bash": "echo again > /app/marker"}, {"done": "rerun me"}))
    (Path(s.sandbox.workspace) / "marker").unlink()
    proc = rerun_headless(s, folder)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"] == "rerun me"
    assert (Path(s.sandbox.workspace) / "marker").read_text() == "again\n"


def test_rerun_brings_back_the_users_part_and_never_runs_a_rejected_action(s: Settings, tmp_path: Path) -> None:
    control = Control(approval=True)

    class User:  # approves, edits, rejects; takes over and hints between turns
        def emit(self, event: object) -> None:
            if isinstance(event, events.ApprovalNeeded):
                arg = event.action.arg
                if "first" in arg:
                    control.take_over("echo mine >> /app/log")
                    control.hint("look at /app/log")
                    control.decide(Decision("approve"))
                elif "second" in arg:
                    control.decide(Decision("edit", action=Action("bash", "echo edited >> /app/log")))
                else:
                    control.decide(Decision("reject", reason="not that"))

    steps = [
        {"bash": "echo first >> /app/log"},
        {"bash": "echo second >> /app/log"},
        {"bash": "echo rejected >> /app/log; touch /app/must-not-exist"},
        {"done": "ok"},
    ]
    with open_session(SessionSpec(s, backend=script(*steps), sinks=[User()], control=control)) as session:
        assert session.run().status == "done"
        folder = session.folder
    log = Path(s.sandbox.workspace) / "log"
    first = log.read_text()
    assert first == "first\nmine\nedited\n" and not (Path(s.sandbox.workspace) / "must-not-exist").exists()
    log.unlink()
    proc = rerun_headless(s, folder)
    out = json.loads(proc.stdout)
    assert out["status"] == "done", out
    assert log.read_text() == first  # the same commands, the user's among them, in the same order
    assert not (Path(s.sandbox.workspace) / "must-not-exist").exists()
    text = "\n".join(out["log"])
    assert "[the user rejected this action: not that]" in text and "hint sent: look at /app/log" in text


@pytest.mark.docker
def test_rerun_without_a_terminal_runs_headless_with_the_recorded_goal(s: Settings) -> None:
    """`sandshell rerun FOLDER` with no terminal and no --headless: JSON, the recording's goal, and no
    `[waiting for approval]` for a session that never asked."""
    _, _, _, folder = run(
        s, script({"bash": "cat /app/goal-seen 2>/dev/null; echo ran"}, {"done": "again"}), goal="the recorded goal"
    )
    (Path(s.sandbox.workspace) / "goal").write_text("a later goal\n")
    env = {
        "SANDSHELL_WORKSPACE": s.sandbox.workspace,
        "SANDSHELL_SESSIONS_DIR": s.session.sessions_dir,
        "PATH": "/usr/bin:/bin",
        "LLAMA_INTRO": "false",
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "sandshell.cli", "rerun", str(folder)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["result"] == "again"
    assert "waiting for approval" not in proc.stderr + "\n".join(out["log"])
    rerun = [e for _, e in load(Path(out["session"])) if isinstance(e, events.StateRead)]
    assert rerun and rerun[0].goal == "the recorded goal"
    after = subprocess.run(
        [sys.executable, "-m", "sandshell.cli", "rerun", str(folder), "--headless"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert after.returncode == 0 and json.loads(after.stdout)["result"] == "again", after.stderr


@pytest.mark.model
def test_headless_on_the_real_default_model_returns_valid_json(s: Settings) -> None:
    env = {
        "SANDSHELL_WORKSPACE": s.sandbox.workspace,
        "SANDSHELL_SESSIONS_DIR": s.session.sessions_dir,
        "PATH": "/usr/bin:/bin",
        "LLAMA_SEED": "3",
        "LLAMA_MAX_TOKENS": "128",
    }
    cmd = [
        sys.executable,
        "-m",
        "sandshell.cli",
        "--headless",
        "--goal",
        "Print the kernel version.",
        "--max-steps",
        "2",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    result = json.loads(proc.stdout)
    assert set(result) == KEYS
    assert result["status"] in ("done", "max_steps", "stuck") and proc.returncode == (result["status"] != "done")
    assert any(line.startswith("model: [") for line in result["log"])  # the model answered with actions
    assert "SmolLM2-135M-Instruct" in proc.stderr


class SlowScript(ScriptBackend):
    """Writes its answers a character every 20 ms, as a slow model would."""

    def stream(self, messages, params):  # type: ignore[no-untyped-def]
        for item in super().stream(messages, params):
            if isinstance(item, str):
                for ch in item:
                    time.sleep(0.02)
                    yield ch
            else:
                yield item


def test_pause_stops_the_answer_being_written_and_resume_asks_again(s: Settings) -> None:
    control = Control()
    seen: list[tuple[float, object]] = []

    class PauseAtFirstToken:
        def emit(self, event: object) -> None:
            seen.append((time.monotonic(), event))
            if isinstance(event, events.ModelText) and sum(isinstance(e, events.ModelText) for _, e in seen) == 1:
                control.pause()
                threading.Timer(0.5, control.resume).start()

    backend = SlowScript([json.dumps({"bash": "echo " + "x" * 60}), json.dumps({"done": "ok"})])
    with open_session(SessionSpec(s, "t", backend, [PauseAtFirstToken()], control)) as session:
        outcome = session.run()
    assert outcome.status == "done" and outcome.turns == 2  # the dropped answer is not a turn
    paused_at = next(t for t, e in seen if isinstance(e, events.ModelText))
    dropped_at = next(t for t, e in seen if isinstance(e, events.Notice) and "unfinished answer was dropped" in e.text)
    assert dropped_at - paused_at < 0.2  # at once, not after the ~1.5 s the answer takes to write
    assert sum("x" * 60 in getattr(e, "text", "") for _, e in seen if isinstance(e, events.ModelReplied)) == 1


def test_what_the_user_typed_is_never_dropped_silently(s: Settings) -> None:
    control = Control()

    class TypeThenQuit:
        def emit(self, event: object) -> None:
            if isinstance(event, events.ActionStarted) and not event.by_user:
                control.take_over("echo too-late")
                control.hint("too late as well")
                control.quit()

    sink = Collect()
    with open_session(
        SessionSpec(
            s, backend=script({"bash": "sleep 0.2"}, {"done": "x"}), sinks=[TypeThenQuit(), sink], control=control
        )
    ) as session:
        outcome = session.run()
    notices = [n.text for n in sink.of(events.Notice)]
    assert outcome.status == "quit"
    assert "not run, the session had ended: echo too-late" in notices
    assert "not sent, the session had ended: hint too late as well" in notices


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["replay", "MISSING"], "cannot read the recording"),
        (["replay", "FOLDER", "--speed", "0"], "--speed must be a number above 0"),
        (["replay", "FOLDER", "--speed", "-2"], "--speed must be a number above 0"),
        (["--headless", "replay", "FOLDER"], "replay shows a recording in the UI, which needs a terminal"),
    ],
)
def test_a_replay_that_cannot_play_says_why_in_one_sentence(tmp_path: Path, args: list[str], said: str) -> None:
    """A missing folder, or a speed of 0 or below (the replay would never move), is one sentence,
    not the UI opened on an internal error."""
    folder = tmp_path / "recorded"
    folder.mkdir()
    (folder / "events.jsonl").write_text('{"t": 0.0, "type": "Notice", "text": "hello"}\n')
    argv = [str(tmp_path / "missing") if a == "MISSING" else str(folder) if a == "FOLDER" else a for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "sandshell.cli", *argv],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    bad_argument = "--speed" in args  # exit 2, as for the arguments argparse refuses itself
    assert proc.returncode == (2 if bad_argument else 1), proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_headless_mistakes_are_said_on_stderr_with_the_json_on_stdout(tmp_path: Path) -> None:
    """Each mistake is said on stderr: a missing model given by --model (not only in the JSON), a file
    given as the workspace (not called missing), `--headles` (not run headless); `--help` lists eval."""
    env = {"PATH": "/usr/bin:/bin", "SANDSHELL_HOME": str(tmp_path)}
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    for extra, said in (
        (["--model", "/nope/m.gguf"], "/nope/m.gguf does not exist"),
        (
            ["--backend", "script", "--script", str(a_file), "--workspace", str(a_file)],
            f"the workspace {a_file} is not a folder",
        ),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "sandshell.cli", "--headless", "--goal", "x", *extra],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
        assert proc.returncode == 1 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert said in json.loads(proc.stdout)["error"]
    typo = subprocess.run(
        [sys.executable, "-m", "sandshell.cli", "--headles", "--goal", "x"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert typo.returncode == 2 and "unrecognized arguments: --headles" in typo.stderr
    endless = subprocess.run(
        [sys.executable, "-m", "sandshell.cli", "--headless", "--goal", "x", "--timeout", "inf"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert endless.returncode == 2 and "--timeout must be a finite number" in endless.stderr  # a bad argument: 2
    assert json.loads(endless.stdout)["status"] == "error"  # and a script reading stdout still gets its JSON
    for argv, said in ((["--headless", "eval"], "eval comes first"), (["replay", "--spe", "2", "x"], "--spe")):
        wrong = subprocess.run(
            [sys.executable, "-m", "sandshell.cli", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=60,
        )
        assert wrong.returncode == 2 and said in wrong.stderr and not wrong.stdout, wrong.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "sandshell.cli", "--help"], capture_output=True, text=True, env=env, cwd=REPO, timeout=60
    )
    assert helped.returncode == 0 and "eval" in helped.stdout


def test_how_a_session_ended_reads_the_same_in_the_ui_and_the_transcript() -> None:
    """One line, one place (`Outcome.line`), with "1 turn" for one, in the UI and the headless transcript."""
    one = events.SessionEnded("done", "hello", None, 1, 2.04)
    assert one.line() == "session done: hello · 1 turn · 2.0s" and one.outcome.turns_said == "1 turn"
    failed = events.SessionEnded("error", None, "boom", 3, 0.5)
    assert failed.line() == "session error (boom) · 3 turns · 0.5s"
    from sandshell.session.transcript import render

    assert "session done: hello · 1 turn · 2.0s" in render(one, color=False)
