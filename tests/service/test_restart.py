"""The service across restarts: a crash loses nothing, running tasks come back interrupted, waiting ones
run after the restart, the token is kept."""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.net import free_port
from tests.service_util import Server, containers

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]


def test_after_a_crash_tasks_are_listed_and_the_running_one_is_interrupted_and_reaped(tmp_path: Path) -> None:
    first = Server(tmp_path)
    try:
        finished = first.task("quick", [{"bash": "echo kept"}, {"done": "all kept"}])
        first.wait(finished)
        running = first.task("long", [{"bash": "sleep 120"}, {"done": "never"}])
        first.wait(running, ("running",))
        deadline = time.monotonic() + 30
        while not containers(running) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert containers(running)
    finally:
        first.kill()  # as a crash: no clean-up at all
    assert containers(running), "the crashed server's sandbox is still there before the restart"
    second = Server(tmp_path)
    try:
        assert not containers(running), "the restart reaped it"
        t = second.get(running)
        assert t["status"] == "interrupted" and "running" in t["error"]
        ended = second.events(running)[-1]  # its recording ends as its task did, not in the middle of a turn
        assert ended[1] == "SessionEnded" and ended[2]["status"] == "interrupted", ended
        done = second.get(finished)
        assert (done["status"], done["result"]) == ("done", "all kept") and any("kept" in x for x in done["log"])
        listed = [t["id"] for t in second.http.get("/v1/tasks").json()["tasks"]]
        assert listed == [running, finished]
        replay = second.events(finished)  # a finished task's stream is its recording, from the start
        assert replay[0][1] == "SessionStarted" and replay[-1][2]["result"] == "all kept"
        again = second.task("after the restart", [{"done": "fine"}])
        assert second.wait(again)["status"] == "done"
    finally:
        second.stop()


def test_stopping_the_server_ends_running_tasks_as_interrupted(tmp_path: Path) -> None:
    server = Server(tmp_path)
    running = server.task("long", [{"bash": "sleep 120"}, {"done": "never"}])
    server.wait(running, ("running",))
    server.stop()  # SIGTERM: a clean stop
    assert server.proc.returncode is not None
    assert not containers(running)
    back = Server(tmp_path)
    try:
        assert back.get(running)["status"] == "interrupted"
    finally:
        back.stop()


def test_a_token_is_made_once_kept_0600_and_printed_only_then(tmp_path: Path) -> None:
    first = Server(tmp_path, token=None)
    first.stop()
    path = tmp_path / "sessions" / ".service" / "api-token"
    token = path.read_text().strip()
    assert len(token) >= 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert token in first.output()
    second = Server(tmp_path, token=None)
    try:
        assert token not in second.output()
        assert httpx.get(f"{second.url}/v1/tasks").status_code == 401
        ok = httpx.get(f"{second.url}/v1/tasks", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
        page = httpx.get(f"{second.url}/?token={token}", follow_redirects=False)
        assert page.status_code == 303 and "httponly" in page.headers["set-cookie"].lower()
        assert "samesite=strict" in page.headers["set-cookie"].lower()
        assert httpx.get(f"{second.url}/?token=wrong").status_code == 401
    finally:
        second.stop()


def test_tasks_waiting_at_a_crash_run_after_the_restart_in_their_order(tmp_path: Path) -> None:
    first = Server(tmp_path, SANDSHELL_MAX_SESSIONS="1")
    try:
        running = first.task("long", [{"bash": "sleep 120"}, {"done": "never"}])
        first.wait(running, ("running",))
        waiting = [first.task(f"wait {i}", [{"bash": f"echo {i} >> /tmp/x"}, {"done": f"ran {i}"}]) for i in range(2)]
        assert [first.get(t)["status"] for t in waiting] == ["queued", "queued"]
    finally:
        first.kill()  # as a crash
    second = Server(tmp_path, SANDSHELL_MAX_SESSIONS="1")
    try:
        assert second.get(running)["status"] == "interrupted"
        ended = [second.wait(t) for t in waiting]
        assert [(t["status"], t["result"]) for t in ended] == [("done", "ran 0"), ("done", "ran 1")]
        assert ended[0]["ended"] <= ended[1]["started"]  # one at a time, in the order they came
    finally:
        second.stop()


def test_a_second_server_on_the_same_port_or_folder_is_refused_and_touches_nothing(tmp_path: Path) -> None:
    """A second `serve` on a busy port must not mark the first one's running task interrupted on disk,
    nor run its queued task, before uvicorn finds the port taken."""
    first = Server(tmp_path, SANDSHELL_MAX_SESSIONS="1")
    try:
        running = first.task("long", [{"bash": "sleep 120"}, {"done": "never"}])
        first.wait(running, ("running",))
        waiting = first.task("queued", [{"done": "later"}])
        record = tmp_path / "sessions" / running / "task.json"
        recording = tmp_path / "sessions" / running / "events.jsonl"
        deadline = time.monotonic() + 30  # (the record is saved at each turn: wait for the sleep's)
        while time.monotonic() < deadline and not (recording.is_file() and "sleep 120" in recording.read_text()):
            time.sleep(0.05)
        before = record.read_text()
        assert '"running"' in before
        for port, said in (
            (first.port, f"port {first.port} on 127.0.0.1 is in use"),
            (free_port(), "another sandshell server"),
        ):
            second = subprocess.run(
                [sys.executable, "-m", "sandshell.cli", "serve", "--port", str(port)],
                cwd=tmp_path,
                env=first.env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            out = second.stdout + second.stderr
            assert second.returncode != 0 and said in out and "Traceback" not in out, out
            assert len(out.strip().splitlines()) == 1, out
        assert record.read_text() == before
        assert first.get(running)["status"] == "running" and first.get(waiting)["status"] == "queued"
        assert not (tmp_path / "sessions" / waiting / "events.jsonl").exists(), "the queued task ran elsewhere"
        first.proc.send_signal(signal.SIGINT)  # Ctrl-C: a stop like any other (uvicorn.run took it so)
        assert first.proc.wait(40) == 0 and "Traceback" not in first.output(), first.output()[-2000:]
    finally:
        first.stop()
