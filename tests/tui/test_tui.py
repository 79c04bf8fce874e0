"""The terminal UI driven by Textual's Pilot: keys, panes, approval, floods; a few snapshots."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from textual.events import Key

from sandshell import config
from sandshell.config import Settings
from sandshell.model.script import ScriptBackend
from sandshell.model.types import Message, PromptProgress, Stats
from sandshell.tui.app import SandshellApp
from sandshell.tui.run import live_app, replay_app
from sandshell.tui.widgets import ShellHighlighter, ShellLog, StatusBar
from tests.conftest import changed

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

RECORDING = Path(__file__).parent / "data" / "recording"
SIZE = (120, 36)


def settings_for(workspace: Path, tmp_path: Path, *answers: object, **changes: dict[str, Any]) -> Settings:
    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps(a) + "\n" for a in answers))
    base = config.load(env_file=None, environ={})
    base = base.replace(
        sandbox=base.sandbox.replace(workspace=str(workspace), exit_timeout=5.0),
        session=base.session.replace(sessions_dir=str(tmp_path / "sessions")),
        model=base.model.replace(backend="script", script_path=str(script), intro=False),
    )
    return changed(base, **changes)


def log_text(app: SandshellApp) -> str:
    return "\n".join(app.query_one(ShellLog).lines)


async def wait_for(pilot: object, condition: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the UI"
        await pilot.pause(0.05)  # type: ignore[attr-defined]


async def test_session_streams_into_the_panes_and_ends(workspace: Path, tmp_path: Path) -> None:
    (workspace / "goal").write_text("count files")
    s = settings_for(
        workspace,
        tmp_path,
        {"comment": "look", "bash": "echo out; echo err >&2; exit 3"},
        {"write": "/app/config.json", "content": '{"temperature": 0.1}'},
        {"done": "counted"},
    )
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.ended is not None)
        await pilot.pause(0.1)
        text = log_text(app)
        assert "0 root@sandbox:/app # echo out; echo err >&2; exit 3" in text
        assert "out" in text and "err" in text and "[exit 3" in text
        assert "session done: counted" in text
        assert "count files" in str(app.query_one("#goal-body").render())
        assert "temperature" in str(app.query_one("#config-body").render())
        (stderr_line,) = [ln for ln in app.query_one(ShellLog).lines if ln.endswith(" err")]
        styled = Text(stderr_line)
        ShellHighlighter().highlight(styled)
        assert any("red" in str(span.style) for span in styled.spans)  # stderr is told apart
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)


async def test_pause_step_resume(workspace: Path, tmp_path: Path) -> None:
    s = settings_for(workspace, tmp_path, *[{"bash": f"echo step{i}"} for i in range(6)], {"done": "x"})
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        status = app.query_one(StatusBar)
        assert status.state == "paused"
        await pilot.pause(0.5)
        ran = log_text(app).count("# echo step")
        await pilot.press("s")
        await wait_for(pilot, lambda: log_text(app).count("# echo step") == ran + 1)
        await pilot.pause(0.5)
        assert log_text(app).count("# echo step") == ran + 1  # one step, then paused again
        await pilot.press("p")
        await wait_for(pilot, lambda: app.ended is not None)
        await pilot.press("q")


async def test_approval_approve_edit_and_reject_with_reason(workspace: Path, tmp_path: Path) -> None:
    s = settings_for(
        workspace,
        tmp_path,
        {"bash": "echo first"},
        {"bash": "echo second"},
        {"bash": "rm -rf /app"},
        {"done": "x"},
        session={"approval": True},
    )
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("y")  # nothing is waiting yet: this must not approve the first action unseen
        await wait_for(pilot, lambda: app.pending is not None)
        await pilot.pause(0.5)
        assert app.pending is not None and "  first" not in log_text(app)  # still waiting
        await pilot.press("y")
        await wait_for(pilot, lambda: "  first" in log_text(app))
        await wait_for(pilot, lambda: app.pending is not None and app.pending.arg == "echo second")
        await pilot.press("e")
        box = app.query_one("#ask")
        box.value = "echo edited"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await wait_for(pilot, lambda: "\n  edited" in log_text(app))
        await wait_for(pilot, lambda: app.pending is not None and app.pending.arg == "rm -rf /app")
        await pilot.press("r")
        await pilot.press(*"not here")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.ended is not None)
        assert "rejected this action: not here" in log_text(app)
        await pilot.press("q")


async def test_edit_changes_a_reads_path_and_a_writes_content(workspace: Path, tmp_path: Path) -> None:
    (workspace / "a").write_text("from a\n")
    (workspace / "b").write_text("from b\n")
    s = settings_for(
        workspace,
        tmp_path,
        {"read": "/app/a"},
        {"write": "/app/c", "content": "old"},
        {"done": "x"},
        session={"approval": True},
    )
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        box = app.query_one("#ask")
        await wait_for(pilot, lambda: app.pending is not None)
        await pilot.press("e")
        assert box.value == "/app/a" and "path" in box.placeholder  # type: ignore[attr-defined]
        box.value = "/app/b"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.pending is not None and app.pending.kind == "write")
        await pilot.press("e")
        assert box.value == "/app/c" and "path" in box.placeholder  # type: ignore[attr-defined]
        box.value = "/app/d"  # type: ignore[attr-defined]
        await pilot.press("enter")  # then the content, in a multi-line editor
        area = app.query_one("#content")
        assert area.has_focus and area.text == "old"  # type: ignore[attr-defined]
        area.text = "new\nsecond line"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.ended is not None)
        assert "◆ read /app/b\n  from b\n· → read 7 bytes" in log_text(app)
        assert (workspace / "d").read_text() == "new\nsecond line" and not (workspace / "c").exists()
        await pilot.press("q")


async def test_hint_and_take_over(workspace: Path, tmp_path: Path) -> None:
    s = settings_for(workspace, tmp_path, *[{"bash": "sleep 0.3"}] * 3, {"done": "x"}, session={"repeat_limit": 0})
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await pilot.press("t")
        await pilot.press(*"echo mine")
        await pilot.press("enter")
        await wait_for(pilot, lambda: "echo mine   (you)" in log_text(app))
        await pilot.press("h")
        await pilot.press(*"try ls")
        await pilot.press("enter")
        await pilot.press("p")
        await wait_for(pilot, lambda: "hint sent: try ls" in log_text(app))
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)


async def test_a_take_over_while_an_action_waits_for_approval_is_told_queued_and_runs_once(
    workspace: Path, tmp_path: Path
) -> None:
    """The taken command shows at once, so it is not typed again and run twice."""
    s = settings_for(workspace, tmp_path, {"bash": "echo model"}, {"done": "x"}, session={"approval": True})
    app = live_app(s)
    async with app.run_test(size=SIZE, notifications=True) as pilot:  # (toasts drawn, as a user sees them)
        await wait_for(pilot, lambda: app.pending is not None)
        await pilot.press("t")
        await pilot.press(*"echo mine")
        await pilot.press("enter")
        await pilot.pause(0.3)
        toasts = " ".join(str(t.render()) for t in app.screen.query("Toast"))  # (as drawn)
        assert "queued: it runs once you decide" in toasts, toasts
        await pilot.press("y")
        await wait_for(pilot, lambda: app.ended is not None)
        assert log_text(app).count("echo mine   (you)") == 1 and "  model" in log_text(app)
        await pilot.press("q")


async def test_keys_answer_while_yes_floods(workspace: Path, tmp_path: Path) -> None:
    s = settings_for(
        workspace, tmp_path, {"bash": "yes", "timeout": 8}, {"done": "x"}, sandbox={"output_limit": 0, "spill_limit": 0}
    )
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "\n  y\n  y" in log_text(app))
        # A key as the terminal would deliver it (Pilot.press waits for an idle app, which a flood never is).
        start = time.monotonic()
        app.post_message(Key("p", "p"))
        while app.query_one(StatusBar).state != "paused":
            assert time.monotonic() - start < 1.0, "the key was not answered within a second"
            await asyncio.sleep(0.01)
        assert len(app.query_one(ShellLog).lines) <= s.ui.max_lines
        start = time.monotonic()
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, seconds=15)
        assert time.monotonic() - start < 12  # quitting interrupts the flood instead of waiting it out


async def test_replay_shows_a_recording_and_keeps_escapes_inert() -> None:
    app = replay_app(RECORDING, speed=100.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.ended is not None)
        text = log_text(app)
        assert "6.1.0-sandshell" in text and "^[]0;pwned\\x07" in text
        assert "\x1b" not in text
        assert " REPLAY " in str(app.status.render())  # the status bar says it is not a live session


def test_snapshot_replayed_session(snap_compare: Callable[..., bool]) -> None:
    async def finish(pilot: object) -> None:
        app = pilot.app  # type: ignore[attr-defined]
        await wait_for(pilot, lambda: app.ended is not None)
        await pilot.pause(0.2)  # type: ignore[attr-defined]

    assert snap_compare(replay_app(RECORDING, speed=100.0), terminal_size=SIZE, run_before=finish)


def test_snapshot_help_screen(snap_compare: Callable[..., bool]) -> None:
    async def open_help(pilot: object) -> None:
        app = pilot.app  # type: ignore[attr-defined]
        await wait_for(pilot, lambda: app.ended is not None)
        await pilot.press("question_mark")  # type: ignore[attr-defined]
        await pilot.pause(0.2)  # type: ignore[attr-defined]

    assert snap_compare(replay_app(RECORDING, speed=100.0), terminal_size=SIZE, run_before=open_help)


async def test_the_log_follows_while_the_pane_shrinks_and_waits_when_scrolled_up(
    workspace: Path, tmp_path: Path
) -> None:
    """Following survives a smaller pane; scrolled up, a marker says output waits; End returns to the end."""
    s = settings_for(
        workspace,
        tmp_path,
        {"bash": "seq 1 300"},
        {"bash": "seq 1000 1300"},
        {"done": "ok"},
        session={"approval": True},
    )
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(ShellLog)
        await wait_for(pilot, lambda: app.pending is not None)  # the approval bar takes room from the log
        await pilot.press("y")
        await wait_for(pilot, lambda: "  300" in log.lines)
        await pilot.resize_terminal(100, 24)
        await pilot.pause(0.3)
        assert log.scroll_y == log.max_scroll_y, "the log stopped following when the pane shrank"
        log.scroll_home(animate=False, immediate=True)
        await wait_for(pilot, lambda: app.pending is not None)
        await pilot.press("y")
        await wait_for(pilot, lambda: "  1300" in log.lines)
        await pilot.pause(0.2)
        more = app.query_one("#more")
        assert log.scroll_y == 0 and more.has_class("active")  # the user's place is kept, and told
        assert "new lines below" in str(more.render())
        await pilot.press("end")
        await pilot.pause(0.2)
        assert log.scroll_y == log.max_scroll_y and not more.has_class("active")


async def test_the_approval_bar_shows_the_whole_action(workspace: Path, tmp_path: Path) -> None:
    long_command = "echo " + "a" * 3000 + " END-OF-COMMAND"
    content = "".join(f"line {i}\n" for i in range(200)) + "LAST LINE"
    s = settings_for(
        workspace,
        tmp_path,
        {"bash": long_command},
        {"write": "/app/notes.md", "content": content},
        {"done": "ok"},
        session={"approval": True},
    )
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.pending is not None)
        shown = str(app.query_one("#approval-action").render())
        assert "END-OF-COMMAND" in shown and "a" * 3000 in shown.replace("\n", "")
        await pilot.press("y")
        await wait_for(pilot, lambda: app.pending is not None and app.pending.kind == "write")
        shown = str(app.query_one("#approval-action").render())
        assert "/app/notes.md" in shown and "line 0" in shown and "LAST LINE" in shown
        scroll = app.query_one("#approval-scroll")
        assert scroll.max_scroll_y > 0 and scroll.has_focus  # longer than the bar: it scrolls
        await pilot.press("pagedown")
        await pilot.pause(0.1)
        assert scroll.scroll_y > 0
        await pilot.press("y")
        await wait_for(pilot, lambda: app.ended is not None)
    assert (workspace / "notes.md").read_text() == content


def shown_keys(app: SandshellApp) -> set[str]:
    """The actions the footer offers now (check_action hides those that do not apply)."""
    return {b.binding.action for b in app.screen.active_bindings.values() if b.binding.show}


async def test_every_key_in_every_state(workspace: Path, tmp_path: Path) -> None:
    s = settings_for(
        workspace,
        tmp_path,
        {"bash": "echo one"},
        {"bash": "sleep 1"},
        {"bash": "sleep 1.1"},
        {"done": "x"},
        session={"approval": True},
    )
    app = live_app(s)
    steering = {"pause", "approval", "hint", "take_over"}
    async with app.run_test(size=SIZE) as pilot:
        status = app.query_one(StatusBar)
        await wait_for(pilot, lambda: app.pending is not None)  # awaiting approval
        assert {"approve", "edit", "reject", "help", "quit_session"} | steering <= shown_keys(app)
        assert "step" not in shown_keys(app)
        assert "APPROVAL" in str(status.render()) and "waiting for approval" in str(status.render())
        assert "REPLAY" not in str(status.render())  # (a live session)

        def drawn() -> str:
            return " ".join(str(k.render()) for k in app.query("FooterKey"))

        await wait_for(pilot, lambda: "Approve" in drawn(), seconds=5)  # under load a frame may come late
        assert "Quit" in drawn()  # the footer is drawn, not blank
        await pilot.press("t", *"echo typed-while-waiting", "enter")  # queued behind the approval
        await pilot.press("a")  # approval mode off: the bar says so at once
        assert "APPROVAL" not in str(status.render())
        await pilot.press("y")
        await wait_for(pilot, lambda: app.pending is None)
        assert not {"approve", "edit", "reject"} & shown_keys(app)
        await pilot.press("p")  # paused: step appears
        assert "step" in shown_keys(app) and status.state == "paused"
        await pilot.press("p")
        await wait_for(pilot, lambda: app.ended is not None)
        await pilot.pause(0.1)
        assert not (steering | {"step"}) & shown_keys(app)  # done: nothing steers a finished session
        assert {"help", "quit_session"} <= shown_keys(app)
        await pilot.press("p", "t")
        assert status.state.startswith("session ") and not app.query_one("#ask").has_class("active")
        await pilot.press("question_mark")
        assert app.screen.__class__.__name__ == "HelpScreen"
        await pilot.press("escape")
        assert app.screen.__class__.__name__ != "HelpScreen"
        text = log_text(app)
        assert "echo typed-while-waiting   (you)" in text or "not run, the session had ended" in text
        await pilot.press("q")


async def test_replay_hides_the_keys_that_steer(tmp_path: Path) -> None:
    app = replay_app(RECORDING, speed=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        keys = shown_keys(app)
        assert "pause" in keys and not {"hint", "take_over", "approval", "step", "approve"} & keys
        await pilot.press("h", "t")
        assert not app.query_one("#ask").has_class("active")
        await pilot.press("q")


async def test_a_start_error_is_shown_whole_and_again_after_quit(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = "/nowhere/" + "a-very-long-folder-name/" * 6 + "model.gguf"
    s = settings_for(workspace, tmp_path, {"done": "x"}, model={"backend": "llama", "model_path": missing})
    app = live_app(s)
    async with app.run_test(size=(80, 30)) as pilot:
        await wait_for(pilot, lambda: app.ended is not None)
        await pilot.pause(0.1)
        lines = app.query_one(ShellLog).lines
        shown = " ".join(line[2:].strip() for line in lines)
        assert "model.gguf" in shown and "LLAMA_MODEL_PATH" in shown  # the whole sentence, what to do included
        assert max(len(line) for line in lines) <= 80  # wrapped to the pane, not cut at its edge
        assert "loading model" not in str(app.status.render())  # it will not load: the bar says so
        await pilot.press("q")
    from sandshell.cli import summary

    assert summary(app) == 1
    said = capsys.readouterr().err
    assert "sandshell: session error" in said and "why:" in said and "LLAMA_MODEL_PATH" in said
    assert "0 turns" in said


async def test_w_copies_the_workspace_back_while_the_session_runs(workspace: Path, tmp_path: Path) -> None:
    """With the workspace travelling as a copy (an engine elsewhere), `w` brings /app back now; the
    key is hidden when the folder is mounted."""
    # distinct commands: a repeated one would end the session as stuck, and the end copies back too
    s = settings_for(
        workspace,
        tmp_path,
        {"bash": "echo made > /app/made.txt"},
        *[{"bash": f"sleep 0.2 # {i}"} for i in range(200)],
        sandbox={"workspace_transfer": "archive", "sync_seconds": 0.0},
    )
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "echo made" in log_text(app) and app.check_action("sync", ()) is True)
        assert not (workspace / "made.txt").exists()
        await pilot.press("w")
        await wait_for(pilot, lambda: (workspace / "made.txt").exists())
        await wait_for(pilot, lambda: "/app copied back" in log_text(app))
        assert app.ended is None  # it came back on `w`, not with the end of the session
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)
    mounted = live_app(settings_for(workspace, tmp_path, *[{"bash": f"sleep 0.2 # {i}"} for i in range(200)]))
    async with mounted.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "sleep 0.2" in log_text(mounted))
        assert mounted.ended is None and mounted.check_action("sync", ()) is False
        await pilot.press("q")
        await wait_for(pilot, lambda: not mounted.is_running)


class SlowWriter(ScriptBackend):
    """The script backend writing each answer a piece at a time, as a slow machine's model does."""

    def __init__(self, lines: list[str], seconds: float) -> None:
        super().__init__(lines)
        self.seconds = seconds

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats]:
        for item in super().stream(messages, params):
            if isinstance(item, str):
                for i in range(0, len(item), 4):
                    time.sleep(self.seconds / max(1, len(item) // 4))
                    yield item[i : i + 4]
            else:
                yield item


def toasts(app: SandshellApp) -> str:
    return " ".join(str(t.render()) for t in app.screen.query("Toast"))


@pytest.mark.docker
async def test_take_over_while_the_model_writes_is_told_queued_and_x_runs_it_now(
    workspace: Path, tmp_path: Path
) -> None:
    answers = [json.dumps({"bash": "echo model-ran"}), json.dumps({"done": "x"})]
    s = settings_for(workspace, tmp_path)
    app = live_app(s, backend=SlowWriter(answers, seconds=30.0))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for(pilot, lambda: app.status.state == "generating", seconds=60)  # (a loaded machine)
        await pilot.press("t", *"echo mine", "enter")
        await pilot.pause(0.3)
        assert "queued: it runs after the answer being written" in toasts(app)
        assert "cut_short" in shown_keys(app)
        started = time.monotonic()
        await pilot.press("x")
        await wait_for(pilot, lambda: "echo mine   (you)" in log_text(app))
        assert time.monotonic() - started < 10  # not after the 30 s answer
        assert "cut short" in log_text(app) and "model-ran" not in log_text(app)
        assert "cut_short" not in shown_keys(app)
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)


async def test_the_shell_pane_has_the_keys_when_the_ui_opens() -> None:
    app = replay_app(RECORDING, speed=100.0)
    async with app.run_test(size=(100, 20)) as pilot:
        await wait_for(pilot, lambda: app.ended is not None)
        log = app.query_one(ShellLog)
        await pilot.pause(0.2)
        assert log.has_focus and log.max_scroll_y > 0
        end = log.scroll_y
        await pilot.press("pageup")
        await pilot.pause(0.1)
        assert log.scroll_y < end
        await pilot.press("home")
        await pilot.pause(0.1)
        assert log.scroll_y == 0
        await pilot.press("question_mark")
        assert "Tab" in str(app.screen.query_one("#help-text").render())  # how focus moves is told


async def test_at_80x24_the_shell_gets_the_width_and_g_brings_the_panel_back() -> None:
    app = replay_app(RECORDING, speed=100.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.ended is not None)
        log, panel = app.query_one(ShellLog), app.query_one("#world")
        assert log.size.width >= 76 and not panel.display
        assert "g shows it" in log_text(app)
        await pilot.press("g")
        await pilot.pause(0.1)
        assert panel.display and panel.size.width > 0
        await pilot.press("g")
        await pilot.pause(0.1)
        assert not panel.display
        await pilot.resize_terminal(140, 36)  # wide: the panel comes back by itself... unless g hid it
        await pilot.pause(0.1)
        assert not panel.display
    wide = replay_app(RECORDING, speed=100.0)
    async with wide.run_test(size=(140, 36)) as pilot:
        await pilot.pause(0.2)
        assert wide.query_one("#world").display


@pytest.mark.docker
async def test_the_status_bar_times_a_pause_from_the_key_and_a_step_shows_its_work(
    workspace: Path, tmp_path: Path
) -> None:
    s = settings_for(workspace, tmp_path, *[{"bash": f"sleep 1.5 # {i}"} for i in range(6)], {"done": "x"})
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        status = app.query_one(StatusBar)
        await wait_for(pilot, lambda: status.state == "running a command" and time.monotonic() - status.since > 1.2)
        await pilot.press("p")
        assert "[paused 0s]" in str(status.render())
        await wait_for(pilot, lambda: status.state == "paused" and "sleep 1.5 # 1" not in log_text(app), seconds=5)
        await pilot.pause(0.5)
        seen: set[str] = set()
        await pilot.press("s")
        deadline = time.monotonic() + 10
        while "sleep 1.5 # 1" not in log_text(app) or status.state != "paused":
            seen.add(status.state)
            assert time.monotonic() < deadline
            await pilot.pause(0.05)
        assert "running a command" in seen  # the step's command, not "paused" while it ran
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)


@pytest.mark.docker
async def test_a_read_shows_its_content_in_the_shell_pane(workspace: Path, tmp_path: Path) -> None:
    (workspace / "notes.txt").write_text("first line\nsecond line\n" + "".join(f"row {i}\n" for i in range(5000)))
    s = settings_for(workspace, tmp_path, {"read": "/app/notes.txt"}, {"done": "x"})
    app = live_app(s)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.ended is not None)
        lines = app.query_one(ShellLog).lines
        text = log_text(app)
        assert "  first line" in lines and "  second line" in lines
        assert "row 2500" not in text and "characters left out" in text  # bounded (what the model sees), and said so
        await pilot.press("q")


class SlowPrompt(ScriptBackend):
    """The script backend, its prompt evaluated in batches first, as llama.cpp does on a slow machine."""

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats | PromptProgress]:
        for done in range(512, 2049, 512):
            time.sleep(0.6)
            yield PromptProgress(done, 2048)
        yield from super().stream(messages, params)


@pytest.mark.docker
async def test_the_status_bar_shows_the_prompts_evaluation_as_it_goes(workspace: Path, tmp_path: Path) -> None:
    app = live_app(settings_for(workspace, tmp_path), backend=SlowPrompt([json.dumps({"done": "x"})]))
    async with app.run_test(size=SIZE) as pilot:
        seen: set[str] = set()
        while app.ended is None:
            seen.add(str(app.status.render()))
            await pilot.pause(0.05)
        assert any("[evaluating prompt 1,024/2,048 tokens" in s for s in seen), seen
        await pilot.press("q")
