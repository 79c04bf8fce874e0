"""./start.sh in a real terminal (a pty driven by pexpect, the screen rendered by pyte): what a user sees."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import docker
import pytest

from sandshell.sandbox import engine
from tests.terminal import Terminal
from tests.test_scripts import REPO, env_for

pytestmark = [pytest.mark.docker, pytest.mark.terminal, pytest.mark.model]

ROWS, COLS = 36, 120


@contextmanager
def start(tmp_path: Path, workspace: Path, *args: str, **env: str) -> Iterator[Terminal]:
    """./start.sh in a pty, closed afterwards; once it has ended, it must have cleaned up."""
    term = Terminal(["./start.sh", *args], cwd=str(REPO), env=env_for(tmp_path, workspace, **env), cols=COLS, rows=ROWS)
    try:
        yield term
    finally:
        term.close()
    assert_cleaned_up(tmp_path)


def scripted(tmp_path: Path, workspace: Path, *actions: dict[str, object]) -> AbstractContextManager[Terminal]:
    """./start.sh on the script backend playing `actions`, without the intro."""
    actions_file = script(tmp_path, *actions)
    return start(tmp_path, workspace, "--backend", "script", "--script", actions_file, LLAMA_INTRO="false")


def script(tmp_path: Path, *actions: dict[str, object]) -> str:
    path = tmp_path / "script.jsonl"
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return str(path)


def only_session(tmp_path: Path) -> Path:
    sessions = list((tmp_path / "sessions").iterdir())
    assert len(sessions) == 1
    return sessions[0]


def assert_cleaned_up(tmp_path: Path) -> None:
    """The container is gone, the recording ends with its end event, and nothing was written into the checkout."""
    folder = only_session(tmp_path)
    left = docker.from_env().containers.list(all=True, sparse=True, filters={"label": f"{engine.LABEL}={folder.name}"})
    assert not left, "start.sh left its container behind"
    last = json.loads((folder / "events.jsonl").read_text().splitlines()[-1])
    assert last["type"] == "SessionEnded"
    assert (tmp_path / "home" / ".env").exists()  # start.sh made the user's .env in SANDSHELL_HOME


@pytest.fixture(autouse=True)
def checkout_untouched() -> Iterator[None]:
    """start.sh makes a missing .env: in SANDSHELL_HOME, never in the checkout."""
    before = (REPO / ".env").exists()
    yield
    assert (REPO / ".env").exists() == before


@pytest.mark.slow
def test_start_sh_reaches_the_models_first_command_and_quits_cleanly(tmp_path: Path, workspace: Path) -> None:
    """The default model, no configuration: the intro runs, the model's own first action runs, q quits."""
    with start(tmp_path, workspace) as term:
        term.wait_for(r"0 root@sandbox:/app # pwd && ls -la", 240)  # the intro ran in the sandbox
        term.wait_for(r"turn 1 ─[\s\S]*\n *[❯◆] ", 180)  # the model's own first action ran
        term.send("q")
        assert term.wait_exit(60) == 0


def test_the_view_follows_a_flood_to_the_end(tmp_path: Path, workspace: Path) -> None:
    """10,000 lines, more than the pane keeps: the newest line and the end of the session stay on screen."""
    with scripted(tmp_path, workspace, {"bash": "seq 1 10000 | sed 's/^/row /'"}, {"done": "flooded"}) as term:
        screen = term.wait_for(r"session done: flooded .* press q to quit", 120)
        assert "row 10000" in screen, "the last line of the flood is not on screen"
        term.send("q")
        assert term.wait_exit(60) == 0


def test_ctrl_c_during_output_after_a_resize_quits_cleanly(tmp_path: Path, workspace: Path) -> None:
    slow = "for i in $(seq 1 400); do echo tick $i; sleep 0.05; done"
    with scripted(tmp_path, workspace, {"bash": slow, "timeout": 60}, {"done": "never reached"}) as term:
        term.wait_for(r"tick 20\b", 120)
        term.resize(90, 24)
        screen = term.wait_for(r"tick (4\d|[5-9]\d)\b", 30)  # still streaming, drawn at the new size
        assert max(len(line.rstrip()) for line in screen.splitlines()) <= 90
        term.send("\x03")
        assert term.wait_exit(60) == 0
    events = (only_session(tmp_path) / "events.jsonl").read_text()
    assert "tick 400" not in events, "the command ran on after Ctrl-C"


def test_the_view_follows_after_a_take_over_and_q_during_output_quits(tmp_path: Path, workspace: Path) -> None:
    ticks = "for i in $(seq 1 60); do echo tick $i; sleep 0.05; done"
    tocks = "for i in $(seq 1 600); do echo tock $i; sleep 0.05; done"
    with scripted(tmp_path, workspace, {"bash": ticks}, {"bash": tocks, "timeout": 90}, {"done": "x"}) as term:
        term.wait_for(r"tick 5\b", 120)
        term.send("t")
        term.wait_for(r"a command to run as you", 10)
        term.send("seq 1 300 | sed 's/^/mine /'\r")  # runs after the model's command, before its next turn
        term.wait_for(r"mine 300\b", 60)  # the newest line of the user's own command is on screen
        term.wait_for(r"tock 5\b", 60)  # the model's next command streams, and is followed
        term.send("q")  # q during that output quits at once
        assert term.wait_exit(30) == 0
    events = (only_session(tmp_path) / "events.jsonl").read_text()
    assert "mine 300" in events and '"by_user": true' in events
    assert "tock 600" not in events, "the command ran on after q"


WAITING = ({"bash": "echo waiting; sleep 60", "timeout": 90}, {"done": "never reached"})


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_end_the_ui_like_q(tmp_path: Path, workspace: Path, sig: signal.Signals) -> None:
    """A `kill` or a closed terminal: the container is removed and the recording gets its end event."""
    with scripted(tmp_path, workspace, *WAITING) as term:
        term.wait_for(r"\n +waiting +│", 120)
        os.kill(term.child.pid, sig)  # start.sh exec'd python: this is sandshell itself
        assert term.wait_exit(30) == 0


@pytest.mark.slow
def test_a_terminal_closed_under_a_busy_ui_ends_the_process(tmp_path: Path, workspace: Path) -> None:
    """The terminal itself gone (its window closed; `tmux kill-session`): the session ends, and so
    must the process, not stay blocked on a write to the lost terminal and deaf to SIGTERM."""
    ticking = {"bash": "while true; do echo tick; sleep 0.005; done", "timeout": 90}
    with scripted(tmp_path, workspace, ticking, {"done": "never reached"}) as term:
        term.wait_for(r"tick", 120)
        pty, pid = term.child.ptyproc, term.child.pid
        pty.fileobj.close()  # the master side closed: the kernel hangs the terminal up (SIGHUP, then EIO)
        pty.closed = term.child.closed = True
        deadline = time.monotonic() + 50
        while term.child.isalive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not term.child.isalive(), f"sandshell (pid {pid}) still runs with its terminal gone"


def test_sigterm_ends_a_headless_run_with_its_json(tmp_path: Path, workspace: Path) -> None:
    actions = script(tmp_path, *WAITING)
    proc = subprocess.Popen(
        ["./start.sh", "--headless", "--backend", "script", "--script", actions, "--goal", "wait"],
        cwd=REPO,
        env=env_for(tmp_path, workspace, LLAMA_INTRO="false"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while "waiting" not in _events_text(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    result = json.loads(out)
    assert result["status"] == "quit" and result["error"] == "interrupted", (result, err[-2000:])
    assert_cleaned_up(tmp_path)


def _events_text(tmp_path: Path) -> str:
    folders = list((tmp_path / "sessions").glob("*/events.jsonl")) if (tmp_path / "sessions").exists() else []
    return folders[0].read_text() if folders else ""
