"""A session's recording and headless transcript stay within SANDSHELL_RECORDING_LIMIT, and still end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandshell.runner import FULL, LINE_CHARS, LineLog, run_task
from sandshell.session import events as ev
from sandshell.session.recorder import Recorder
from tests.conftest import _base_settings

CONTROLS = "".join(map(chr, range(1, 32)))  # each costs six bytes of JSON (\u0001) or more
END = ev.SessionEnded("done", "finished", None, 3, 1.0)


def recorded(folder: Path) -> tuple[int, list[dict[str, object]]]:
    size = (folder / "events.jsonl").stat().st_size + (folder / "session.cast").stat().st_size
    lines = (folder / "events.jsonl").read_text().splitlines()
    for line in (folder / "session.cast").read_text().splitlines():
        json.loads(line)  # every line of the .cast is whole
    return size, [json.loads(line) for line in lines]


@pytest.mark.parametrize("data", ["plain text\n" * 100, CONTROLS * 40], ids=["plain", "controls"])
def test_the_recording_stops_at_its_limit_with_a_notice_and_still_ends(tmp_path: Path, data: str) -> None:
    rec = Recorder(tmp_path, limit=50_000)
    for _ in range(2000):
        rec.emit(ev.OutputChunk("stdout", data))
    rec.emit(END)
    rec.close()
    size, events = recorded(tmp_path)
    assert 30_000 < size <= 50_000 + 2_000  # up to the limit, plus the notice and the end
    notices = [e for e in events if e["type"] == "Notice"]
    assert len(notices) == 1 and "SANDSHELL_RECORDING_LIMIT" in str(notices[0]["text"])
    assert events[-1]["type"] == "SessionEnded" and events[-2] == notices[0]


def test_no_limit_records_everything(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    for _ in range(200):
        rec.emit(ev.OutputChunk("stdout", CONTROLS * 40))
    rec.emit(END)
    rec.close()
    size, events = recorded(tmp_path)
    assert len(events) == 201 and size > 200 * len(CONTROLS) * 40 * 6


def test_the_echoed_transcript_stops_at_its_limit_and_keeps_lines_short(capsys: pytest.CaptureFixture[str]) -> None:
    log = LineLog(echo=True, limit=20_000)
    for _ in range(100):
        log.emit(ev.OutputChunk("stdout", "y" * 5000 + "\n"))
    log.emit(END)
    err = capsys.readouterr().err
    assert len(err) <= 20_000 + len(FULL) + 200 and err.count(FULL.strip()) == 1
    assert "finished" in err.split(FULL.strip())[1]  # the end is shown after the notice
    assert max(len(line) for line in log.lines) <= LINE_CHARS + 1


@pytest.mark.docker
def test_a_flood_of_control_bytes_fills_no_more_than_the_limit(tmp_path: Path) -> None:
    script = tmp_path / "flood.jsonl"
    flood = "python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(32)) * 40000)'"
    script.write_text(json.dumps([{"bash": flood, "timeout": 30}]) + "\n" + json.dumps([{"done": "ok"}]) + "\n")
    s = _base_settings(
        model={"backend": "script", "script_path": str(script), "intro": False}, session={"recording_limit": 256 * 1024}
    )
    (s.path(s.sandbox.workspace)).mkdir(exist_ok=True)
    result = run_task("flood", 60, 4, settings=s)
    assert result["status"] == "done", result["error"]
    size, events = recorded(Path(result["session"]))
    assert size <= 256 * 1024 + 4096 and events[-1]["type"] == "SessionEnded"
    assert any(e["type"] == "Notice" and "SANDSHELL_RECORDING_LIMIT" in str(e["text"]) for e in events)
