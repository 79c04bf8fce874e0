"""Hostile text on every path to a person or a program: no live escape survives, nothing crashes.

Hypothesis generates strings made of controls (C0, C1, DEL), escape sequences (OSC 52 clipboard
writes, screen clears, DCS, 8-bit CSI), bidirectional overrides, lone surrogates, and huge and
empty values; they go into every text field of every event, then through the TUI (Pilot), the
`.cast` and `events.jsonl` (the recorder), headless stderr and the JSON result on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sandshell import config, safe_text
from sandshell.cli import print_result
from sandshell.config import Settings
from sandshell.model.actions import Action
from sandshell.model.script import ScriptBackend
from sandshell.model.types import Stats
from sandshell.runner import LineLog, run_task
from sandshell.sandbox.protocol import Result
from sandshell.session import events as ev
from sandshell.session.control import Control
from sandshell.session.recorder import Recorder
from sandshell.session.transcript import render
from sandshell.tui.app import SandshellApp
from sandshell.tui.buffer import UIBuffer
from sandshell.tui.widgets import ShellLog

LIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
OUR_STYLES = re.compile(r"\x1b\[[0-9;]*m")  # the colours the .cast adds itself
SEQUENCES = [
    "\x1b]52;c;cHduZWQ=\x07",  # write the clipboard
    "\x1b]0;title\x1b\\",
    "\x1b[2J\x1b[H",
    "\x1b[31m",
    "\x9b2J",  # 8-bit CSI
    "\x90+q\x9c",  # 8-bit DCS
    "\x1bP+q\x1b\\",
    "\r\x08\x7f",
    "\u202egnp.exe",  # right-to-left override: reads as exe.png
    "\ud83d",  # half of an emoji
    "\udcff",  # what surrogateescape makes of a 0xff byte
]
hostile = st.one_of(
    st.just(""),
    st.sampled_from(SEQUENCES),
    st.text(st.characters(min_codepoint=0, max_codepoint=0x2070, exclude_categories=()), max_size=40),
    st.lists(st.sampled_from(SEQUENCES) | st.text(max_size=5), max_size=12).map("".join),
    st.sampled_from(SEQUENCES).map(lambda s: s * 3000),  # huge
)
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def every_event(s: str) -> list[ev.Event]:
    """Each event kind, with `s` in every text it carries."""
    bash, read, write = Action("bash", s or "x", "", s), Action("read", s), Action("write", s, s, s)
    result = Result(
        s, 1, output=s, tail=s, stderr_tail=s, error=s, notice=s, signal=s, spill_path=s, user=s, host=s, cwd=s
    )
    return [
        ev.SessionStarted(s, s, s, s, {s: s}),
        ev.StateRead(s, s, s, (s,), (s,)),
        ev.ConfigChanged({s: s}, {s: [s, {s: s}]}),
        ev.TurnStarted(1, 10, 100, 200, 0),
        ev.ModelText(s),
        ev.ModelReplied(s, (bash,), s, Stats()),
        ev.ApprovalNeeded(write, s),
        ev.ActionStarted(bash, s, by_user=True),
        ev.ActionStarted(read, s),
        ev.ActionStarted(write, s),
        ev.OutputChunk("stdout", s),
        ev.OutputChunk("stderr", s),
        ev.ActionFinished(bash, s, result, ok=False),
        ev.ActionFinished(read, s, None, ok=False),
        ev.Notice("error", s),
        ev.Phase(s),
        ev.SessionEnded("error", s, s, 1, 1.0),
    ]


def test_inert_makes_every_sequence_visible() -> None:
    assert safe_text.visible("a\x1b]52;c;eA==\x07b") == "a^[]52;c;eA==\\x07b"
    assert safe_text.visible("\x9b2J\u202e\ud83d\n\t") == "\\x9b2J\\u202e\\ud83d\n\t"
    assert safe_text.visible("ünïcødé ✓ 日本") == "ünïcødé ✓ 日本"  # real text is left alone


@PROPS
@given(hostile)
def test_the_cast_and_headless_lines_carry_no_live_escape(s: str) -> None:
    for event in every_event(s):
        assert not LIVE.search(render(event, color=False).replace("\n", ""))
        assert not LIVE.search(OUR_STYLES.sub("", render(event, color=True)).replace("\n", ""))


@PROPS
@given(hostile)
@example("\ud83d\udcff")  # found by hypothesis: two lone surrogates that JSON reads back as one pair
def test_the_recording_is_inert_on_disk_and_keeps_the_exact_text(s: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        recorder = Recorder(Path(tmp) / "rec")
        for event in every_event(s):
            recorder.emit(event)
        recorder.close()
        for name in ("events.jsonl", "session.cast"):
            raw = (Path(tmp) / "rec" / name).read_bytes()
            text = raw.decode("utf-8")  # valid UTF-8: no surrogate reached the file
            assert not LIVE.search(text.replace("\n", "")), f"{name} holds a live control"
        logged = [json.loads(line) for line in (Path(tmp) / "rec" / "events.jsonl").read_text().splitlines()]
        assert logged[-1]["type"] == "SessionEnded" and logged[-1]["result"] == as_json_reads_it(s)  # lossless
        for line in (Path(tmp) / "rec" / "session.cast").read_text().splitlines()[1:]:
            _, _, shown = json.loads(line)
            assert not LIVE.search(OUR_STYLES.sub("", shown).replace("\r\n", "").replace("\n", ""))


def as_json_reads_it(s: str) -> str:
    """`s` exactly, but for one thing no JSON can keep apart: a lone high surrogate right before a lone
    low one (`"\ud83d\udcff"` reads back as the character the pair makes)."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


@PROPS
@given(hostile)
@example("\ud83d\udcff")
def test_headless_stderr_and_stdout_json_carry_no_live_escape(s: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        log = LineLog(echo=True)
        for event in every_event(s):
            log.emit(event)
        safe_text.say(s)
        print_result({"status": "error", "result": s, "error": s, "log": log.lines})
    assert not LIVE.search(err.getvalue().replace("\n", ""))
    assert out.getvalue().isascii() and not LIVE.search(out.getvalue().replace("\n", ""))
    assert json.loads(out.getvalue())["result"] == as_json_reads_it(s)


async def _show_in_the_tui(strings: list[str]) -> list[str]:
    def runner(buffer: UIBuffer, _control: Control) -> None:
        for s in strings:
            for event in every_event(s):
                buffer.emit(event)
        buffer.emit(ev.SessionEnded("done", "the end", None, 1, 1.0))

    app = SandshellApp(runner, Control())
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.query_one(ShellLog)
        while not any("session done: the end" in line for line in log.lines):
            await pilot.pause(0.05)
        return [*log.lines, *(str(w.render()) for w in app.query("Static"))]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile, min_size=1, max_size=6))
def test_the_tui_shows_no_live_escape(strings: list[str]) -> None:
    for text in asyncio.run(_show_in_the_tui(strings)):
        assert not LIVE.search(text.replace("\n", "")), repr(text[:200])


def _script_settings(workspace: Path, tmp_path: Path) -> Settings:
    base = config.load(env_file=None, environ={})
    return base.replace(
        sandbox=base.sandbox.replace(workspace=str(workspace), exit_timeout=5.0),
        session=base.session.replace(sessions_dir=str(tmp_path / "sessions")),
        model=base.model.replace(intro=False),
    )


@pytest.mark.docker
def test_a_hostile_folder_name_in_the_prompt_line_reaches_no_terminal(workspace: Path, tmp_path: Path) -> None:
    """user, host and cwd are the model's to choose: a folder named with an OSC 52 clipboard write."""
    cd = {"bash": "mkdir -p \"/tmp/$(printf '\\033]52;c;cHduZWQ=\\007\\033[2J\\302\\233')\" && cd /tmp/*52*"}
    steps = [cd, {"bash": "pwd"}, {"done": "there"}]
    out = run_task(
        "t",
        60,
        5,
        settings=_script_settings(workspace, tmp_path),
        backend=ScriptBackend([json.dumps(x) for x in steps]),
    )
    assert out["status"] == "done", out
    prompt = next(line for line in out["log"] if line.endswith("# pwd"))
    assert "^[]52;c;cHduZWQ=\\x07^[[2J\\x9b" in prompt and not LIVE.search(prompt)  # shown, not acted on
    folder = next(iter((tmp_path / "sessions").iterdir()))
    shown = "".join(json.loads(line)[2] for line in (folder / "session.cast").read_text().splitlines()[1:])
    assert "^[]52;c;cHduZWQ=" in shown and not LIVE.search(OUR_STYLES.sub("", shown).replace("\r\n", ""))


@pytest.mark.docker
def test_lone_surrogates_from_the_model_are_refused_and_the_session_goes_on(workspace: Path, tmp_path: Path) -> None:
    steps = [
        '[{"bash": "echo \\ud83d"}]',
        '[{"bash": "echo between"}]',
        '[{"write": "/app/\\udcff", "content": "x"}]',
        '[{"done": "\\udfff"}]',
        '[{"done": "fine"}]',
    ]
    out = run_task("t", 60, 6, settings=_script_settings(workspace, tmp_path), backend=ScriptBackend(steps))
    assert out["status"] == "done" and out["result"] == "fine", out
    assert sum("half of a character" in line for line in out["log"]) == 3
    assert list(workspace.iterdir()) == [] or not any("\\" in p.name for p in workspace.iterdir())
    folder = next(iter((tmp_path / "sessions").iterdir()))
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    assert events[-1]["type"] == "SessionEnded" and events[-1]["result"] == "fine"


@pytest.mark.docker
def test_invalid_utf8_on_the_command_line_is_one_sentence_or_runs(workspace: Path, tmp_path: Path) -> None:
    """A goal with a byte that is not UTF-8 (Python keeps it as a lone surrogate) never crashes the CLI."""
    script = tmp_path / "s.jsonl"
    script.write_text('{"bash": "cat /app/goal"}\n{"done": "read it"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "SANDSHELL_"))}
    env.update(SANDSHELL_HOME=str(tmp_path / "home"), SANDSHELL_WORKSPACE=str(workspace), LLAMA_INTRO="0")
    argv = [sys.executable, "-m", "sandshell.cli", "--headless", "--backend", "script", "--script", str(script)]
    proc = subprocess.run(
        [*argv, "--goal", b"goal \xff\xfe \x1b]52;c;eA==\x07".decode("utf-8", "surrogateescape")],
        capture_output=True,
        env=env,
        timeout=120,
    )
    result = json.loads(proc.stdout)
    assert result["status"] == "done", result
    assert "Traceback" not in proc.stderr.decode("utf-8", "replace")
    assert not LIVE.search(proc.stderr.decode("utf-8").replace("\n", ""))
